"""Each TP group's life as the status remembers it (docs/group-lifecycle.md), a pure function of
the last record and the group's pods as observed: how long its start took (leader scheduled to
leader Ready), how often it failed and why, and the brake: after `restartBudget.failures`
failures within `windowMinutes` the group is stopped (its LeaderWorkerSet at 0 replicas) instead
of being recreated for ever, until a person sets the resume annotation to a new value.

A failure is a container of the group's pods seen terminated with an error, waiting in a crash
loop, or unable to pull its image, or a group recreated (a new leader pod: LeaderWorkerSet's
RecreateGroupOnPodRestart) for no reason seen: its pods went between two reads. A new leader
with a known cause is recorded as that disruption (`lastDisruption`) and never counted: the
LeaderWorkerSet is new (`Created`: scaled from zero, deleted and made again), its spec changed
(`Updated`: a rollout, a stop, a resume), or a pod of the group was seen with the
`DisruptionTarget` condition (an eviction, a preemption, a node drain: its reason); the
container ends of a pod being disrupted or deleted are its deletion's, not failures. The
start-grace: while any pod of the group is still pulling its image or initializing, within
`startGraceMinutes` of the leader's scheduling, a worker giving up on its leader is not counted
(lws#726).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kimi_operator.api.problem import Problem
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.api.status import condition
from kimi_operator.builders.meta import LWS_WORKER_INDEX_LABEL
from kimi_operator.builders.placement import GROUP_LABEL
from kimi_operator.rollout import epoch, rolled_at

# Set it to any new value on the KimiDeployment to restart the groups the brake stopped.
RESUME_ANNOTATION = "kimi-operator.io/resume"
IMAGE_PULL = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
CRASHING = ("CrashLoopBackOff", "CreateContainerError", "CreateContainerConfigError")
STARTING = ("ContainerCreating", "PodInitializing")
NETWORK_WORDS = ("NCCL", "IMEX", "ComputeDomain", "nvlink", "MNNVL")
KEYS_KEPT = 16  # failures and disruptions already seen, by key: enough for the pods of a group
DISRUPTION_TARGET = "DisruptionTarget"  # the pod condition Kubernetes sets before it deletes one


@dataclass(frozen=True)
class Failure:
    key: str  # the pod, container and restart it was seen at: counted once
    reason: str  # ImagePull, OOMKilled, NcclOrImex, PreflightFailed, Crashed, Recreated
    message: str


def _condition_time(pod: Mapping[str, Any], kind: str) -> str:
    """When the pod's condition `kind` became True ("" while it is not)."""
    found = condition(pod.get("status") or {}, kind)
    return str(found.get("lastTransitionTime") or "") if found.get("status") == "True" else ""


def _classify(container: str, terminated: Mapping[str, Any], init: bool) -> tuple[str, str]:
    text = f"{terminated.get('reason', '')}: {terminated.get('message', '')}".strip(": ")
    code = terminated.get("exitCode")
    message = f"container {container} exited with {code} ({text or 'no message'})"
    if terminated.get("reason") == "OOMKilled":
        return "OOMKilled", message
    if any(word.lower() in text.lower() for word in NETWORK_WORDS):
        return "NcclOrImex", message
    return ("PreflightFailed" if init else "Crashed"), message


def disruption(pod: Mapping[str, Any]) -> str:
    """The reason Kubernetes is deleting the pod, from its DisruptionTarget condition
    (EvictionByEvictionAPI, PreemptionByScheduler, DeletionByTaintManager, DeletionByPodGC,
    TerminationByKubelet); "" when it has none."""
    found = condition(pod.get("status") or {}, DISRUPTION_TARGET)
    return str(found.get("reason") or DISRUPTION_TARGET) if found.get("status") == "True" else ""


