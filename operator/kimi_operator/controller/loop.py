"""The controller: watches enqueue KimiDeployment uids, workers reconcile them, one at a time per
uid (docs/architecture.md, "The controller loop").

The watches' side (`observe`, `deleted`, `child_changed`, `resync`) only records and enqueues;
it never waits for a reconcile. A worker owns a uid from `get` to `done`, so everything the
controller remembers of a deployment (`deployments`: the generation acted on and pruned at, the
gauge, the backoff) is written by one thread at a time, and a deletion is processed after any
reconcile in flight: nothing is left behind.
"""

import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from kimi_operator import slo_roles
from kimi_operator.api.constants import API_VERSION, KIND
from kimi_operator.api.problem import Problem
from kimi_operator.api.status import progressing_reason
from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults
from kimi_operator.conditions import TERMINATING
from kimi_operator.controller.metrics import Metrics
from kimi_operator.controller.queue import Clock, WorkQueue
from kimi_operator.controller.retry import retry_delay, temporary
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError, KubernetesError, NotLeading, OwnerTerminating
from kimi_operator.k8s.events import post_warning
from kimi_operator.k8s.merge import removals
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT
from kimi_operator.reconcile import Outcome, attributes, reconcile, terminating
from kimi_operator.spans import Tracing, current, root, span

log = logging.getLogger("kimi_operator")
# Reasons that come with the watched object: a late or repeated one is skipped.
EVENT_REASONS = frozenset({"create", "update", "resume"})
Reconcile = Callable[..., Outcome]
# How often every KimiDeployment is listed, to find one whose ADDED event a watch missed.
RELIST_INTERVAL_S = 300.0
UNEXPECTED = "unexpected"  # the errors counter's kind for a bug (an exception not from the API)
# Validated once before the workers start: the engineArgs rules compile their patterns on first
# use (0.2 s alone), under a lock that a burst's first reconciles would all wait on.
WARM_UP = {
    "apiVersion": API_VERSION,
    "kind": KIND,
    "metadata": {"name": "warm-up", "namespace": "default"},
    "spec": {
        "model": {"name": "warm-up", "source": {"pvc": {"claimName": "warm-up"}}},
        "gpus": 8,
        "engineArgs": ["--seed", "1"],
    },
}


@dataclass
class Deployment:
    """What the controller remembers of one KimiDeployment between its reconciles."""

    namespace: str
    name: str
    acted: int | None = None  # the generation whose status was last written (or found so)
    pruned: int | None = None  # the generation last reconciled with pruning, without a failure
    failed: bool = False  # the last reconcile failed


