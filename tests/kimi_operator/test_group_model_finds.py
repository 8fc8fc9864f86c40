"""The model check finds each scenario of #56 (tests/support/group_model.py): the code before the
group set decided by position and cannot run against today's API, so each scenario's old
behaviour is put back into today's code by a narrow monkeypatch (the mutation), and the state
machine, driven through the scenario's steps, must fail with the invariant that catches it; the
same steps pass on the code as it is. docs/development.md has the table (scenario, mutation,
invariant, steps), and why the scenarios the machine cannot reach are proved elsewhere.

The steps are the machine's own rules, in order, then its teardown (the events stop): what
hypothesis would have to draw, fixed here so that `make test` proves every scenario in a few
seconds, the same each time."""

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from kimi_operator import group_set, rollout
from kimi_operator.evacuation import recorded
from kimi_operator.rollout import draining_since
from tests.support.group_model import (
    BOTH_OUT,
    BUDGET,
    DRAIN,
    DROPPED,
    LOOP,
    MADE_AGAIN,
    NAME,
    ROLLING,
    SETTLED,
    Fleet,
    played,
)

Steps = Callable[[Fleet], None]
# The module (kimi_operator.reconcile re-exports its function `decide` under the same name).
DECIDE = importlib.import_module("kimi_operator.reconcile.decide")


def g(index: int) -> str:
    return f"{NAME}-g{index}"


# The mutations: each puts one scenario's old behaviour back.


def unknown_read_as_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unknown read as fit: pods not read as none, the Node watch unlisted as no node unfit (the
    old `affected(pods or [], unfit) if unfit else {}`)."""
    real = group_set.plan

    def plan(kd: Any, live: Any, pods: Any, unfit: Any, **kw: Any) -> group_set.GroupSet:
        return real(kd, live, pods or [], unfit or {}, **kw)

    monkeypatch.setattr(group_set, "plan", plan)


def replacement_outside_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rollout rewrites a replacement at once: a group that carries an evacuation record is
    written whatever the rollout's budget holds (the old slot at index `replicas`, outside the
    indices the rollout held)."""
    real = rollout.decide

    def decide(kd: Any, children: Any, live: Mapping[str, Any], **kw: Any) -> rollout.Decision:
        out = real(kd, children, live, **kw)
        slot = {n for n, group in live.items() if recorded(group) is not None}
        wanted = {c["metadata"]["name"]: c for c in children if c["kind"] == rollout.LWS_KIND}
        held = [h for h in out.held if h["metadata"]["name"] not in slot]
        freed = [wanted[h["metadata"]["name"]] for h in out.held if h["metadata"]["name"] in slot]
        return dataclasses.replace(out, write=[*out.write, *freed], held=held)

    monkeypatch.setattr(rollout, "decide", decide)


def room_it_just_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A critical condition without room loops: a group made is not kept off a node that only
    has a condition (placement.kept_off), and a replacement placed on the node its group left
    is evacuated from it again (group_set._back_on). Either fix alone holds (below)."""
    kept_on(monkeypatch)
    evacuated_again(monkeypatch)


def kept_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DECIDE, "kept_off", lambda group, _nodes: dict(group))


def evacuated_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_set, "_back_on", lambda _record, _where: False)


def identity_by_position(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replacement's identity is its position: an evacuation record is read only on the
    group at index `replicas` (the old slot `-g<replicas>`), so a count changed by the HPA makes
    the replacement an ordinary member."""
    real = group_set._role

    def role(kd: Any, out: Any, mine: Mapping[str, Any], seen: Any, **kw: Any) -> Any:
        slot = f"{kd.metadata.name}-{kw['letter']}{kw['replicas']}"
        read = {n: group if n == slot else _unrecorded(group) for n, group in mine.items()}
        return real(kd, out, read, seen, **kw)

    monkeypatch.setattr(group_set, "_role", role)


def _unrecorded(group: Mapping[str, Any]) -> dict[str, Any]:
    meta = group["metadata"]
    kept = {k: v for k, v in meta.get("annotations", {}).items() if "evacuation" not in k}
    return {**group, "metadata": {**meta, "annotations": kept}}