def pod_failure(pod: Mapping[str, Any]) -> Failure | None:
    """What a pod shows of a failure now (its containers' current or last state), or None. A
    pod being deleted: its containers' current ends are the deletion's (its last runs' count)."""
    uid = pod["metadata"].get("uid", pod["metadata"]["name"])
    deleting = bool(pod["metadata"].get("deletionTimestamp"))
    status = pod.get("status") or {}
    found = [(c, True) for c in status.get("initContainerStatuses") or []]
    found += [(c, False) for c in status.get("containerStatuses") or []]
    for container, init in found:
        name, restarts = container.get("name", ""), container.get("restartCount", 0)
        state, last = container.get("state") or {}, container.get("lastState") or {}
        waiting = (state.get("waiting") or {}).get("reason", "")
        key = f"{uid}/{name}/{restarts}"
        if waiting in IMAGE_PULL:
            message = (state["waiting"].get("message") or waiting)[:512]
            return Failure(key, "ImagePull", f"container {name}: {message}")
        terminated = (None if deleting else state.get("terminated")) or last.get("terminated")
        terminated = terminated or {}
        if terminated.get("exitCode", 0) != 0 or waiting in CRASHING:
            return Failure(key, *_classify(name, terminated, init))
    return None


def _starting(pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a pod of the group is still pulling its image or running its init containers."""
    for pod in pods:
        status = pod.get("status") or {}
        for c in [
            *(status.get("initContainerStatuses") or []),
            *(status.get("containerStatuses") or []),
        ]:
            if ((c.get("state") or {}).get("waiting") or {}).get("reason") in STARTING:
                return True
    return False


def _leader(pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    leaders = [
        p for p in pods if p["metadata"].get("labels", {}).get(LWS_WORKER_INDEX_LABEL) == "0"
    ]
    return leaders[0] if leaders else None


def by_group(pods: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        group = pod["metadata"].get("labels", {}).get(GROUP_LABEL)
        if group:
            out.setdefault(group, []).append(pod)
    return out


def _seconds_between(start: str, end: str) -> float | None:
    began, ended = epoch(start), epoch(end)
    return None if began is None or ended is None or ended < began else ended - began


def advance(
    kd: KimiDeployment,
    record: Mapping[str, Any],
    group: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]] | None,
    *,
    now: str,
) -> dict[str, Any]:
    """The group's next record (status.groups[i]) from its last `record`, its LeaderWorkerSet
    `group` as live and its `pods` (None: not listed this time; the record is kept)."""
    budget = kd.spec.serving.restart_budget
    resume = (kd.metadata.model_extra or {}).get("annotations", {}).get(RESUME_ANNOTATION, "")
    out = {"name": group["metadata"]["name"], "restarts": 0, **record}
    if out.get("stopped") and out.get("resumedBy", "") != resume:
        out |= {"stopped": False, "recentFailures": [], "resumedBy": resume}
    if pods is None:
        return out
    leader = _leader(pods)
    seen = set(out.get("failureKeys", []))
    disrupted = {_key(p, "disrupted"): disruption(p) for p in pods if disruption(p)}
    for key, reason in disrupted.items():
        if key not in seen:  # each disrupted pod explains one recreation at most
            out["disruptedSinceLeader"] = reason
    out["failureKeys"] = [*out.get("failureKeys", []), *(k for k in disrupted if k not in seen)]
    failures = [] if leader is None else _new_leader(out, group, leader, now=now)
    at = epoch(now) or 0.0
    grace = _starting(pods) and at - (epoch(out.get("startedAt", "")) or at) < (
        budget.start_grace_minutes * 60
    )
    for pod in pods:
        failure = None if disruption(pod) else pod_failure(pod)  # its ends: the disruption's
        excused = (
            grace and pod is not leader and failure is not None and failure.reason != "ImagePull"
        )
        if failure is not None and not excused:
            failures.append(failure)
            out["failedSinceLeader"] = True
    new = [f for f in failures if f.key not in seen]
    out["failureKeys"] = [*out["failureKeys"], *(f.key for f in new)][-KEYS_KEPT:]
    if new:
        out["lastFailure"] = {"reason": new[-1].reason, "message": new[-1].message, "at": now}
        out["restarts"] = out.get("restarts", 0) + len(new)
        out["recentFailures"] = [*out.get("recentFailures", []), *(now for _ in new)]
    window = budget.window_minutes * 60
    recent = [t for t in out.get("recentFailures", []) if at - (epoch(t) or 0.0) < window]
    out["recentFailures"] = recent
    if len(recent) >= budget.failures and not out.get("stopped"):
        out |= {"stopped": True, "resumedBy": resume}
    return out


def _new_leader(
    out: dict[str, Any], group: Mapping[str, Any], leader: Mapping[str, Any], *, now: str
) -> list[Failure]:
    """Record the group's `leader` in `out`: a new one is recorded with its cause, or counted
    as a recreation when none is known; its start-up time once it is Ready."""
    failures = []
    uid, was = leader["metadata"].get("uid", ""), out.get("leaderUid", "")
    generation, group_uid = group["metadata"].get("generation", 0), group["metadata"].get("uid", "")
    if was and uid != was:
        cause = _cause(out, group_uid, generation)
        if cause:
            said = CAUSES.get(cause, f"a pod of the group was disrupted: {cause}")
            out["lastDisruption"] = {"reason": cause, "message": said, "at": now}
        # Recreated after a failure already counted (a pod seen failing): the same incident.
        elif not out.get("failedSinceLeader"):
            failures.append(Failure(f"{was}/recreated", "Recreated", "the group was recreated"))
    if uid != was:
        out |= {"leaderUid": uid, "generation": generation, "groupUid": group_uid}
        out |= {"failedSinceLeader": False, "disruptedSinceLeader": ""}
        out |= {"startedAt": "", "startupSeconds": None}
    if not out.get("startedAt"):  # a leader seen before it was scheduled: when it is
        out["startedAt"] = _condition_time(leader, "PodScheduled")
    ready_at = _condition_time(leader, "Ready")
    if out.get("startupSeconds") is None and ready_at:
        took = _seconds_between(out.get("startedAt", ""), ready_at)
        out["startupSeconds"] = None if took is None else round(took, 1)
    return failures


# What each cause of a new leader that is no failure means (`lastDisruption.message`); the
# DisruptionTarget reasons are Kubernetes' own.
CAUSES = {
    "Created": "a new LeaderWorkerSet: scaled from zero, or deleted and made again",
    "Updated": "its LeaderWorkerSet's spec changed: a rollout, a stop or a resume",
    "EvictionByEvictionAPI": "a pod of the group was evicted (kubectl drain, a node upgrade)",
    "PreemptionByScheduler": "a pod of the group was preempted by a higher-priority pod",
    "DeletionByTaintManager": "a pod of the group was deleted by a NoExecute taint of its node",
    "DeletionByPodGC": "a pod of the group was deleted with its node",
    "TerminationByKubelet": "a pod of the group was ended by its kubelet (node pressure, shutdown)",
}


def _key(pod: Mapping[str, Any], what: str) -> str:
    return f"{pod['metadata'].get('uid', pod['metadata']['name'])}/{what}"


def _cause(record: Mapping[str, Any], group_uid: str, generation: int) -> str:
    """Why the group has a new leader, when that is known and no failure: a new LeaderWorkerSet,
    a new spec of it, or a disruption seen since the last leader; "" when not known."""
    if record.get("groupUid", group_uid) != group_uid:
        return "Created"
    if record.get("generation") != generation:
        return "Updated"
    return str(record.get("disruptedSinceLeader", ""))


def _records(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {r["name"]: r for r in status.get("groups") or [] if "name" in r}


def unrecorded(status: Mapping[str, Any], groups: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether a group's pods are worth reading although it is Ready: it has no record yet (an
    operator upgraded onto running groups), its leader was never seen (it became Ready between
    two reads, or while the operator was away: its start-up time is still to be read), or it was
    seen starting and has no start-up time yet."""
    records = _records(status)
    return any(
        name not in records
        or not records[name].get("leaderUid")
        or records[name].get("startupSeconds") is None
        for name in groups
    )


def records(
    kd: KimiDeployment,
    status: Mapping[str, Any],
    groups: Mapping[str, Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]] | None,
    *,
    now: str,
) -> list[dict[str, Any]]:
    """status.groups: each live group's record advanced (`pods`: the deployment's, None when
    not read this time), in name order; the records of groups gone are dropped."""
    old, found = _records(status), by_group(pods or [])
    return [
        advance(
            kd,
            old.get(name, {}),
            groups[name],
            None if pods is None else found.get(name, []),
            now=now,
        )
        for name in sorted(groups)
    ]


