"""The group set (docs/architecture.md, "The group set"), pure: for each role, the TP groups that
exist and what each is for. The one owner of which groups a deployment has: the rollout, the
evacuations, scaling (spec.replicas as an HPA, KEDA or the prefill autoscaler leave it) and the
brake state what they want of it, and this module decides.

A group's name is an identity, not a position, as a ReplicaSet names its pods: `<name>-g<i>`
(decode) or `<name>-p<i>` (prefill), `i` the lowest index free when it was made. The set of a
role holds, in position order:

- its *members*: `replicas` groups, the lowest indices first; a group on an unfit node
  (`evacuation.affected`) that no replacement stands in for sorts last, so that a scale-down
  takes it first;
- *extras* beyond them: the rollout's surge group while a rollout lasts (rollout.plan), the
  surplus of a scale-down otherwise (drained, then deleted);
- *replacements* of members on unfit nodes (make before break, docs/maintenance.md): a new group
  made at a fresh index with the current template, recording on its LeaderWorkerSet the group
  it stands in for (`evacuation.Record`). Once it serves it takes that member's position and
  the member is *leaving*: drained, then deleted. A replacement then simply is a member: nothing
  is made again once the node is fit, and one maintenance costs one start per group.

Up to `budget` replacements start at a time per role (`rollout.maxSurge`, at least one): a rack
drained at once is evacuated group by group, every drain completes. A name evacuated is not used
again while its replacement records it (until its node is known fit): `kubectl drain` retries a
refused eviction by the pod's name, and would evict a new group's pods of that name.

What is not known is not healthy: before the Node watch has listed, or with the pods unread,
no evacuation begins and no group is found on an unfit node. An evacuation begun completes once
its replacement serves, whatever is known then: so does it with full knowledge.
"""

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kimi_operator import conditions as cond
from kimi_operator import group_life
from kimi_operator.api.problem import Problem
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders.nodes import Unfit
from kimi_operator.builders.placement import avoided
from kimi_operator.evacuation import NO_ROOM, Record, affected, recorded
from kimi_operator.rollout import draining_since, epoch, group_of, roles, rolled_at, serving

NOT_SERVING = "ReplacementNotServing"


@dataclass
class RoleSet:
    """One role's groups, as this reconcile decides them."""

    letter: str  # g (decode) or p (prefill)
    replicas: int
    # Position order: the members (a replaced member's position its serving replacement's), the
    # extras, then fresh names: at least `replicas + surge` names (rollout.plan takes what it
    # needs of them; the extras it leaves are pruned).
    positions: list[str] = field(default_factory=list)
    # Replacements not yet serving in their member's place: name -> what they stand in for.
    replacing: dict[str, Record] = field(default_factory=dict)
    # Evacuated groups whose replacement serves (or a critical node's, without one): drained,
    # then deleted; group -> (its replacement, the record).
    leaving: dict[str, tuple[str, Record]] = field(default_factory=dict)


@dataclass
class GroupSet:
    """Every role's groups, and what the evacuations say of them."""

    roles: dict[str, RoleSet] = field(default_factory=dict)
    # Replacement -> its record's annotation value; None: removed (its evacuation is over).
    marks: dict[str, str | None] = field(default_factory=dict)
    records: list[tuple[str, Record]] = field(default_factory=list)  # (replacement, record)
    progress: list[str] = field(default_factory=list)  # what Progressing says
    problems: list[Problem] = field(default_factory=list)  # Degraded: no room, not serving
    news: list[tuple[str, str]] = field(default_factory=list)  # Normal Events
    started: list[str] = field(default_factory=list)  # the reasons of evacuations begun now

    @property
    def leaving(self) -> dict[str, tuple[str, Record]]:
        return {name: r for role in self.roles.values() for name, r in role.leaving.items()}

    def indices(self, letter: str, surge: int) -> list[int]:
        """The indices of the role's groups to build: its positions up to `replicas + surge`,
        its replacements and the groups leaving."""
        role = self.roles[letter]
        names = [*role.positions[: role.replicas + surge], *role.replacing, *role.leaving]
        return sorted({_index(name) for name in names})


def _index(name: str) -> int:
    return int(name.rsplit("-", 1)[1][1:])


@dataclass(frozen=True)
class _Seen:
    """What one reconcile knows of the groups' pods and nodes."""

    unfit: Mapping[str, Unfit] | None  # the nodes to leave; None: the Node watch has not listed
    # The groups on unfit nodes (the node, why); None: not known (pods unread or nodes unlisted).
    found: Mapping[str, tuple[str, Unfit]] | None
    by_group: Mapping[str, Sequence[Mapping[str, Any]]] | None  # the pods; None: not read
    lives: Mapping[str, Mapping[str, Any]]  # status.groups by name (group_life.py)
    now: str


