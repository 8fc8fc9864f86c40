"""Drain before delete (docs/group-lifecycle.md, "Leaving"), pure: a Ready group that leaves (a
scale-down's, a rollout's before its new template is written, a prefill group no longer wanted)
is first taken out of routing, then deleted or rewritten once its leader holds no request, or
once `spec.serving.drainSeconds` have passed.

Out of routing: its leader pods' `kimi-operator.io/routable` label is set to "false" (the
Service and the InferencePool select "true", which every pod template carries; the pods, not the
template, are patched: a template change would recreate them). The start is recorded on its
LeaderWorkerSet (`kimi-operator.io/draining-since`), so an operator restarted meanwhile carries
on, and the grace counts from it. In flight: vLLM's `num_requests_running` plus
`num_requests_waiting` on the leader's /metrics, read by observe.py; no answer is "unknown" and
waits for the grace. A decode leader behind llm-d's routing sidecar (spec.prefill) is "unknown"
too, unread: the sidecar holds each request through its remote prefill before it hands it to its
own vLLM, so vLLM's counts miss those, and llm-d-router v0.10.0's sidecar exposes no count of
its own (its /metrics is vLLM's, passed through: third_party/llm-d-router-v0.10.0-epp.yaml), so
such a group waits its whole grace (`drainSeconds`). A group wanted again first is put back
(pods first, then the mark: a mark removed with its pods still out would leave them out).
Nothing waits here: while a group drains the reconcile looks again every `POLL_S` seconds.
"""

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kimi_operator import group_life
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.bench.server_metrics import parse
from kimi_operator.builders.disaggregation import SIDECAR_NAME
from kimi_operator.builders.meta import LWS_WORKER_INDEX_LABEL, ROUTABLE_LABEL
from kimi_operator.k8s.merge import Write
from kimi_operator.k8s.resources import LEADER_WORKER_SET, POD
from kimi_operator.rollout import (
    DRAINING_ANNOTATION,
    TIME_FORMAT,
    draining_since,
    epoch,
    group_ready,
)

POLL_S = 2.0  # how soon a reconcile looks again at a group draining
IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")
VLLM_CONTAINER = "vllm"


@dataclass(frozen=True)
class Draining:
    """A group out of routing, not yet gone."""

    name: str
    since: str  # RFC 3339
    in_flight: int | None  # requests its leader holds; None: unknown (no answer yet)


@dataclass
class Drains:
    """What the drains of one reconcile write and keep."""

    go: set[str] = field(default_factory=set)  # leaving groups deleted now
    hold: set[str] = field(default_factory=set)  # groups to rewrite, held while they drain
    # Before the children are applied: drains started, leaders out of or back into routing,
    # marks removed.
    writes: list[Write] = field(default_factory=list)
    draining: list[Draining] = field(default_factory=list)
    news: list[tuple[str, str]] = field(default_factory=list)  # (reason, message): Normal Events

    @property
    def requeue_after_s(self) -> float | None:
        return POLL_S if self.draining else None


def in_flight(metrics: str) -> int | None:
    """Requests running and waiting on a vLLM server (every engine's), from its Prometheus text;
    None when it shows neither series."""
    totals = parse(metrics).totals
    if not any(name in totals for name in IN_FLIGHT):
        return None
    return round(sum(totals[name] for name in IN_FLIGHT))