def with_created(
    kd: KimiDeployment,
    status: Mapping[str, Any],
    advanced: Sequence[dict[str, Any]],
    created: Mapping[str, Mapping[str, Any]],
    *,
    now: str,
) -> list[dict[str, Any]]:
    """`advanced` (`records`) with each group `created` now recorded as one with no pod yet (so
    the status is whole from the reconcile that creates it, not rewritten at the next resync),
    in name order."""
    old, out = _records(status), {r["name"]: r for r in advanced}
    out |= {
        name: advance(kd, old.get(name, {}), group, [], now=now)
        for name, group in created.items()
        if name not in out
    }
    return [out[name] for name in sorted(out)]


def stopped(groups: Sequence[Mapping[str, Any]]) -> set[str]:
    return {g["name"] for g in groups if g.get("stopped")}


def stopped_before_written(
    groups: Sequence[Mapping[str, Any]], live: Mapping[str, Mapping[str, Any]]
) -> bool:
    """Whether a stopped group's last failure came before its template was last written (the
    LeaderWorkerSet's rolled-at): what stopped it says nothing of the template it has now."""
    for g in groups:
        group = live.get(g["name"])
        if not g.get("stopped") or group is None:
            continue
        written = rolled_at(group)
        failed = epoch(g.get("lastFailure", {}).get("at", ""))
        if written is not None and (failed is None or failed < written):
            return True
    return False