def gone_keeps_its_position(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gone group keeps the deployment rolling: an evacuated group, once gone, keeps its
    position in the rollout until its node is fit (its replacement kept beside it as it is),
    as by index it did."""
    real = rollout.decide

    def decide(
        kd: Any, children: Any, live: Mapping[str, Any], *, positions: Any, **kw: Any
    ) -> rollout.Decision:
        gone = {
            n: r.group
            for n, group in live.items()
            if (r := recorded(group)) is not None and r.group not in live
        }
        moved = {letter: [gone.get(n, n) for n in names] for letter, names in positions.items()}
        leaving = {*kw.pop("leaving", ()), *gone}
        return real(kd, children, live, positions=moved, leaving=leaving, **kw)

    monkeypatch.setattr(rollout, "decide", decide)


def drain_carries_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """A drain once begun carries on when the replacement stops serving: a group draining
    leaves whether or not its replacement serves."""
    real = group_set._step

    def step(kd: Any, out: Any, seen: Any, mine: Mapping[str, Any], **kw: Any) -> bool:
        draining = draining_since(mine.get(kw["record"].group) or {}) is not None
        return real(kd, out, seen, mine, **kw) or draining

    monkeypatch.setattr(group_set, "_step", step)


def made_again_once_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second start after uncordon: once its evacuation is over, the replacement gives the
    first `replicas` positions back to the original names (the group is made again there, the
    replacement leaves), as by index it did."""
    real = group_set.plan

    def plan(kd: Any, *args: Any, **kw: Any) -> group_set.GroupSet:
        out = real(kd, *args, **kw)
        if any(mark is None for mark in out.marks.values()):
            for role in out.roles.values():
                first = [f"{kd.metadata.name}-{role.letter}{i}" for i in range(role.replicas)]
                role.positions = [*first, *(n for n in role.positions if n not in first)]
        return out

    monkeypatch.setattr(group_set, "plan", plan)


def one_slot_per_role(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rack drain deadlocks: an evacuation keeps the role's one slot while its node stays
    unfit (its replacement still recorded, its group gone), so no other evacuation begins: a
    second group on the rack is never replaced, and its pods are refused by the budget for
    ever."""
    real = group_set._role

    def role(kd: Any, out: Any, mine: Mapping[str, Any], seen: Any, **kw: Any) -> Any:
        found = real(kd, out, mine, seen, **kw)
        if any((r := recorded(g)) is not None and r.group not in mine for g in mine.values()):
            for name in [n for n in found.replacing if n not in mine]:  # begun now: not yet
                del found.replacing[name]
                out.marks.pop(name, None)
        return found

    monkeypatch.setattr(group_set, "_role", role)


# The steps: the machine's rules in order (its first two groups are g0 on tray-0 and tray-1,
# g1 on tray-2 and tray-3; new groups take the first free trays).


def restart_while_the_replacement_waits(m: Fleet) -> None:
    m.cordon({"tray-4", "tray-5", "tray-6", "tray-7"})
    m.cordon({"tray-0", "tray-8", "tray-9"})  # g0 leaves; no room: its replacement waits
    m.operator_restarted()


def edit_after_an_evacuation(m: Fleet) -> None:
    m.cordon({"tray-2"})  # g1 leaves: g2 replaces it
    m.time_passes()
    m.time_passes()
    m.template_edited()


def critical_without_room(m: Fleet) -> None:
    m.cordon({"tray-4", "tray-5", "tray-6", "tray-7"})
    m.cordon({"tray-8"})  # one free tray: no room for a replacement
    m.condition("tray-0", "GpuPcieWatch")
    for _ in range(40):  # a round of the loop takes four steps (drainSeconds: two)
        m.time_passes()


def scaled_up_mid_evacuation(m: Fleet) -> None:
    m.scaled(1)  # g1 drains, then goes
    m.time_passes()
    m.time_passes()
    m.cordon({"tray-0"})  # g0 leaves: g1 (index 1, the old slot) replaces it
    m.scaled(2)


def evacuated_mid_rollout(m: Fleet) -> None:
    m.cordon({"tray-2"})  # g1 leaves: g2 replaces it
    m.template_edited()  # g2 serves, g1 goes, g0 is rewritten, g2's turn is next


def replacement_crashes_while_its_group_drains(m: Fleet) -> None:
    m.cordon({"tray-0"})
    m.time_passes()  # g2 serves: g0 drains (two steps)
    m.crash_group(g(2))  # down for two steps: g0's drain would end meanwhile
    m.crash_group(g(2))


def uncordoned_after_an_evacuation(m: Fleet) -> None:
    m.cordon({"tray-0"})
    m.time_passes()


def rack_drained(m: Fleet) -> None:
    m.drain_the_rack()


SCENARIOS: list[tuple[str, Callable[[pytest.MonkeyPatch], None], Steps, str]] = [
    ("unknown read as fit", unknown_read_as_fit, restart_while_the_replacement_waits, DROPPED),
    (
        "a rollout rewrites the replacement outside its budget",
        replacement_outside_the_budget,
        edit_after_an_evacuation,
        BUDGET,
    ),
    ("a critical condition without room loops", room_it_just_freed, critical_without_room, LOOP),
    (
        "the replacement's identity is its position",
        identity_by_position,
        scaled_up_mid_evacuation,
        SETTLED,
    ),
    ("a gone group keeps it rolling", gone_keeps_its_position, evacuated_mid_rollout, ROLLING),
    (
        "a drain continues when the replacement stops serving",
        drain_carries_on,
        replacement_crashes_while_its_group_drains,
        BOTH_OUT,
    ),
    (
        "a second start after uncordon",
        made_again_once_fit,
        uncordoned_after_an_evacuation,
        MADE_AGAIN,
    ),
    ("a rack drain deadlocks", one_slot_per_role, rack_drained, DRAIN),
]
IDS = [s[0] for s in SCENARIOS]


@pytest.mark.parametrize(("mutation", "steps", "invariant"), [s[1:] for s in SCENARIOS], ids=IDS)
def test_the_model_check_finds_the_scenario_with_its_fix_taken_out(
    monkeypatch: pytest.MonkeyPatch,
    mutation: Callable[[pytest.MonkeyPatch], None],
    steps: Steps,
    invariant: str,
) -> None:
    mutation(monkeypatch)
    with pytest.raises(AssertionError, match=invariant):
        played(steps)


@pytest.mark.parametrize("steps", [s[2] for s in SCENARIOS], ids=IDS)
def test_the_same_steps_pass_on_the_code_as_it_is(steps: Steps) -> None:
    played(steps)


@pytest.mark.parametrize("fix_left", [kept_on, evacuated_again])
def test_either_fix_alone_keeps_a_critical_condition_from_looping(
    monkeypatch: pytest.MonkeyPatch, fix_left: Callable[[pytest.MonkeyPatch], None]
) -> None:
    """Only one of the two fixes taken out (the other left in): no loop."""
    fix_left(monkeypatch)
    played(critical_without_room)
