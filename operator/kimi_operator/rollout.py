"""Group-by-group rollout of a pod template change: which TP groups a reconcile writes now. Pure.

Each TP group is a LeaderWorkerSet of its own (`<name>-g<i>`; with spec.prefill the prefill groups
are `<name>-p<i>`, rolled on their own by the same rules, so that an edit of one role's settings
rolls that role only). A group is *updated* when it carries
the template the spec asks for now (what the operator last applied to it is that template, and a
hand edit has not changed it since), *ready* when its LeaderWorkerSet reports its group Ready for
its current generation. An outdated group is rewritten only while enough groups stay ready:
`replicas - maxUnavailable`, counting a surge group (the position after the members': the
group set, group_set.py, says which group is where) made first with the new template. A change
that leaves the template alone rewrites no group. docs/rollout.md explains.
"""

import calendar
import dataclasses
import re
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.k8s.merge import APPLIED_ANNOTATION, covers

# When the operator last wrote a group's template (RFC 3339): the progress deadline counts from it.
ROLLED_AT_ANNOTATION = "kimi-operator.io/rolled-at"
# When the operator took a leaving group out of routing (RFC 3339; drain.py): its grace counts
# from it, and it survives a restart of the operator.
DRAINING_ANNOTATION = "kimi-operator.io/draining-since"
LWS_KIND = "LeaderWorkerSet"
GROUP_KINDS = frozenset({LWS_KIND, "ComputeDomain"})
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Group:
    updated: bool
    ready: bool
    rolled_at: float | None = None  # epoch seconds; None: not known
    stopped: bool = False  # wanted at 0 replicas (the restart budget's brake): never held


@dataclass(frozen=True)
class Strategy:
    max_unavailable: int = 1
    max_surge: int = 0
    progress_deadline_s: float = 3600.0


@dataclass(frozen=True)
class Steps:
    """What to do with the groups this time."""

    hold: frozenset[int]  # outdated groups left as they are (their turn has not come)
    spares: int  # surge groups to keep: indices replicas .. replicas + spares - 1
    updated: int  # of groups 0 .. replicas - 1, those with the new template once this is applied
    rolling: bool  # some group still to update, or updated and not yet ready
    stalled: tuple[int, ...]  # updated groups not ready within the progress deadline
    requeue_after_s: float | None  # when the first group in progress reaches its deadline
    names: tuple[str, ...] = ()  # the group at each position (rollout.decide)


def plan(
    replicas: int,
    groups: Mapping[int, Group],
    strategy: Strategy,
    *,
    now: float | None,
    was_rolling: bool,
) -> Steps:
    """`groups`: the groups that exist, by position (group_set.py: the members, then the
    extras). `was_rolling`: the last status said a rollout was under way (so that the last
    group's deadline still counts once none is outdated)."""
    wanted = range(replicas)
    spare_range = range(replicas, replicas + strategy.max_surge)
    outdated = [i for i in wanted if i in groups and not groups[i].updated]
    all_ready = all(i in groups and groups[i].updated and groups[i].ready for i in wanted)
    had_spare = any(i in groups for i in spare_range)
    rolling = replicas > 0 and (bool(outdated) or (not all_ready and (was_rolling or had_spare)))
    spares = strategy.max_surge if rolling else 0
    serving = [*wanted, *range(replicas, replicas + spares)]
    in_progress = [i for i in serving if i in groups and groups[i].updated and not groups[i].ready]
    overdue = [
        i
        for i in in_progress
        if now is not None and _age(groups[i], now) > strategy.progress_deadline_s
    ]
    stalled = tuple(overdue) if rolling else ()
    # A group to stop is written even in a stalled rollout: the brake is no template change.
    hold = {i for i in outdated if not groups[i].stopped}
    if not stalled:
        ready = sum(1 for i in serving if i in groups and groups[i].ready)
        budget = ready - (replicas - strategy.max_unavailable)
        if replicas > 1:  # never the last group serving (a prefill role's maxUnavailable may
            budget = min(budget, ready - 1)  # reach its count; the others may be stopped)
        for i in sorted(hold, key=lambda i: (groups[i].ready, i)):
            if groups[i].ready:  # a group down already costs nothing to update
                if budget <= 0:
                    break
                budget -= 1
            hold.discard(i)
    requeue = None
    if rolling and not stalled and now is not None:
        new = [i for i in serving if i not in groups or (i in outdated and i not in hold)]
        left = [strategy.progress_deadline_s - _age(groups[i], now) for i in in_progress]
        left += [strategy.progress_deadline_s] * len(new)
        requeue = max(0.0, min(left)) + 1.0 if left else None
    return Steps(frozenset(hold), spares, replicas - len(hold), rolling, stalled, requeue)


