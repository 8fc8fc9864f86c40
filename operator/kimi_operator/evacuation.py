"""Make before break on an unfit node (docs/maintenance.md), pure: a TP group with a pod on a node
that is cordoned, tainted or failing (builders/nodes.py says which) is replaced before it goes.

Per role, one group at a time (`rollout.maxSurge` is at most 1): its replacement is the role's
surge group (`-g<replicas>`, `-p<prefill.replicas>`, as a rollout's: the same template and
placement), made even with `maxSurge: 0`, and records on its LeaderWorkerSet which group it
stands in for (`EVACUATION_ANNOTATION`: the group, the node, why, since when), so that an
operator restarted meanwhile carries on from the objects. Once the replacement serves (Ready, in
routing), the group is drained (drain.py: out of routing, its requests finished or its grace
passed) and deleted. While the node it left is still unfit the replacement serves in its place
and the group is not made again (`returning`): made at once it would take back its pods' names,
and a `kubectl drain` of the node, which retries each refused eviction by the pod's name, would
go on evicting the new group's pods on other nodes, refused for good by the
PodDisruptionBudget. Once the node is fit again (uncordoned, untainted, its condition cleared,
or gone) the plan makes the group on fit nodes, and the replacement serves until the group
serves again, then leaves as any surge group does (drained, deleted). A replacement that
cannot be placed (its pods Unschedulable) leaves the group serving and says so
(`NoRoomForReplacement`), unless the node has a condition marked critical: then the group goes
without one. While a rollout's surge group holds the role's slot, its evacuation waits.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kimi_operator import conditions as cond
from kimi_operator import group_life
from kimi_operator.api.problem import Problem
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders.nodes import Unfit
from kimi_operator.rollout import draining_since, group_of, serving

# On a replacement's LeaderWorkerSet: the group it stands in for, as JSON (`Record`).
EVACUATION_ANNOTATION = "kimi-operator.io/evacuation"
NO_ROOM = "NoRoomForReplacement"


@dataclass(frozen=True)
class Record:
    """An evacuation, as its replacement records it."""

    group: str
    node: str
    reason: str  # Cordoned, Tainted, NodeCondition
    detail: str
    critical: bool
    since: str

    def text(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True, separators=(",", ":"))


@dataclass
class Evacuations:
    """What the evacuations of one reconcile want."""

    spares: dict[str, int] = field(default_factory=dict)  # role letter -> surge groups wanted
    marks: dict[str, str] = field(default_factory=dict)  # replacement -> its annotation's value
    leaving: dict[str, Record] = field(default_factory=dict)  # groups to drain, then delete
    returning: set[str] = field(default_factory=set)  # gone, made again once their node is fit
    records: list[tuple[str, Record]] = field(default_factory=list)  # (replacement, record)
    progress: list[str] = field(default_factory=list)  # what Progressing says
    problems: list[Problem] = field(default_factory=list)  # Degraded: no room
    news: list[tuple[str, str]] = field(default_factory=list)  # Normal Events
    started: list[str] = field(default_factory=list)  # the reasons of those begun now


def recorded(group: Mapping[str, Any] | None) -> Record | None:
    """The evacuation a LeaderWorkerSet stands in for (None: none, or not readable)."""
    if group is None:
        return None
    text = ((group.get("metadata") or {}).get("annotations") or {}).get(EVACUATION_ANNOTATION)
    try:
        return Record(**json.loads(text)) if text else None
    except (ValueError, TypeError):
        return None


def affected(
    pods: Sequence[Mapping[str, Any]], unfit: Mapping[str, Unfit]
) -> dict[str, tuple[str, Unfit]]:
    """Each group with a pod (not terminating) on an unfit node: (the node, why); a critical
    node first."""
    out: dict[str, tuple[str, Unfit]] = {}
    for name, found in group_life.by_group(pods).items():
        nodes = sorted(
            {str((p.get("spec") or {}).get("nodeName", "")) for p in found if not _terminating(p)}
            - {""}
        )
        bad = [(n, unfit[n]) for n in nodes if n in unfit]
        if bad:
            out[name] = min(bad, key=lambda b: not b[1].critical)
    return out


def _terminating(pod: Mapping[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def plan(
    kd: KimiDeployment,
    live: Mapping[str, Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]] | None,
    unfit: Mapping[str, Unfit],
    *,
    now: str,
) -> Evacuations:
    """The evacuations of the live groups (by name); `pods`: the deployment's (None: not read,
    nothing is found affected); `unfit`: the nodes to leave, by name."""
    roles = {"g": kd.spec.replicas}
    if kd.spec.prefill is not None:
        roles["p"] = kd.spec.prefill.replicas
    found = affected(pods or [], unfit) if unfit else {}
    by_group = group_life.by_group(pods or [])
    out = Evacuations()
    for letter, replicas in roles.items():
        surge = f"{kd.metadata.name}-{letter}{replicas}"
        record = recorded(live.get(surge))
        mine = {
            g: why
            for g, why in found.items()
            if (at := group_of(kd.metadata.name, g)) is not None
            and at[0] == letter
            and at[1] < replicas
        }
        if replicas == 0 or (surge in live and record is None):
            if mine:
                out.progress.append(
                    f"{', '.join(sorted(mine))} must leave their nodes: waiting for the "
                    f"rollout's surge group {surge} to go"
                )
            continue
        if record is None:
            if not mine:
                continue
            group = min(mine, key=lambda g: (not mine[g][1].critical, g))
            node, why = mine[group]
            record = Record(group, node, why.reason, why.text(node), why.critical, now)
            out.news.append(
                (
                    "EvacuationStarted",
                    f"{record.detail}: {group} is replaced by {surge} first, then drained",
                )
            )
            out.started.append(why.reason)
        target = live.get(record.group)
        if record.group not in mine and target is not None and serving(target):
            continue  # back serving on fit nodes (or its node fit again): the replacement goes
        out.spares[letter] = 1
        out.marks[surge] = record.text()
        out.records.append((surge, record))
        _step(
            out,
            record,
            surge,
            live,
            surge_pods=by_group.get(surge),
            affected=mine,
            node_unfit=record.node in unfit,
        )
    return out


def _step(
    out: Evacuations,
    record: Record,
    surge: str,
    live: Mapping[str, Mapping[str, Any]],
    *,
    surge_pods: Sequence[Mapping[str, Any]] | None,
    affected: Mapping[str, tuple[str, Unfit]],
    node_unfit: bool,
) -> None:
    """Where one evacuation stands: what Progressing says, and whether its group leaves now (or
    waits for its node to be fit before it is made again)."""
    group, where = record.group, f"{record.group} leaves node {record.node} ({record.reason})"
    replacement = live.get(surge)
    # Gone (its pods may not be yet): made again once the node is fit.
    if group not in live and node_unfit and replacement is not None and serving(replacement):
        out.returning.add(group)
        out.progress.append(
            f"{where}: {surge} serves in its place; {group} is made again once node "
            f"{record.node} is fit"
        )
        return
    if record.group not in affected:
        out.progress.append(f"{where}: made again on fit nodes; {surge} serves meanwhile")
        return
    if replacement is not None and serving(replacement):
        out.leaving[group] = record
        out.progress.append(f"{where}: {surge} serves in its place; {group} drains, then goes")
        return
    waiting = cond.unschedulable(surge_pods or [])
    if waiting:
        then = (
            f"{group} is drained and deleted without one (the node's condition is critical)"
            if record.critical
            else f"{group} keeps serving until room is made or the node is drained by force "
            "(kubectl drain --disable-eviction)"
        )
        message = f"no room for {surge}, the replacement of {group} ({record.detail}): {waiting}"
        out.problems.append(Problem(NO_ROOM, f"{message}; {then}"))
    if (waiting and record.critical) or draining_since(live.get(group) or {}):
        out.leaving[group] = record  # a drain begun carries on
        out.progress.append(f"{where}: {group} drains, then goes, without a replacement")
        return
    out.progress.append(f"{where}: its replacement {surge} starts; {group} serves meanwhile")


def status(evacuations: Evacuations) -> list[dict[str, Any]]:
    """status.evacuations: each group being evacuated, from which node, why, its replacement."""
    return [
        {
            "name": r.group,
            "node": r.node,
            "reason": r.reason,
            "message": r.detail,
            "replacement": surge,
            "since": r.since,
        }
        for surge, r in sorted(evacuations.records, key=lambda x: x[1].group)
    ]


def evacuated(group: str, record: Record) -> tuple[str, str]:
    """The Normal Event of a group deleted to leave its node."""
    return (
        "Evacuated",
        f"{group} drained and deleted ({record.detail}); it is made again on fit nodes once "
        f"node {record.node} is fit",
    )


def marked(children: list[dict[str, Any]], marks: Mapping[str, str]) -> list[dict[str, Any]]:
    """The children with each replacement's LeaderWorkerSet recording its evacuation (kept as
    first written: no write while it stands)."""
    out = []
    for child in children:
        meta = child["metadata"]
        if child["kind"] == "LeaderWorkerSet" and meta["name"] in marks:
            annotations = {
                **meta.get("annotations", {}),
                EVACUATION_ANNOTATION: marks[meta["name"]],
            }
            out.append({**child, "metadata": {**meta, "annotations": annotations}})
        else:
            out.append(child)
    return out