def braked(children: list[dict[str, Any]], names: set[str]) -> list[dict[str, Any]]:
    """The LeaderWorkerSets of the stopped groups at 0 replicas: their pods go, none is made."""
    return [
        {**c, "spec": {**c["spec"], "replicas": 0}}
        if c["kind"] == "LeaderWorkerSet" and c["metadata"]["name"] in names
        else c
        for c in children
    ]


def stopped_problem(kd: KimiDeployment, groups: Sequence[Mapping[str, Any]]) -> Problem | None:
    """Degraded GroupStopped: which groups, why, and how to resume."""
    halted = [g for g in groups if g.get("stopped")]
    if not halted:
        return None
    budget = kd.spec.serving.restart_budget
    why = "; ".join(
        f"{g['name']}: {g.get('lastFailure', {}).get('reason', '')} "
        f"({g.get('lastFailure', {}).get('message', '')})"
        for g in halted
    )
    return Problem(
        "GroupStopped",
        f"stopped after {budget.failures} failures within {budget.window_minutes} min "
        f"(spec.serving.restartBudget), not recreated: {why}. Fix the cause, then resume: "
        f"kubectl annotate kimi {kd.metadata.name} -n {kd.metadata.namespace} "
        f"{RESUME_ANNOTATION}=$(date +%s) --overwrite",
    )


def news(
    old: Mapping[str, Any], groups: Sequence[Mapping[str, Any]]
) -> tuple[list[float], list[str]]:
    """(start-up times recorded now, reasons of the failures counted now): for the metrics."""
    before = _records(old)
    startups, failures = [], []
    for g in groups:
        was = before.get(g["name"], {})
        if g.get("startupSeconds") is not None and was.get("startupSeconds") is None:
            startups.append(float(g["startupSeconds"]))
        counted = g.get("restarts", 0) - was.get("restarts", 0)
        failures += [g["lastFailure"]["reason"]] * counted if counted > 0 else []
    return startups, failures
