"""Thin kopf handlers: reconcile (validate → build → apply → status), write the status, post the
events, count. A registry per operator instance, so that tests can run several in one process.

One watching handler sees every event of every KimiDeployment and reconciles when the spec's
`generation` is not yet the status's `observedGeneration` (the Kubernetes-native "has this spec been
acted on"), so kopf keeps no bookkeeping of its own on the objects: no annotations, no finalizer
(which would block deleting a KimiDeployment whenever the operator is not running), and no write
beyond the children and the status. The operator's own loop retries failures with backoff and
resyncs every deployment periodically, restoring children edited or deleted by hand. Events of
the LeaderWorkerSets and ComputeDomains it manages (`child_watches`, not kopf: see k8s/watch.py)
refresh their owner at once: readiness shows without waiting for the resync.
"""

import asyncio
import datetime
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import kopf

from kimi_operator.api import constants as c
from kimi_operator.api.problem import Problem
from kimi_operator.builders import OperatorDefaults
from kimi_operator.builders.meta import MANAGER
from kimi_operator.k8s.client import Client, connection_info, retry_delay
from kimi_operator.k8s.events import post_warning
from kimi_operator.k8s.resources import COMPUTE_DOMAIN, KIMI_DEPLOYMENT, LEADER_WORKER_SET
from kimi_operator.k8s.watch import ChildWatch
from kimi_operator.metrics import Metrics
from kimi_operator.reconcile import reconcile

RESOURCE = (c.GROUP, c.VERSION, c.PLURAL)
log = logging.getLogger("kimi_operator")