def _age(group: Group, now: float) -> float:
    return 0.0 if group.rolled_at is None else now - group.rolled_at


def epoch(text: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 UTC time as the operator writes them; None else."""
    try:
        return float(calendar.timegm(time.strptime(text, TIME_FORMAT)))
    except ValueError:
        return None


def group_ready(group: Mapping[str, Any]) -> bool:
    """Every replica Ready, as observed for the LeaderWorkerSet's current spec (a status from
    before a template change says nothing about the pods that replace the old ones). A group at
    0 replicas (stopped by the restart budget: group_life.braked) runs no pod: never Ready."""
    status = group.get("status") or {}
    observed = status.get("observedGeneration")
    generation = group.get("metadata", {}).get("generation")
    if observed is not None and generation is not None and int(observed) < int(generation):
        return False
    wanted = int(group.get("spec", {}).get("replicas", 1))
    return wanted > 0 and int(status.get("readyReplicas", 0)) >= wanted


def draining_since(group: Mapping[str, Any]) -> str | None:
    """When the group's drain began; None when it is not draining."""
    return _annotations(group).get(DRAINING_ANNOTATION)


def serving(group: Mapping[str, Any]) -> bool:
    """Ready and in routing: a draining group serves only what it already holds."""
    return group_ready(group) and draining_since(group) is None


def roles(kd: KimiDeployment) -> dict[str, int]:
    """Each role's letter (`g`: spec.replicas', `p`: spec.prefill's) and its replicas."""
    out = {"g": kd.spec.replicas}
    if kd.spec.prefill is not None:
        out["p"] = kd.spec.prefill.replicas
    return out


def group_of(deployment: str, name: str) -> tuple[str, int] | None:
    """(`g` or `p`, `i`) of a child named `<deployment>-g<i>` or `<deployment>-p<i>`, None for
    any other name."""
    match = re.fullmatch(re.escape(deployment) + r"-([gp])(\d+)", name)
    return (match.group(1), int(match.group(2))) if match else None


def group_index(deployment: str, name: str) -> int | None:
    """`i` of a child named `<deployment>-g<i>`, None for any other name."""
    found = group_of(deployment, name)
    return found[1] if found is not None and found[0] == "g" else None


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    annotations: Mapping[str, str] = obj.get("metadata", {}).get("annotations") or {}
    return annotations