def leaders(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The leader pods (what the Service and the pool select), but those terminating."""
    return [
        p
        for p in pods
        if (p["metadata"].get("labels") or {}).get(LWS_WORKER_INDEX_LABEL) == "0"
        and not p["metadata"].get("deletionTimestamp")
    ]


def _addressed(pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a leader has an IP: one without was never sent a request."""
    return any((p.get("status") or {}).get("podIP") for p in leaders(pods))


def behind_sidecar(pod: Mapping[str, Any]) -> bool:
    """Whether a leader runs llm-d's routing sidecar (a decode leader with spec.prefill)."""
    init = pod.get("spec", {}).get("initContainers") or []
    return any(c.get("name") == SIDECAR_NAME for c in init)


def metrics_url(pod: Mapping[str, Any]) -> str | None:
    """vLLM's /metrics on a leader: its IP, its vllm container's `http` port; None before it has
    an IP, and behind the routing sidecar (what the sidecar holds cannot be read: unknown)."""
    if behind_sidecar(pod):
        return None
    ip = (pod.get("status") or {}).get("podIP")
    for container in pod.get("spec", {}).get("containers", []):
        if container.get("name") != VLLM_CONTAINER:
            continue
        for port in container.get("ports", []):
            if port.get("name") == "http" and ip:
                host = f"[{ip}]" if ":" in ip else ip
                return f"http://{host}:{port['containerPort']}/metrics"
    return None


def _route(pods: Sequence[Mapping[str, Any]], value: str) -> list[Write]:
    """Label the leaders not already so (conditional on each pod as read)."""
    out = []
    for pod in leaders(pods):
        meta = pod["metadata"]
        if (meta.get("labels") or {}).get(ROUTABLE_LABEL) == value:
            continue
        body = {"metadata": {"labels": {ROUTABLE_LABEL: value}}}
        body["metadata"]["resourceVersion"] = meta["resourceVersion"]
        out.append(Write("patch", POD, meta["namespace"], meta["name"], body))
    return out


def _mark(group: Mapping[str, Any], since: str | None) -> Write:
    """Record (or, None, remove) the drain on the LeaderWorkerSet, as read."""
    meta = group["metadata"]
    body = {"metadata": {"annotations": {DRAINING_ANNOTATION: since}}}
    body["metadata"]["resourceVersion"] = meta["resourceVersion"]
    return Write("patch", LEADER_WORKER_SET, meta["namespace"], meta["name"], body)


def leave(
    kd: KimiDeployment,
    group: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]] | None,
    count: int | None,
    *,
    now: str,
) -> Drains:
    """One leaving group: `go` (nothing to drain: no grace asked, not Ready, no leader with an
    IP; or drained, or its grace passed), or its drain's writes and state. `pods`: the group's
    (None: not read this time); `count`: its leader's requests in flight (None: unknown)."""
    name, grace = group["metadata"]["name"], kd.spec.serving.drain_seconds
    found = None if pods is None else leaders(pods)
    if grace == 0 or not group_ready(group) or (pods is not None and not _addressed(pods)):
        return Drains(go={name})
    since = draining_since(group)
    out = Drains(writes=_route(found or [], "false"))
    if since is None:
        out.writes.insert(0, _mark(group, now))
        out.draining.append(Draining(name, now, None))
        out.news.append(("DrainStarted", f"{name} out of routing, draining for up to {grace} s"))
        return out
    started, at = epoch(since), epoch(now)
    elapsed = None if started is None or at is None else at - started
    # Counted once its leaders were out of routing (no write left to take them out).
    if count == 0 and not out.writes:
        return Drains(go={name}, news=[("Drained", f"{name} drained: no request in flight")])
    if elapsed is None or elapsed >= grace:
        held = "unknown requests" if count is None else f"{count} requests"
        why = f"{name} drain ended: spec.serving.drainSeconds ({grace} s) passed, {held} in flight"
        return Drains(go={name}, news=[("Drained", why)])
    out.draining.append(Draining(name, since, count))
    return out


def back(group: Mapping[str, Any], pods: Sequence[Mapping[str, Any]] | None) -> list[Write]:
    """A group kept: wanted again while it drained, its leaders back into routing, then the mark
    removed (nothing while its pods are unknown: the mark says to look again). Not draining, its
    leaders made from a template before the label (an operator upgraded) are labelled "true":
    the Service selects the label at once, the group's new template comes with its rollout."""
    if pods is None:
        return []
    if draining_since(group) is None:
        before = [p for p in pods if ROUTABLE_LABEL not in (p["metadata"].get("labels") or {})]
        return _route(before, "true")
    return [*_route(pods, "true"), _mark(group, None)]


def unlabelled(group: Mapping[str, Any]) -> bool:
    """Whether a group's leader template lacks the routable label (made by an operator before
    it): its pods need the label before the Service's selector asks for it."""
    template = group.get("spec", {}).get("leaderWorkerTemplate", {})
    pod = template.get("leaderTemplate") or template.get("workerTemplate") or {}
    return ROUTABLE_LABEL not in (pod.get("metadata", {}).get("labels") or {})


def cancelled(name: str) -> tuple[str, str]:
    return ("DrainCancelled", f"{name} wanted again: back in routing")


def plan(
    kd: KimiDeployment,
    live: Mapping[str, Mapping[str, Any]],
    *,
    kept: Collection[str],
    rewrites: Collection[str],
    prune: bool,
    pods: Sequence[Mapping[str, Any]] | None,
    counts: Mapping[str, int | None],
    now: str,
    leaving: Collection[str] = (),
) -> Drains:
    """The drains of the live groups (by name): those not `kept` leave (only when the reconcile
    prunes), and those `leaving` (kept, but evacuated: evacuation.py); those in `rewrites` get a
    new template (held while they drain); the others kept are put back if they were draining.
    `pods`: the deployment's (None: not read)."""
    by_group = group_life.by_group(pods or [])
    out = Drains()
    for name, group in sorted(live.items()):
        group_pods = None if pods is None else by_group.get(name, [])
        goes = name not in kept or name in leaving
        if not goes and name not in rewrites:
            restore = back(group, group_pods)
            out.writes += restore
            out.news += [cancelled(name)] if restore and draining_since(group) else []
            continue
        if name not in kept and not prune:
            continue
        step = leave(kd, group, group_pods, counts.get(name), now=now)
        if name in kept and name in rewrites and not step.go:
            out.hold.add(name)
        out.go |= step.go if goes else set()
        out.writes += step.writes
        out.draining += step.draining
        out.news += step.news
    return out


def message(kd: KimiDeployment, draining: Sequence[Draining]) -> str:
    """What Progressing says of the groups draining ("" for none)."""
    grace = kd.spec.serving.drain_seconds
    parts = []
    for d in draining:
        held = "unknown requests" if d.in_flight is None else f"{d.in_flight} requests"
        started = epoch(d.since)
        until = "" if started is None else time.strftime(TIME_FORMAT, time.gmtime(started + grace))
        parts.append(
            f"{d.name} out of routing, draining: {held} in flight; goes when they finish or at "
            f"{until} (spec.serving.drainSeconds {grace})"
        )
    return "; ".join(parts)