def plan(
    kd: KimiDeployment,
    live: Mapping[str, Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]] | None,
    unfit: Mapping[str, Unfit] | None,
    *,
    now: str,
    lives: Sequence[Mapping[str, Any]] = (),
) -> GroupSet:
    """The group set of the live groups (LeaderWorkerSets by name). `pods`: the deployment's
    (None: not read); `unfit`: the nodes to leave (None: the Node watch has not listed);
    `lives`: status.groups as group_life advanced them (why a replacement does not serve)."""
    found = None
    if pods is not None and unfit is not None:
        found = affected(pods, unfit) if unfit else {}
    seen = _Seen(
        unfit,
        found,
        None if pods is None else group_life.by_group(pods),
        {str(r.get("name")): r for r in lives},
        now,
    )
    out = GroupSet()
    for letter, replicas in roles(kd).items():
        mine = {
            n: g
            for n, g in live.items()
            if (at := group_of(kd.metadata.name, n)) and at[0] == letter
        }
        out.roles[letter] = _role(kd, out, mine, seen, letter=letter, replicas=replicas)
    return out


def _role(
    kd: KimiDeployment,
    out: GroupSet,
    mine: Mapping[str, Mapping[str, Any]],
    seen: _Seen,
    *,
    letter: str,
    replicas: int,
) -> RoleSet:
    """One role's set (`mine`: its live groups), its evacuations' words added to `out`."""
    role, surge = RoleSet(letter, replicas), kd.spec.rollout.max_surge
    records = {n: r for n, g in mine.items() if (r := recorded(g)) is not None and r.group != n}
    # Replacements whose group is still there stand in for it; the others are members, their
    # record kept while the node their group left is not known fit (its name not used again).
    role.replacing = {n: r for n, r in records.items() if r.group in mine}
    for name, record in records.items():
        out.records.append((name, record))
        over = name not in role.replacing and seen.unfit is not None
        out.marks[name] = None if over and record.node not in (seen.unfit or {}) else record.text()
    on_unfit = seen.found or {}
    # Its group known back on fit nodes before the replacement serves: the evacuation is over,
    # and the replacement goes (pruned: it is no member).
    cancelled = set()
    for name, record in list(role.replacing.items()):
        if seen.found is not None and record.group not in on_unfit and not serving(mine[name]):
            del role.replacing[name]
            out.marks.pop(name, None)
            cancelled.add(name)
            out.news.append(("EvacuationCancelled", f"{record.group} is on fit nodes: {name} goes"))
    standing_in = {r.group: n for n, r in role.replacing.items()}
    base = sorted((n for n in mine if n not in role.replacing and n not in cancelled), key=_index)
    if len(base) > replicas:  # a scale-down: a group not serving goes first, then one on an
        base.sort(  # unfit node (it would cost a replacement), then the highest index
            key=lambda n: (not serving(mine[n]), n in on_unfit and n not in standing_in)
        )
    members, extras = base[:replicas], base[replicas:]
    fresh = _fresh(kd.metadata.name, letter, [*mine, *(r.group for r in records.values())])
    # Evacuations begun now: the members on unfit nodes, a critical node first, within budget.
    budget = max(0, max(1, surge) - len(role.replacing))
    back = _placed_back(out, members, mine, records, on_unfit)
    waiting = sorted(
        (n for n in members if n in on_unfit and n not in standing_in and n not in back),
        key=lambda n: (not on_unfit[n][1].critical, _index(n)),
    )
    for group in waiting[:budget]:
        node, why = on_unfit[group]
        name = next(fresh)
        record = Record(group, node, why.reason, why.text(node), why.critical, seen.now)
        role.replacing[name] = record
        standing_in[group] = name
        out.marks[name] = record.text()
        out.records.append((name, record))
        said = f"{record.detail}: {group} is replaced by {name} first, then drained"
        out.news.append(("EvacuationStarted", said))
        out.started.append(why.reason)
    for group in waiting[budget:]:
        out.progress.append(
            f"{group} must leave node {on_unfit[group][0]}: its replacement waits for one of "
            f"the {max(1, surge)} replacement(s) starting at a time to serve"
        )
    for i, group in enumerate(members):
        if group not in standing_in:
            continue
        name = standing_in[group]
        record = role.replacing[name]
        if _step(kd, out, seen, mine, name=name, record=record):
            members[i] = name  # serving in its place: the group leaves
            del role.replacing[name]
            role.leaving[group] = (name, record)
    # Replacements of extras (a scale-down took their group) are no longer needed.
    for name, record in list(role.replacing.items()):
        if record.group not in members:
            del role.replacing[name]
            out.marks.pop(name, None)
    positions = [*members, *extras]
    while len(positions) < replicas + surge:
        positions.append(next(fresh))
    role.positions = positions if replicas else []
    return role