@dataclass
class OperatorContext:
    configuration: Any  # kubernetes.client.Configuration: the operator's and kopf's credentials
    client: Client
    defaults: OperatorDefaults
    metrics: Metrics
    resync_interval_s: float = 60.0
    workers: int = 16
    # uid -> (namespace, name) of every KimiDeployment kopf has seen and not seen deleted.
    known: dict[str, tuple[str, str]] = field(default_factory=dict)
    # uid -> the generation whose status was last written (or found already written).
    acted: dict[str, int | None] = field(default_factory=dict)
    _locks: dict[str, threading.Lock] = field(default_factory=dict)
    # uid -> (when, trigger): reconciles to run soon: retries, and refreshes after a child's
    # status changed.
    _soon: dict[str, tuple[float, str]] = field(default_factory=dict)
    # uid -> temporary failures in a row (the retry backoff grows with them).
    failures: dict[str, int] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)
    # Events are posted by a thread of their own, after the reconcile: under a burst, creating
    # children and writing statuses goes first.
    events: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="kimi-events")
    )

    @contextmanager
    def exclusive(self, uid: str) -> Iterator[None]:
        """One reconcile at a time per object: the resync runs beside the change handlers."""
        with self._guard:
            lock = self._locks.setdefault(uid, threading.Lock())
        with lock:
            yield

    def track(self, uid: str, namespace: str, name: str) -> None:
        with self._guard:
            self.known[uid] = (namespace, name)

    def forget(self, uid: str, namespace: str, name: str) -> None:
        """A deletion waits for the deployment's reconcile in flight, which would otherwise
        record its state (`acted`, the gauge) after it was dropped, for good."""
        with self.exclusive(uid):
            self.drop(uid, namespace, name)

    def drop(self, uid: str, namespace: str, name: str) -> None:
        """`forget`, for a caller that holds the uid's lock already."""
        with self._guard:
            self.known.pop(uid, None)
            self._locks.pop(uid, None)
            self._soon.pop(uid, None)
            self.acted.pop(uid, None)
            self.failures.pop(uid, None)
        self.metrics.forget(namespace, name)

    def schedule(self, uid: str, delay_s: float, trigger: str) -> None:
        """Reconcile `uid` after `delay_s` (or sooner, if already due sooner). A pending retry
        is never brought forward: the API server asked for that wait (429 Retry-After, or our
        backoff after errors), and the retry reads the newest state anyway."""
        with self._guard:
            self._put(uid, time.monotonic() + delay_s, trigger)

    def _put(self, uid: str, when: float, trigger: str) -> None:
        """`schedule`, under `_guard`. A new retry replaces whatever was pending, a sooner
        refresh included (a child created just before the failure asks for one)."""
        pending = self._soon.get(uid)
        if trigger == "retry" or pending is None or (pending[1] != "retry" and pending[0] > when):
            self._soon[uid] = (when, trigger)

    def retry_done(self, uid: str) -> None:
        with self._guard:
            self.failures.pop(uid, None)
            if self._soon.get(uid, (0.0, ""))[1] == "retry":
                del self._soon[uid]

    def retry_later(self, uid: str, error: kopf.TemporaryError) -> None:
        with self._guard:
            if uid not in self.known:
                return  # deleted while its reconcile failed: nothing left to retry
            failures = self.failures.get(uid, 0)
            self.failures[uid] = failures + 1
            self._put(uid, time.monotonic() + retry_delay(error, failures), "retry")

    def retry_pending(self, uid: str) -> bool:
        """Whether `uid` waits for a retry not due yet: no other reconcile may cut it short."""
        with self._guard:
            when, trigger = self._soon.get(uid, (0.0, ""))
            return trigger == "retry" and when > time.monotonic()

    def backing_off(self, now: float) -> set[str]:
        """The uids whose retry is not due yet: the periodic resync leaves them to it."""
        with self._guard:
            return {
                uid
                for uid, (when, trigger) in self._soon.items()
                if trigger == "retry" and when > now
            }

    def due(self, now: float) -> dict[str, str]:
        """uid -> trigger of the scheduled reconciles whose time has come."""
        with self._guard:
            due = {uid: trigger for uid, (when, trigger) in self._soon.items() if when <= now}
            for uid in due:
                del self._soon[uid]
            return due

    def snapshot(self) -> dict[str, tuple[str, str]]:
        with self._guard:
            return dict(self.known)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def handle(ctx: OperatorContext, trigger: str, body: Mapping[str, Any], *, fresh: bool) -> bool:
    """Reconcile one KimiDeployment and write its status when it changed; False when there was
    nothing to reconcile. `fresh`: `body` is the newest state (a watch event); otherwise it is
    read again under the lock."""
    started = time.monotonic()
    meta = body["metadata"]
    uid, namespace, name = meta["uid"], meta["namespace"], meta["name"]
    with ctx.exclusive(uid):
        if ctx.retry_pending(uid):
            return False  # it failed meanwhile (this one waited for the lock): the retry waits
        acted = ctx.acted.get(uid)
        if fresh and acted is not None and acted >= (meta.get("generation") or 0):
            return False  # a repeated or late event for a generation already acted on
        if not fresh:
            latest = ctx.client.get(KIMI_DEPLOYMENT, namespace, name)
            if latest is None or latest["metadata"].get("uid") != uid:
                ctx.drop(uid, namespace, name)  # its DELETED event was missed (a dropped watch)
                return False
            body = latest
        # A spec not yet acted on (whichever path gets to it first): say its warnings once.
        observed = (body.get("status") or {}).get("observedGeneration")
        spec_changed = observed != body["metadata"].get("generation")
        outcome = reconcile(
            body,
            ctx.client,
            ctx.defaults,
            spec_changed=spec_changed,
            now=_now(),
            failures=ctx.failures.get(uid, 0),
        )
        if outcome.status != (body.get("status") or {}):
            status = {"status": outcome.status}
            ctx.client.patch(KIMI_DEPLOYMENT, namespace, name, status, subresource="status")
        ctx.acted[uid] = body["metadata"].get("generation")
        ctx.metrics.set_conditions(namespace, name, outcome.status)  # before a deletion forgets
        if outcome.requeue_after_s is not None:
            ctx.schedule(uid, outcome.requeue_after_s, "requeue")
    if outcome.events:
        ctx.events.submit(post_warnings, ctx.client, body, outcome.events)
    ctx.metrics.reconciles.labels(trigger, outcome.result).inc()
    ctx.metrics.duration.labels(trigger).observe(time.monotonic() - started)
    if outcome.error is not None:
        raise outcome.error
    return True