def is_updated(live: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """`desired` carries the operator's applied-spec annotation (k8s.merge.with_owner)."""
    applied = _annotations(live).get(APPLIED_ANNOTATION)
    return applied == _annotations(desired)[APPLIED_ANNOTATION] and covers(
        live.get("spec"), desired["spec"]
    )


def rolled_at(group: Mapping[str, Any]) -> float | None:
    """When the operator last wrote the group's template (epoch seconds); None: not known."""
    return epoch(_annotations(group).get(ROLLED_AT_ANNOTATION, ""))


def observe(live: Mapping[str, Any], desired: Mapping[str, Any]) -> Group:
    return Group(
        updated=is_updated(live, desired),
        ready=serving(live),  # a draining group is unavailable: maxUnavailable counts it
        rolled_at=rolled_at(live),
        stopped=int(desired["spec"].get("replicas", 1)) == 0,
    )


def leader_image(group: Mapping[str, Any]) -> str:
    """The image of a LeaderWorkerSet's vLLM container ("" if none)."""
    template = group.get("spec", {}).get("leaderWorkerTemplate", {})
    pod = template.get("leaderTemplate") or template.get("workerTemplate") or {}
    for container in pod.get("spec", {}).get("containers", []):
        if container.get("name") == "vllm":
            return str(container.get("image", ""))
    return ""


@dataclass(frozen=True)
class Decision:
    write: list[dict[str, Any]]  # children to apply (groups stamped with ROLLED_AT_ANNOTATION)
    held: list[dict[str, Any]]  # outdated groups as they are: left alone, not pruned
    steps: Steps  # the groups of spec.replicas'; `rolling` and the requeue of both roles
    prefill_steps: Steps | None = None  # spec.prefill's groups', rolled on their own

    @property
    def planned(self) -> list[dict[str, Any]]:
        """Every child the deployment keeps: the others are pruned."""
        return [*self.write, *self.held]


def decide(
    kd: KimiDeployment,
    children: Sequence[Mapping[str, Any]],
    live: Mapping[str, Mapping[str, Any]],
    *,
    positions: Mapping[str, Sequence[str]],
    replacing: Collection[str] = (),
    leaving: Collection[str] = (),
    now: str,
    was_rolling: bool,
    older: Collection[str] = (),
) -> Decision:
    """`children`: the deployment's children as the operator writes them (with owner and
    applied-spec annotation); `live`: its LeaderWorkerSets by name; `positions`: each role's
    groups in position order (group_set.py: members, extras, fresh names), of which the rollout
    keeps `replicas` and its surge; `replacing`: evacuations' replacements not yet serving
    (written with the current template, outside the budget: they serve nothing); `leaving`:
    evacuated groups draining (left as they are); `older`: groups on an older template
    (upgrades.py): counted as updated, left as they are."""
    spec = kd.spec
    strategy = Strategy(
        spec.rollout.max_unavailable,
        spec.rollout.max_surge,
        float(spec.rollout.progress_deadline_seconds),
    )
    by_name = {c["metadata"]["name"]: c for c in children if c["kind"] == LWS_KIND}
    steps, kept, hold = {}, set(replacing) | set(leaving), set(leaving)
    for letter, replicas in roles(kd).items():
        names = list(positions.get(letter, ()))
        groups = {
            i: _observed(live[name], by_name[name], name in older)
            for i, name in enumerate(names)
            if name in live and name in by_name
        }
        step = plan(replicas, groups, strategy, now=epoch(now), was_rolling=was_rolling)
        steps[letter] = dataclasses.replace(step, names=tuple(names))
        kept |= set(names[: replicas + step.spares])
        hold |= {names[i] for i in step.hold}
    write, held = [], []
    for child in children:
        name = child["metadata"]["name"]
        found = group_of(kd.metadata.name, name)
        if child["kind"] not in GROUP_KINDS or found is None or found[0] not in steps:
            write.append(dict(child))
        elif name not in kept:
            continue  # an extra no longer needed, or a fresh name not taken: pruned
        elif child["kind"] != LWS_KIND:
            write.append(dict(child))
        elif name in hold or name in older:
            held.append(dict(live[name]))
        else:
            write.append(_stamped(child, live.get(name), now))
    decode, prefill = steps["g"], steps.get("p")
    if prefill is not None:
        requeues = [s.requeue_after_s for s in (decode, prefill) if s.requeue_after_s is not None]
        decode = dataclasses.replace(
            decode,
            rolling=decode.rolling or prefill.rolling,
            requeue_after_s=min(requeues, default=None),
        )
    return Decision(write, held, decode, prefill)


def _observed(live: Mapping[str, Any], desired: Mapping[str, Any], older: bool) -> Group:
    """A group as the rollout sees it; one `older` counted as updated."""
    group = observe(live, desired)
    return dataclasses.replace(group, updated=True) if older else group


def _stamped(child: Mapping[str, Any], live: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    """The group with the time its template was written: kept while the template is unchanged
    (no write), `now` when this write changes it."""
    if live is not None and is_updated(live, child):
        since = _annotations(live).get(ROLLED_AT_ANNOTATION)
    else:
        since = now
    if since is None:
        return dict(child)
    metadata = child["metadata"]
    annotations = {**metadata.get("annotations", {}), ROLLED_AT_ANNOTATION: since}
    return {**child, "metadata": {**metadata, "annotations": annotations}}