def _placed_back(
    out: GroupSet,
    members: Sequence[str],
    mine: Mapping[str, Mapping[str, Any]],
    records: Mapping[str, Record],
    on_unfit: Mapping[str, tuple[str, Unfit]],
) -> set[str]:
    """The members on unfit nodes that found room only there: a replacement placed on the very
    node its group left, or a group on a node it was made to keep off (a condition keeps no pod
    off a node: placement.kept_off only prefers the others). Evacuating them again would go
    round for ever: they stay, and say so. Not from a node cordoned or tainted since (a drain):
    no replacement can come back to it, and the drain waits for the group to leave (the long
    model check found a drain that never completed)."""
    back = {}
    for name in members:
        if name not in on_unfit or not on_unfit[name][1].schedulable:
            continue
        node, why = on_unfit[name]
        if name in records and _back_on(records[name], on_unfit[name]):
            back[name] = f"{name} replaced {records[name].group} on node {node}"
        elif node in avoided(mine[name]):
            back[name] = f"{name} was kept off node {node}"
        else:
            continue
        out.problems.append(
            Problem(
                NO_ROOM,
                f"{back[name]}, and found room only there ({why.text(node)}): it stays until "
                "room is made elsewhere",
            )
        )
    return set(back)


def _step(
    kd: KimiDeployment,
    out: GroupSet,
    seen: _Seen,
    mine: Mapping[str, Mapping[str, Any]],
    *,
    name: str,
    record: Record,
) -> bool:
    """Where one evacuation stands (Progressing, Degraded); True when its group leaves now."""
    group = record.group
    where = f"{group} leaves node {record.node} ({record.reason})"
    replacement = mine.get(name)
    if replacement is not None and serving(replacement):
        out.progress.append(f"{where}: {name} serves in its place; {group} drains, then goes")
        return True
    pods = None if seen.by_group is None else seen.by_group.get(name, [])
    waiting = "" if pods is None else cond.unschedulable(pods)
    if waiting:
        then = (
            f"{group} is drained and deleted without one (the node's condition is critical)"
            if record.critical
            else f"{group} keeps serving until room is made or the node is drained by force "
            "(kubectl drain --disable-eviction)"
        )
        message = f"no room for {name}, the replacement of {group} ({record.detail}): {waiting}"
        out.problems.append(Problem(NO_ROOM, f"{message}; {then}"))
        if record.critical:
            out.progress.append(f"{where}: {group} drains, then goes, without a replacement")
            return True
    elif _overdue(kd, replacement, record, now=seen.now):
        out.problems.append(
            Problem(
                NOT_SERVING,
                f"{name}, the replacement of {group} ({record.detail}), does not serve "
                f"{kd.spec.rollout.progress_deadline_seconds} s after it was made "
                f"(spec.rollout.progressDeadlineSeconds): {_why_not_serving(seen.lives.get(name))}"
                f"; {group} keeps serving",
            )
        )
    stopped = draining_since(mine.get(group) or {}) is not None
    out.progress.append(
        f"{where}: its replacement {name} starts; {group} serves meanwhile"
        + (" (its drain stopped: the replacement does not serve)" if stopped else "")
    )
    return False


def _back_on(record: Record, where: tuple[str, Unfit]) -> bool:
    """Whether a replacement is on the node its group left, for the same reason."""
    return record.node == where[0] and record.reason == where[1].reason


def _overdue(
    kd: KimiDeployment, replacement: Mapping[str, Any] | None, record: Record, *, now: str
) -> bool:
    """Whether the replacement was made longer than the progress deadline ago."""
    made = (None if replacement is None else rolled_at(replacement)) or epoch(record.since)
    at = epoch(now)
    deadline = kd.spec.rollout.progress_deadline_seconds
    return made is not None and at is not None and at - made > deadline


def _why_not_serving(life: Mapping[str, Any] | None) -> str:
    """What the group's record says keeps it from serving."""
    if life is None:
        return "no pod seen yet"
    failure = life.get("lastFailure") or {}
    if life.get("stopped"):
        return f"stopped by spec.serving.restartBudget after {failure.get('reason', 'failures')}"
    if failure:
        return f"failing: {failure.get('reason', '')} ({failure.get('message', '')})"
    return "still starting"


def _fresh(deployment: str, letter: str, taken: Collection[str]) -> Iterator[str]:
    """Names for new groups of a role: the lowest indices neither live nor recorded as evacuated."""
    used = {_index(n) for n in taken}
    index = 0
    while True:
        if index not in used:
            used.add(index)
            yield f"{deployment}-{letter}{index}"
        index += 1


def status(groups: GroupSet) -> list[dict[str, Any]]:
    """status.evacuations: each evacuation under way or whose node is not yet known fit: the
    group, the node it left, why, its replacement."""
    return [
        {
            "name": r.group,
            "node": r.node,
            "reason": r.reason,
            "message": r.detail,
            "replacement": replacement,
            "since": r.since,
        }
        for replacement, r in sorted(groups.records, key=lambda x: (x[1].group, x[0]))
        if groups.marks.get(replacement) is not None
    ]


def replaced(replacement: str, record: Record) -> tuple[str, str]:
    """The Normal Event of a group deleted to leave its node."""
    return (
        "Evacuated",
        f"{record.group} drained and deleted ({record.detail}); {replacement} serves in its place",
    )
