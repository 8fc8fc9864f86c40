"""The status a KimiDeployment reports, computed from what one reconcile saw. Pure.

Conditions follow the Kubernetes API conventions: CamelCase reasons, plain messages, and a
`lastTransitionTime` that moves only when a condition's status changes, so that a reconcile that
finds nothing new computes exactly the status already written (and writes nothing).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kimi_operator.api.problem import Problem
from kimi_operator.api.status import Condition, ConditionType, KimiDeploymentStatus

Status = Literal["True", "False", "Unknown"]
CONDITION_TYPES: tuple[ConditionType, ...] = (
    "Ready",
    "Progressing",
    "Degraded",
    "SpecValid",
    "MNNVLReady",
    "WeightsReady",
    "RoutingReady",
)


@dataclass(frozen=True)
class Observation:
    """What a reconcile of a valid spec found in the cluster."""

    groups_wanted: int
    groups_present: int
    groups_ready: int
    endpoint: str
    unschedulable: str = ""  # why a group's pods wait for nodes (the scheduler's words)
    warnings: Sequence[str] = ()
    blockers: Sequence[Problem] = ()  # Ready=False: a missing API, a failed apply
    weights_pending: Sequence[Problem] = ()  # Ready=False for now: resolving, downloading
    degradations: Sequence[Problem] = ()  # serving, but not as intended
    compute_domain: Literal["Disabled", "NotInstalled", "InUse"] = "InUse"
    domains_wanted: int = 0
    domains_ready: int = 0
    compute_domain_install: str = ""
    groups_updated: int = 0  # of groups_wanted, those with the current pod template
    # With spec.prefill: the prefill groups wanted, present and ready (the others are decode's).
    prefill_wanted: int = 0
    prefill_present: int = 0
    prefill_updated: int = 0
    prefill_ready: int = 0
    rolling: bool = False  # a pod template change is rolling through the groups
    stalled: str = ""  # why the rollout stopped (a group past its progress deadline)
    waiting: str = ""  # a new default image waits for this deployment's turn
    weights: tuple[Status, str, str] = ("True", "ClaimGiven", "")
    routing: tuple[Status, str, str] = ("True", "Service", "")  # routing.routing_condition
    draining: str = ""  # the groups out of routing, draining before they go (drain.py)
    older_template: str = ""  # the groups left on an earlier operator's template (upgrades.py)
    evacuating: str = ""  # the groups leaving unfit nodes (evacuation.py)


@dataclass
class ConditionSet:
    entries: dict[ConditionType, tuple[Status, str, str]] = field(default_factory=dict)

    def set(self, kind: ConditionType, status: Status, reason: str, message: str) -> None:
        self.entries[kind] = (status, reason, message)


def _groups_text(seen: Observation) -> str:
    text = f"{seen.groups_ready} of {seen.groups_wanted} TP groups ready"
    if seen.prefill_wanted:
        text += f", {seen.prefill_ready} of {seen.prefill_wanted} prefill groups"
    return text


def _all_ready(seen: Observation) -> bool:
    """Every wanted group of each role ready: with spec.prefill, Ready needs both roles."""
    return seen.groups_ready >= seen.groups_wanted and seen.prefill_ready >= seen.prefill_wanted


def _ready(seen: Observation) -> tuple[Status, str, str]:
    """Ready while groups come and go: every wanted group of each role ready, or not."""
    if _all_ready(seen):
        return "True", "AllGroupsReady", f"{_groups_text(seen)}; serving"
    return "False", "GroupsNotReady", _groups_text(seen)


def _rolling(seen: Observation) -> tuple[Status, str, str]:
    """Progressing during a rollout: how far it is, and why it stopped or what drains."""
    updated = f"{seen.groups_updated} of {seen.groups_wanted} groups updated"
    if seen.prefill_wanted:
        updated += f", {seen.prefill_updated} of {seen.prefill_wanted} prefill groups"
    if seen.stalled:
        return "False", "RolloutStalled", f"{updated}; {seen.stalled}"
    return "True", "RollingOut", f"{updated}; {seen.draining}" if seen.draining else updated


def valid_conditions(seen: Observation) -> ConditionSet:
    out = ConditionSet()
    warnings = "; ".join(seen.warnings)
    out.set(
        "SpecValid", "True", "Valid", f"valid with warnings: {warnings}" if warnings else "valid"
    )
    wanted = seen.groups_wanted
    if seen.blockers:
        first = seen.blockers[0]
        out.set("Ready", "False", first.reason, "; ".join(b.message for b in seen.blockers))
        out.set("Progressing", "False", first.reason, "blocked until the problem above is fixed")
    elif seen.weights_pending:
        first = seen.weights_pending[0]
        message = "; ".join(w.message for w in seen.weights_pending)
        out.set(
            "Ready", "False", first.reason, f"no TP group until the weights are ready: {message}"
        )
        out.set("Progressing", "True", first.reason, message)
    elif wanted == 0:
        out.set("Ready", "False", "ScaledToZero", "spec.replicas is 0: no TP group runs")
        out.set("Progressing", "False", "Reconciled", "all children match the spec")
    elif seen.rolling or seen.stalled:
        out.set("Ready", *_ready(seen))
        out.set("Progressing", *_rolling(seen))
    elif seen.waiting and _all_ready(seen):
        out.set("Ready", "True", "AllGroupsReady", f"{_groups_text(seen)}; serving")
        out.set("Progressing", "True", "WaitingForTurn", seen.waiting)
    elif seen.evacuating or (seen.draining and _all_ready(seen)):
        out.set("Ready", *_ready(seen))
        moving = "; ".join(m for m in (seen.evacuating, seen.draining) if m)
        out.set("Progressing", "True", "Evacuating" if seen.evacuating else "Draining", moving)
    elif (
        _all_ready(seen)
        and seen.groups_present == wanted
        and seen.prefill_present == seen.prefill_wanted
    ):
        out.set("Ready", "True", "AllGroupsReady", f"{_groups_text(seen)}; serving")
        if seen.older_template:
            out.set("Progressing", "False", "OlderTemplate", seen.older_template)
        else:
            out.set("Progressing", "False", "Reconciled", "all children match the spec")
    elif seen.unschedulable:
        out.set("Ready", "False", "GroupsNotReady", _groups_text(seen))
        out.set(
            "Progressing",
            "True",
            "InsufficientCapacity",
            f"{_groups_text(seen)}; {seen.unschedulable}",
        )
    else:
        out.set("Ready", "False", "GroupsNotReady", _groups_text(seen))
        out.set("Progressing", "True", "GroupsStarting", _groups_text(seen))
    problems = [*seen.blockers, *seen.degradations]
    if seen.stalled:
        problems.insert(0, Problem("RolloutStalled", seen.stalled))
    if problems:
        out.set("Degraded", "True", problems[0].reason, "; ".join(p.message for p in problems))
    else:
        out.set("Degraded", "False", "AsExpected", "no known problem")
    out.set("MNNVLReady", *_mnnvl(seen))
    out.set("WeightsReady", *seen.weights)
    out.set("RoutingReady", *seen.routing)
    return out


def _mnnvl(seen: Observation) -> tuple[Status, str, str]:
    if seen.compute_domain == "Disabled":
        return (
            "False",
            "ComputeDomainDisabled",
            "spec.computeDomain is Disabled: no multi-node NVLink set up by the operator",
        )
    if seen.compute_domain == "NotInstalled":
        return (
            "False",
            "ComputeDomainNotInstalled",
            "the ComputeDomain API (resource.nvidia.com/v1beta1) is not installed: "
            f"{seen.compute_domain_install}",
        )
    ready, wanted = seen.domains_ready, seen.domains_wanted
    if wanted == 0:
        return "Unknown", "NoGroups", "no TP group, so no ComputeDomain"
    if ready >= wanted:
        return "True", "ComputeDomainsReady", f"{ready} of {wanted} ComputeDomains ready"
    return "False", "ComputeDomainNotReady", f"{ready} of {wanted} ComputeDomains ready"


def unschedulable(pods: Sequence[Mapping[str, Any]]) -> str:
    """What kube-scheduler says about the pods it could not place (condition PodScheduled=False,
    reason Unschedulable): "" when none waits for nodes."""
    waiting = sorted(
        (pod["metadata"]["name"], condition.get("message", ""))
        for pod in pods
        for condition in (pod.get("status") or {}).get("conditions") or []
        if condition.get("type") == "PodScheduled"
        and condition.get("status") == "False"
        and condition.get("reason") == "Unschedulable"
    )
    if not waiting:
        return ""
    name, message = waiting[0]
    more = len(waiting) - 1
    others = f" (and {more} more pod{'s' if more > 1 else ''})" if more else ""
    return f"pod {name}{others} cannot be scheduled: {message}"


# HTTP status of a temporary API failure -> the reason the status gives (0: no answer in time).
API_FAILURE_REASONS = {0: "ApiTimeout", 409: "ApiConflict", 429: "ApiThrottled"}


def api_failure(code: int, message: str, retry_in_s: float) -> Problem:
    """A temporary API failure (conflict, throttling, server error, timeout): a Degraded reason."""
    reason = API_FAILURE_REASONS.get(code, "ApiServerError" if code >= 500 else "ApiError")
    return Problem(reason, f"{message}; retrying in {retry_in_s:g} s")


def retrying_conditions(
    old: Mapping[str, Any], seen: ConditionSet, failure: Problem
) -> ConditionSet:
    """A reconcile cut short by a temporary API failure: Degraded and Progressing say so; Ready
    and MNNVLReady stay as last observed (the apply saw only part of the children)."""
    out = ConditionSet(dict(seen.entries))
    others = [] if seen.entries["Degraded"][0] == "False" else [seen.entries["Degraded"][2]]
    out.set("Degraded", "True", failure.reason, "; ".join([failure.message, *others]))
    out.set("Progressing", "True", "RetryingAfterApiError", failure.message)
    carried: tuple[ConditionType, ...] = ("Ready", "MNNVLReady", "WeightsReady", "RoutingReady")
    _carry(out, old, carried, "RetryingAfterApiError", "not yet observed")
    return out


def _carry(
    out: ConditionSet,
    old: Mapping[str, Any],
    kinds: Sequence[ConditionType],
    reason: str,
    message: str,
) -> None:
    """Keep the conditions `kinds` as `old` had them (Unknown with `reason` if it had none)."""
    previous = {c.get("type"): c for c in old.get("conditions", [])}
    for kind in kinds:
        before = previous.get(kind)
        if before is None:
            out.set(kind, "Unknown", reason, message)
        else:
            status, why = before.get("status", "Unknown"), before.get("reason", "")
            out.set(kind, status, why, before.get("message", ""))


TERMINATING = "Terminating"


def terminating_conditions(old: Mapping[str, Any]) -> ConditionSet:
    """A deployment being deleted: Progressing says so; the rest stays as last observed (its
    children are the garbage collector's now, never the operator's)."""
    out = ConditionSet()
    message = "being deleted: its children are left to the garbage collector"
    out.set("Progressing", "False", TERMINATING, message)
    carried = tuple(kind for kind in CONDITION_TYPES if kind != "Progressing")
    _carry(out, old, carried, TERMINATING, "not observed: the deployment is being deleted")
    return out


def invalid_conditions(old: Mapping[str, Any], problems: Sequence[Problem]) -> ConditionSet:
    """An invalid spec: say so, leave what was observed before (children are left untouched)."""
    out = ConditionSet()
    message = "; ".join(p.message for p in problems)
    out.set("SpecValid", "False", "Invalid", message)
    out.set("Degraded", "True", "SpecInvalid", f"children left as they were: {message}")
    out.set("Progressing", "False", "SpecInvalid", "waiting for a valid spec")
    carried: tuple[ConditionType, ...] = ("Ready", "MNNVLReady", "WeightsReady", "RoutingReady")
    _carry(out, old, carried, "SpecInvalid", "not reconciled: the spec is invalid")
    return out


@dataclass(frozen=True)
class ScaleStatus:
    """What the scale subresource and the printer columns read, besides the counts."""

    selector: str  # the leader pods
    gpus: int  # gpus x replicas
    autoscaler: str  # `Kind/name` of the autoscaler child, "" for none


def render(
    old: Mapping[str, Any],
    conditions: ConditionSet,
    *,
    generation: int | None,
    now: str,
    counts: tuple[int, int] | None = None,
    prefill_counts: tuple[int, int] | None = None,
    endpoint: str | None = None,
    trace_url: str | None = None,
    rollout: Mapping[str, Any] | None = None,
    weights: Sequence[Mapping[str, Any]] | None = None,
    scale: ScaleStatus | None = None,
    groups: Sequence[Mapping[str, Any]] | None = None,
    evacuations: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The status object: transition times kept for conditions whose status did not change;
    replica counts, endpoint, the trace UI's link, scale fields, the `rollout` fields
    (updatedReplicas, image, imageSource, pendingImage, olderTemplateGroups), the resolved
    `weights`, the `groups`' records (group_life.py) and the `evacuations` (evacuation.py) kept
    from `old` when not given."""
    previous = {c.get("type"): c for c in old.get("conditions", [])}
    entries = []
    for kind in CONDITION_TYPES:
        status, reason, message = conditions.entries[kind]
        before = previous.get(kind, {})
        since = before.get("lastTransitionTime") if before.get("status") == status else None
        entries.append(
            Condition(
                type=kind,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=since or now,
                observed_generation=generation,
            )
        )
    replicas, ready = (
        counts if counts is not None else (old.get("replicas", 0), old.get("readyReplicas", 0))
    )
    prefill_replicas, prefill_ready = (
        prefill_counts
        if prefill_counts is not None
        else (old.get("prefillReplicas", 0), old.get("prefillReadyReplicas", 0))
    )
    kept = {key: old[key] for key in ROLLOUT_FIELDS if key in old}
    records = list(groups if groups is not None else old.get("groups") or [])
    rendered = KimiDeploymentStatus.model_validate(
        {
            **(kept if rollout is None else rollout),
            "observedGeneration": generation,
            "conditions": entries,
            "replicas": replicas,
            "readyReplicas": ready,
            "prefillReplicas": prefill_replicas,
            "prefillReadyReplicas": prefill_ready,
            "endpoint": endpoint if endpoint is not None else old.get("endpoint", ""),
            "traceUrl": trace_url if trace_url is not None else old.get("traceUrl", ""),
            "weights": list(weights if weights is not None else old.get("weights", [])),
            "selector": scale.selector if scale else old.get("selector", ""),
            "gpus": scale.gpus if scale else old.get("gpus", 0),
            "autoscaler": scale.autoscaler if scale else old.get("autoscaler", ""),
            # The operator's autoscalers' memory (reconcile/__init__.py sets it after a valid
            # evaluation): kept through invalid and terminating reconciles.
            "prefillAutoscaler": old.get("prefillAutoscaler"),
            "sloAutoscaler": old.get("sloAutoscaler"),
            "groups": records or None,
            "evacuations": list(
                evacuations if evacuations is not None else old.get("evacuations") or []
            )
            or None,
            "stoppedGroups": sum(1 for record in records if record.get("stopped")),
        }
    )
    return rendered.model_dump(exclude_none=True)


ROLLOUT_FIELDS = ("updatedReplicas", "image", "imageSource", "pendingImage", "olderTemplateGroups")


def newly_bad(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    """Conditions that turned bad (or changed why they are bad): each is worth a Warning Event."""
    bad: dict[str, str] = {"SpecValid": "False", "Degraded": "True", "Ready": "False"}
    before = {c.get("type"): c for c in old.get("conditions", [])}
    found: dict[str, Problem] = {}
    for condition in new.get("conditions", []):
        kind, reason = condition["type"], condition["reason"]
        if bad.get(kind) != condition["status"] or reason in QUIET_REASONS or reason in found:
            continue
        prior = before.get(kind, {})
        if (prior.get("status"), prior.get("reason")) != (condition["status"], reason):
            found[reason] = Problem(reason, condition["message"])
    return list(found.values())


# Not-ready states that are the normal course of things, not worth a Warning.
QUIET_REASONS = frozenset(
    {"GroupsNotReady", "ScaledToZero", "SpecInvalid", "Resolving", "Downloading", "ClaimPending"}
)
