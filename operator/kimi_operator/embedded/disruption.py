"""A stand-in for kube-controller-manager's disruption controller (pkg/controller/disruption): each
PodDisruptionBudget's status kept true to the pods it selects, which the eviction subresource
(embedded.eviction) then spends.

As the controller does: the budget's pods are those of its namespace its selector matches (no
selector: none; `{}`: all); `expectedPods` is their count for an integer `minAvailable`, else the
scale of their controllers (a percentage or `maxUnavailable` needs it; a pod without a controller
reference, or whose controller is gone, fails the sync, `SyncFailed`, as getExpectedScale does: a
group's pods outliving its LeaderWorkerSet allow no disruption); `desiredHealthy` follows from
`minAvailable` or `maxUnavailable` (a percentage rounded up); `currentHealthy` counts the pods
Ready, not terminating and not named in `disruptedPods` (an eviction granted whose deletion is not
seen yet, forgotten after DELETION_TIMEOUT); `disruptionsAllowed` is their difference, never below
0, and 0 while no pod is expected. The pods' controllers are the LeaderWorkerSets whose label the
pods carry (LWS's StatefulSets, whose scale the real controller reads, are not modelled): replicas
times size.
"""

import datetime
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kimi_operator.embedded.kubelet import write_status
from kimi_operator.embedded.scheduler import LWS_NAME_LABEL, selects
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import LEADER_WORKER_SET, POD, POD_DISRUPTION_BUDGET

DELETION_TIMEOUT = datetime.timedelta(minutes=2)  # the controller's DeletionTimeout
DISRUPTION_ALLOWED = "DisruptionAllowed"