def post_warnings(client: Client, body: Mapping[str, Any], problems: Sequence[Problem]) -> None:
    """Best effort, as Kubernetes treats events: a failure is logged, never retried."""
    meta = body["metadata"]
    for problem in problems:
        try:
            post_warning(client, body, problem.reason, problem.message)
        except (kopf.TemporaryError, kopf.PermanentError) as error:
            log.warning(
                "event %s on %s/%s not posted: %s",
                problem.reason,
                meta["namespace"],
                meta["name"],
                error,
            )


def attempt(ctx: OperatorContext, trigger: str, body: Mapping[str, Any], *, fresh: bool) -> None:
    """`handle`, with failures counted, logged and retried: temporary ones after their delay,
    permanent ones at the next periodic resync."""
    meta = body["metadata"]
    try:
        reconciled = handle(ctx, trigger, body, fresh=fresh)
    except (kopf.TemporaryError, kopf.PermanentError) as error:
        log.warning("reconcile of %s/%s failed: %s", meta["namespace"], meta["name"], error)
        if isinstance(error, kopf.TemporaryError):
            ctx.metrics.errors.labels("temporary").inc()
            ctx.retry_later(meta["uid"], error)
        else:
            ctx.metrics.errors.labels("permanent").inc()
    else:
        if reconciled:  # not a skipped late event: the pending retry stays
            ctx.retry_done(meta["uid"])


async def resync_forever(ctx: OperatorContext, tick_s: float = 0.25) -> None:
    """Run the scheduled reconciles when due (retries, refreshes), and every `resync_interval_s`
    reconcile every known KimiDeployment. A resync that finds nothing changed writes nothing."""
    limit = asyncio.Semaphore(ctx.workers)

    async def one(uid: str, namespace: str, name: str, trigger: str) -> None:
        stub = {"metadata": {"uid": uid, "namespace": namespace, "name": name}}
        async with limit:
            await asyncio.to_thread(attempt, ctx, trigger, stub, fresh=False)

    next_resync = time.monotonic() + ctx.resync_interval_s
    while True:
        await asyncio.sleep(min(tick_s, ctx.resync_interval_s))
        now = time.monotonic()
        known = ctx.snapshot()
        if now >= next_resync:
            next_resync = now + ctx.resync_interval_s
            backing_off = ctx.backing_off(now)
            due = {uid: "resync" for uid in known if uid not in backing_off}
        else:
            due = {uid: trigger for uid, trigger in ctx.due(now).items() if uid in known}
        await asyncio.gather(*(one(uid, *known[uid], trigger) for uid, trigger in due.items()))


def _trigger(event: Mapping[str, Any], body: Mapping[str, Any]) -> str | None:
    """Why a watch event calls for a reconcile, or None when it does not."""
    status = body.get("status") or {}
    if not status:
        return "create"
    if event.get("type") is None:  # the listing at start-up: children may have drifted meanwhile
        return "resume"
    if body["metadata"].get("generation") == status.get("observedGeneration"):
        return None  # a status write, or metadata only: the spec was acted on already
    return "update"


def child_watches(ctx: OperatorContext, namespaces: Sequence[str]) -> list[ChildWatch]:
    """A watch per resource whose status feeds a deployment's, per namespace (or cluster-wide):
    a change refreshes its owner now rather than at the next resync."""

    def refresh(uid: str) -> None:
        ctx.schedule(uid, 0.0, "refresh")

    return [
        ChildWatch(
            ctx.configuration,
            resource,
            namespace,
            refresh,
            label_selector=f"app.kubernetes.io/managed-by={MANAGER}",
        )
        for resource in (LEADER_WORKER_SET, COMPUTE_DOMAIN)
        for namespace in ([*namespaces] if namespaces else [None])
    ]


def make_registry(ctx: OperatorContext) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(ctx.configuration)

    # Async handlers: most events need no reconcile, and those skip the trip to a thread.
    @kopf.on.event(*RESOURCE, id="reconcile", registry=registry)
    async def on_event(event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
        meta = body.metadata
        uid, namespace, name = meta.uid or "", meta.namespace or "", meta.name or ""
        if event.get("type") == "DELETED":
            await asyncio.to_thread(ctx.forget, uid, namespace, name)  # waits for a reconcile
            return
        ctx.track(uid, namespace, name)
        trigger = _trigger(event, body)
        if trigger is not None:
            await asyncio.to_thread(attempt, ctx, trigger, body, fresh=True)

    return registry