def trigger(event_type: str | None, obj: Mapping[str, Any]) -> str | None:
    """Why a KimiDeployment watch event calls for a reconcile, or None when it does not."""
    status = obj.get("status") or {}
    if terminating(obj):  # status only, once: a deletion is no new spec
        return None if progressing_reason(status) == TERMINATING else "terminating"
    if not status:
        return "create"
    if event_type is None:  # the listing at start-up: children may have drifted meanwhile
        return "resume"
    if obj["metadata"].get("generation") == status.get("observedGeneration"):
        return None  # a status write, or metadata only: the spec was acted on already
    return "update"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Controller:
    def __init__(
        self,
        client: Client,
        defaults: OperatorDefaults,
        metrics: Metrics,
        *,
        workers: int = 16,
        resync_interval_s: float = 60.0,
        relist_interval_s: float = RELIST_INTERVAL_S,
        namespaces: Sequence[str] = (),
        clock: Clock = time.monotonic,
        reconcile_fn: Reconcile = reconcile,
        tracing: Tracing | None = None,
    ) -> None:
        """`tracing`: each reconcile a trace (kimi_operator/spans.py); None: none."""
        self.client, self.defaults, self.metrics = client, defaults, metrics
        self.workers, self.resync_interval_s = workers, resync_interval_s
        self.relist_interval_s, self.namespaces = relist_interval_s, namespaces
        defaults.image_gate.serve(namespaces)  # the turn is given knowing them all
        self.queue = WorkQueue(clock)
        self.deployments: dict[str, Deployment] = {}
        self._reconcile = reconcile_fn
        self.tracing = tracing
        self._guard = threading.Lock()
        self._known: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name), not deleted
        self._objects: dict[str, Mapping[str, Any]] = {}  # uid -> watched object to reconcile
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        # Warning Events are posted by a thread of their own, after the reconcile: under a
        # burst, creating children and writing statuses goes first.
        self._posting = ThreadPoolExecutor(1, thread_name_prefix="kimi-events")

    # The watches' side.

    def observe(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """A KimiDeployment watch event (`event_type` None: listed at start-up)."""
        meta = obj["metadata"]
        uid = meta["uid"]
        if event_type == "DELETED":
            self.deleted(uid)
            return
        if meta.get("deletionTimestamp"):  # it never moves again: nor takes the turn back
            self.defaults.image_gate.forget(uid)
        why = trigger(event_type, obj)
        with self._guard:
            self._known[uid] = (meta["namespace"], meta["name"])
            if why is None and uid not in self._objects:
                return
            self._objects[uid] = obj  # the newest seen, for the reconcile queued
        if why is not None:
            self.queue.add(uid, why)

    def deleted(self, uid: str) -> None:
        with self._guard:
            self._known.pop(uid, None)
            self._objects.pop(uid, None)
            self.queue.remove(uid)  # a pending retry does not hold the deletion back
            self.queue.add(uid, "delete")

    def child_changed(self, owner_uid: str) -> None:
        """A LeaderWorkerSet, ComputeDomain or weights Job or claim of `owner_uid` changed its
        status or went away."""
        with self._guard:
            if owner_uid not in self._known:
                return
        self.queue.add(owner_uid, "refresh")

    def node_changed(self, event_type: str | None, node: Mapping[str, Any]) -> None:
        """A Node watch event: when the nodes groups must leave changed, every known deployment
        is reconciled (which of them runs there is in their pods, not watched)."""
        if self.defaults.nodes.observe(event_type, node):
            self.resync()

    def nodes_listed(self) -> None:
        """The Node watch listed every node: what is unfit is known from now on, and every
        deployment is looked at again with it, the first time (group_set.py: unknown begins
        no evacuation)."""
        if self.defaults.nodes.listed():
            self.resync()

    def resync(self) -> None:
        """Every known deployment again: restores children edited or deleted by hand, prunes
        what a crash or a lost event left. One with a retry pending is left to it."""
        with self._guard:
            uids = list(self._known)
        for uid in uids:
            self.queue.add(uid, "resync")

    # The workers' side.

    def process_one(self, timeout_s: float | None = None) -> bool:
        """Reconcile the next due uid; False when there was none (or the queue is shut down)."""
        item = self.queue.get(timeout_s)
        if item is None:
            return False
        uid, reason = item
        try:
            self._sync(uid, reason)
        except Exception:  # a bug must not end the worker: logged with its traceback, retried
            # at the resync, and counted apart from the API's refusals (an alert, a failed test)
            log.exception("reconcile of %s (%s) raised unexpectedly", uid, reason)
            self.metrics.errors.labels(UNEXPECTED).inc()
        finally:
            self.queue.done(uid)
        return True

    def _sync(self, uid: str, reason: str) -> None:
        with self._guard:
            where = self._known.get(uid)
            obj = self._objects.pop(uid, None)
            state = self.deployments.get(uid)
            if where is not None and state is None:
                state = self.deployments[uid] = Deployment(*where)
        if where is None or state is None:
            self._drop(uid)
            return
        if obj is not None and (state.acted or 0) >= (obj["metadata"].get("generation") or 0):
            if reason in EVENT_REASONS:
                return  # a repeated or late event for a generation already acted on
            obj = None
        started = time.monotonic()
        named = {
            "k8s.namespace.name": state.namespace,
            "kimi.deployment": state.name,
            "kimi.reconcile.trigger": reason,
        }
        with root(self.tracing, "reconcile", named) as traced:
            try:
                outcome = self._reconcile_object(uid, state, obj, resync=reason == "resync")
            except KubernetesError as error:  # reading the object, or writing its status
                traced.set_attributes({"kimi.reconcile.result": "error", **attributes.error(error)})
                self._failed(uid, state, error)
                return
            if outcome is None:
                traced.set_attribute("kimi.reconcile.result", "gone")
                return
            traced.set_attributes(attributes.outcome(outcome))
        self.metrics.reconciles.labels(reason, outcome.result).inc()
        self.metrics.duration.labels(reason).observe(time.monotonic() - started)
        if outcome.error is not None:
            self._failed(uid, state, outcome.error)
        else:
            state.failed = False
            self.queue.forget(uid)

    def _reconcile_object(
        self, uid: str, state: Deployment, obj: Mapping[str, Any] | None, *, resync: bool
    ) -> Outcome | None:
        """Reconcile `obj` (None: read it now), write its status; None when it is gone."""
        if obj is None:
            obj = self._read(state)
            if obj is None or obj["metadata"].get("uid") != uid:
                with self._guard:  # its DELETED event was missed (a dropped watch)
                    self._known.pop(uid, None)
                self._drop(uid)
                return None
        old = obj.get("status") or {}
        generation = obj["metadata"].get("generation")
        # Pruning lists every child kind: only when it can find something (docs/architecture.md).
        prune = resync or state.failed or state.pruned != generation
        current().set_attributes(
            {"kimi.generation": generation or 0, "kimi.reconcile.prune": prune}
        )
        outcome = self._reconcile(
            obj,
            self.client,
            self.defaults,
            spec_changed=old.get("observedGeneration") != generation,
            now=_now(),
            failures=self.queue.failures(uid),
            prune=prune,
        )
        with span("status") as step:
            written = outcome.status != old
            # Before the write: a write that fails (a conflict, a timeout) is recorded on the
            # span beside what it would have said.
            step.set_attributes(attributes.status(outcome.status, changed=written))
            if written:
                self._write_status(state, obj, outcome.status)
        state.acted = generation
        if prune and outcome.error is None:
            # A child kept for what still needs it: the next reconcile prunes again.
            state.pruned = None if outcome.prune_later else generation
        elif outcome.prune_again and not prune:  # a child the plan dropped, not listed now
            state.pruned = None
            self.queue.add(uid, "requeue")
        self.metrics.set_conditions(uid, outcome.status)
        meta = obj["metadata"]
        self.metrics.set_slo(uid, meta.get("namespace", ""), meta["name"], outcome.status)
        for seconds, fraction in outcome.startups:
            self.metrics.group_startup.observe(seconds)
            self.metrics.group_startup_budget.observe(fraction)
        for reason in outcome.failures:
            self.metrics.group_failures.labels(reason).inc()
        for reason in outcome.evacuations:
            self.metrics.evacuations.labels(reason).inc()
        if outcome.requeue_after_s is not None:
            self.queue.add_after(uid, outcome.requeue_after_s, "requeue")
        if outcome.events:
            self._posting.submit(post_warnings, self.client, obj, outcome.events)
        if outcome.notices:
            self._posting.submit(post_warnings, self.client, obj, outcome.notices, "Normal")
        return outcome

    def _read(self, state: Deployment) -> dict[str, Any] | None:
        """The deployment as it is now (None: gone)."""
        return self.client.get(KIMI_DEPLOYMENT, state.namespace, state.name)

    def _write_status(
        self, state: Deployment, obj: Mapping[str, Any], status: Mapping[str, Any]
    ) -> None:
        """Conditional on `obj`, the version the status was made from (docs/architecture.md,
        "Write rules"): refused (409) when it changed since. The merge patch replaces the
        status: what the version holds and `status` lacks is set to null (removed), so the
        server keeps only what the operator reports. When only its status or metadata moved on
        (another status write landed first), the status still describes its spec: it is
        written once more on the version read afresh; after an edit, or its deletion, the 409
        stands (the retry reconciles what is there now)."""
        meta = obj["metadata"]
        version, stored = meta.get("resourceVersion"), obj.get("status") or {}
        for last in (False, True):
            patch = {"metadata": {"resourceVersion": version}, "status": removals(stored, status)}
            try:
                self.client.patch(
                    KIMI_DEPLOYMENT, state.namespace, state.name, patch, subresource="status"
                )
                return
            except ApiError as error:
                if error.code != 409 or last:
                    raise
                fresh = self._read(state) or {}
                now = fresh.get("metadata") or {}
                if (now.get("uid"), now.get("generation")) != (meta["uid"], meta.get("generation")):
                    raise
                version, stored = now.get("resourceVersion"), fresh.get("status") or {}

    def _failed(self, uid: str, state: Deployment, error: KubernetesError) -> None:
        """Temporary failures are retried after their delay, permanent ones at the resync; the
        next reconcile prunes either way (a failure may have cut a scale-down short)."""
        state.failed = True
        # Fenced (this replica is stepping down), or the owner being deleted since it was read:
        # no failure, nothing to retry (the deletion's own event brings the status-only reconcile).
        if isinstance(error, NotLeading | OwnerTerminating):
            log.info("reconcile of %s/%s ended: %s", state.namespace, state.name, error)
            return
        log.warning("reconcile of %s/%s failed: %s", state.namespace, state.name, error)
        if not (isinstance(error, ApiError) and temporary(error)):
            self.metrics.errors.labels("permanent").inc()
            return
        self.metrics.errors.labels("temporary").inc()
        with self._guard:
            if uid in self._known:  # else deleted meanwhile: nothing left to retry
                self.queue.retry(uid, retry_delay(error, self.queue.failures(uid)))

    def _drop(self, uid: str) -> None:
        self.defaults.image_gate.forget(uid)  # a turn it held goes to the next deployment
        with self._guard:
            state = self.deployments.pop(uid, None)
        if state is not None:
            slo_roles.forget(state.namespace, state.name)
        self.queue.remove(uid)
        self.metrics.forget(uid)

    # Running.

    def start(self) -> None:
        """`workers` threads reconciling, one thread resyncing every `resync_interval_s`."""
        check_document(WARM_UP)
        self._threads = [
            threading.Thread(target=self._work, name=f"kimi-reconcile-{i}", daemon=True)
            for i in range(self.workers)
        ]
        self._threads.append(
            threading.Thread(target=self._resync_forever, name="kimi-resync", daemon=True)
        )
        for thread in self._threads:
            thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stopping.set()
        self.queue.shut_down()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._posting.shutdown(wait=True)

    def known(self) -> dict[str, tuple[str, str]]:
        with self._guard:
            return dict(self._known)

    def _work(self) -> None:
        while self.process_one():
            pass

    def relist(self) -> int:
        """List every KimiDeployment and queue those the controller does not know (an ADDED
        event lost with a dropped watch: the resync revisits known ones only); how many."""
        found = 0
        for namespace in self.namespaces or (None,):
            try:
                listed = self.client.list(KIMI_DEPLOYMENT, namespace)
            except KubernetesError as error:
                log.warning("relisting KimiDeployments: %s; again at the next relist", error)
                continue
            known = self.known()
            for obj in listed:
                if obj["metadata"]["uid"] not in known:
                    self.observe(None, obj)
                    found += 1
        return found

    def _resync_forever(self) -> None:
        next_relist = time.monotonic() + self.relist_interval_s
        while not self._stopping.wait(self.resync_interval_s):
            self.resync()
            if time.monotonic() >= next_relist:
                next_relist = time.monotonic() + self.relist_interval_s
                if self.relist():
                    log.warning("relist found KimiDeployments no watch event announced")


def post_warnings(
    client: Client,
    obj: Mapping[str, Any],
    problems: Sequence[Problem],
    kind: Literal["Warning", "Normal"] = "Warning",
) -> None:
    """Best effort, as Kubernetes treats events: a failure is logged, never retried."""
    meta = obj["metadata"]
    for problem in problems:
        try:
            post_warning(client, obj, problem.reason, problem.message, kind)
        except KubernetesError as error:
            log.warning(
                "event %s on %s/%s not posted: %s",
                problem.reason,
                meta["namespace"],
                meta["name"],
                error,
            )