def timestamp(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parsed(stamp: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def is_ready(pod: Mapping[str, Any]) -> bool:
    """podutil.IsPodReady: the pod's Ready condition is True."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def disrupted(pod: Mapping[str, Any], reason: str, message: str) -> dict[str, Any]:
    """The pod's status with the DisruptionTarget condition that whoever deletes it for a
    disruption adds first (podutil.UpdatePodCondition): the eviction subresource, the
    taint-eviction controller."""
    status = dict(pod.get("status") or {})
    target = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": timestamp(datetime.datetime.now(datetime.UTC)),
    }
    others = [c for c in status.get("conditions") or [] if c["type"] != "DisruptionTarget"]
    return {**status, "conditions": [*others, target]}


def with_allowed_condition(
    status: dict[str, Any], now: datetime.datetime, message: str = ""
) -> dict[str, Any]:
    """`status` with its DisruptionAllowed condition set as pdbhelper's
    UpdateDisruptionAllowedCondition sets it (`message`: a failed sync's, SyncFailed)."""
    allowed = status.get("disruptionsAllowed", 0) > 0
    reason = "SyncFailed" if message else "SufficientPods" if allowed else "InsufficientPods"
    wanted = {
        "type": DISRUPTION_ALLOWED,
        "status": "True" if allowed else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": status.get("observedGeneration", 0),
    }
    conditions = status.get("conditions") or []
    old: Mapping[str, Any] = next((c for c in conditions if c["type"] == DISRUPTION_ALLOWED), {})
    changed = old.get("status") != wanted["status"]
    wanted["lastTransitionTime"] = (
        timestamp(now) if changed else old.get("lastTransitionTime", timestamp(now))
    )
    others = [c for c in conditions if c["type"] != DISRUPTION_ALLOWED]
    return {**status, "conditions": [*others, wanted]}


def _scaled(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent, rounding up."""
    if isinstance(value, str):
        return math.ceil(int(value.rstrip("%")) * total / 100)
    return value


class NoController(Exception):
    """A pod whose controller's scale the budget needs has none."""


def _expected(
    spec: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    scale_of: Callable[[str], int | None],
) -> int:
    """expectedPods: the pods' count for an integer minAvailable, else their controllers'
    scale (`scale_of` a LeaderWorkerSet's name; None: not there)."""
    if isinstance(spec.get("minAvailable"), int):
        return len(pods)
    scales: dict[str, int] = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        owner = (pod["metadata"].get("labels") or {}).get(LWS_NAME_LABEL)
        if owner is None:
            raise NoController(f'found no controller ref for pod "{name}"')
        if owner not in scales:
            scale = scale_of(owner)
            if scale is None:
                raise NoController(f'found no controllers for pod "{name}"')
            scales[owner] = scale
    return sum(scales.values())


def budget_status(
    pdb: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    scale_of: Callable[[str], int | None],
    now: datetime.datetime,
) -> dict[str, Any]:
    """The status the disruption controller writes for `pdb` over its namespace's `pods`."""
    spec, old = pdb["spec"], pdb.get("status") or {}
    generation = pdb["metadata"].get("generation", 1)
    selector = spec.get("selector")
    mine = [
        p
        for p in pods
        if selector is not None and selects(selector, p["metadata"].get("labels") or {})
    ]
    try:
        expected = _expected(spec, mine, scale_of)
    except NoController as failure:
        failed = {**old, "disruptionsAllowed": 0, "observedGeneration": generation}
        return with_allowed_condition(failed, now, str(failure))
    if "minAvailable" in spec:
        desired = _scaled(spec["minAvailable"], expected)
    else:
        desired = max(0, expected - _scaled(spec.get("maxUnavailable", 0), expected))
    disrupted = {}
    for pod in mine:
        name = pod["metadata"]["name"]
        since = (old.get("disruptedPods") or {}).get(name)
        terminating = pod["metadata"].get("deletionTimestamp")
        if since is not None and not terminating and _parsed(since) + DELETION_TIMEOUT > now:
            disrupted[name] = since
    healthy = sum(
        1
        for pod in mine
        if is_ready(pod)
        and not pod["metadata"].get("deletionTimestamp")
        and pod["metadata"]["name"] not in disrupted
    )
    allowed = healthy - desired if expected > 0 else 0
    status = {
        "observedGeneration": generation,
        "disruptionsAllowed": max(0, allowed),
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        **({"disruptedPods": disrupted} if disrupted else {}),
        "conditions": old.get("conditions") or [],
    }
    return with_allowed_condition(status, now)


def _lws_scale(client: Client, namespace: str) -> Callable[[str], int | None]:
    """A LeaderWorkerSet's pods: replicas times size (None for one not there)."""

    def scale_of(name: str) -> int | None:
        lws = (
            client.get(LEADER_WORKER_SET, namespace, name)
            if client.served(LEADER_WORKER_SET)
            else None
        )
        if lws is None:
            return None
        spec = lws.get("spec") or {}
        size = (spec.get("leaderWorkerTemplate") or {}).get("size", 1)
        return int(spec.get("replicas", 1)) * int(size)

    return scale_of


def sync_budgets(client: Client, now: datetime.datetime | None = None) -> list[str]:
    """One pass of the disruption controller over every PodDisruptionBudget: the status of each
    written where it changed; returns `namespace/name` of each written."""
    at = now or datetime.datetime.now(datetime.UTC)
    written = []
    for pdb in client.list(POD_DISRUPTION_BUDGET):
        meta = pdb["metadata"]
        pods = client.list(POD, meta["namespace"])
        status = budget_status(pdb, pods, _lws_scale(client, meta["namespace"]), at)
        old = pdb.get("status") or {}
        if status != old:
            # A merge patch: the pods no longer disrupted removed by name.
            now_disrupted = status.get("disruptedPods")
            gone = dict.fromkeys(old.get("disruptedPods") or {})
            disrupted = {**gone, **now_disrupted} if now_disrupted else None
            change = {**status, "disruptedPods": disrupted}
            name = meta["name"]
            if write_status(client, POD_DISRUPTION_BUDGET, meta["namespace"], name, change):
                written.append(f"{meta['namespace']}/{name}")
    return written
