"""The rollout planner: which TP groups a reconcile rewrites, and when it waits or stops."""

import itertools

import pytest

from kimi_operator.rollout import Group, Steps, Strategy, epoch, group_index, group_ready, plan

NOW = 1_000_000.0
OLD = Group(updated=False, ready=True)
NEW = Group(updated=True, ready=True, rolled_at=NOW - 10)
STARTING = Group(updated=True, ready=False, rolled_at=NOW - 10)


def steps(
    groups: dict[int, Group],
    replicas: int = 3,
    strategy: Strategy | None = None,
    was_rolling: bool = False,
) -> Steps:
    return plan(replicas, groups, strategy or Strategy(), now=NOW, was_rolling=was_rolling)


def test_an_unchanged_template_rewrites_nothing() -> None:
    done = steps({0: NEW, 1: NEW, 2: NEW})
    assert (done.hold, done.updated, done.rolling, done.spares) == (frozenset(), 3, False, 0)
    assert done.requeue_after_s is None


def test_one_group_at_a_time_by_default() -> None:
    first = steps({0: OLD, 1: OLD, 2: OLD})
    assert (first.hold, first.updated, first.rolling) == (frozenset({1, 2}), 1, True)
    assert first.requeue_after_s == 3601.0  # the deadline of the group written now
    waiting = steps({0: STARTING, 1: OLD, 2: OLD})
    assert waiting.hold == frozenset({1, 2})
    assert waiting.requeue_after_s == 3600.0 - 10 + 1
    assert steps({0: NEW, 1: OLD, 2: OLD}).hold == frozenset({2})
    assert steps({0: NEW, 1: NEW, 2: STARTING}, was_rolling=True).rolling


def test_max_unavailable_two_updates_two_at_once() -> None:
    wide = steps({i: OLD for i in range(4)}, replicas=4, strategy=Strategy(max_unavailable=2))
    assert wide.hold == frozenset({2, 3})


def test_a_group_down_already_is_updated_first_and_free() -> None:
    down = Group(updated=False, ready=False)
    assert steps({0: OLD, 1: down, 2: OLD}).hold == frozenset({0, 2})
    assert steps({0: OLD, 1: down, 2: down}).hold == frozenset({0})


def test_the_last_group_serving_is_never_taken() -> None:
    """With one group of two down (stopped by the restart budget), a maxUnavailable that reaches
    the role's count (a prefill role's: only spec.replicas bounds it) still keeps the other."""
    down = Group(updated=True, ready=False, rolled_at=NOW - 10)
    wide = Strategy(max_unavailable=2)
    assert steps({0: OLD, 1: down}, replicas=2, strategy=wide).hold == frozenset({0})
    assert steps({0: OLD, 1: OLD}, replicas=2, strategy=wide).hold == frozenset({1})
    assert steps({0: OLD}, replicas=1).hold == frozenset()  # one group: updated in place


def test_surge_makes_the_spare_first_and_drops_it_at_the_end() -> None:
    surge = Strategy(max_unavailable=0, max_surge=1)
    start = steps({0: OLD, 1: OLD, 2: OLD}, strategy=surge)
    assert (start.spares, start.hold) == (1, frozenset({0, 1, 2}))
    spare_up = steps({0: OLD, 1: OLD, 2: OLD, 3: NEW}, strategy=surge)
    assert spare_up.hold == frozenset({1, 2})
    last = steps({0: NEW, 1: NEW, 2: STARTING, 3: NEW}, strategy=surge)
    assert (last.spares, last.rolling) == (1, True)  # kept until the last group is ready
    end = steps({0: NEW, 1: NEW, 2: NEW, 3: NEW}, strategy=surge, was_rolling=True)
    assert (end.spares, end.rolling) == (0, False)


def test_missing_groups_are_created_with_the_new_template() -> None:
    grown = steps({0: OLD, 1: OLD}, replicas=3)
    assert grown.hold == frozenset({0, 1})  # 2 of 3 ready: no group may go down
    assert grown.updated == 1


def test_a_group_past_its_deadline_stops_the_rollout() -> None:
    late = Group(updated=True, ready=False, rolled_at=NOW - 3601)
    stalled = steps({0: late, 1: OLD, 2: OLD})
    assert (stalled.stalled, stalled.hold) == ((0,), frozenset({1, 2}))
    assert stalled.requeue_after_s is None
    # Even one group down already is not touched once stalled.
    down = Group(updated=False, ready=False)
    assert steps({0: late, 1: down, 2: OLD}).hold == frozenset({1, 2})
    # The last group: a rollout was under way (the status said so).
    assert steps({0: NEW, 1: NEW, 2: late}, was_rolling=True).stalled == (2,)
    # Not a rollout: a deployment starting, or a group that failed later.
    assert steps({0: NEW, 1: NEW, 2: late}).stalled == ()


def test_no_deadline_without_a_clock() -> None:
    late = Group(updated=True, ready=False, rolled_at=0.0)
    free = plan(3, {0: late, 1: OLD, 2: OLD}, Strategy(), now=None, was_rolling=True)
    assert (free.stalled, free.requeue_after_s) == ((), None)


@pytest.mark.parametrize(
    ("replicas", "unavailable", "surge"),
    [(1, 1, 0), (2, 1, 0), (3, 1, 0), (3, 2, 0), (3, 0, 1), (3, 1, 1), (5, 2, 1)],
)
def test_a_whole_rollout_keeps_its_minimum_ready(
    replicas: int, unavailable: int, surge: int
) -> None:
    """Groups written in one step are Ready at the next: at no step fewer than replicas -
    maxUnavailable (replicas with a surge and no unavailability) are ready, and it ends."""
    strategy = Strategy(unavailable, surge)
    groups = {i: OLD for i in range(replicas)}
    floor = replicas - unavailable
    for step in itertools.count():
        assert step < 3 * replicas + 3, "the rollout does not end"
        now = plan(replicas, groups, strategy, now=NOW, was_rolling=step > 0)
        if not now.rolling:
            break
        kept = range(replicas + now.spares)
        changed = {i for i in kept if i not in now.hold and not (i in groups and groups[i].updated)}
        groups = {i: STARTING if i in changed else groups[i] for i in kept}
        assert sum(g.ready for g in groups.values()) >= floor
        groups = {i: NEW if i in changed else g for i, g in groups.items()}
    assert set(groups) >= set(range(replicas))
    assert all(groups[i] == NEW for i in range(replicas))


def test_helpers() -> None:
    assert epoch("1970-01-02T00:00:00Z") == 86400.0
    assert epoch("now") is None
    assert group_index("k3", "k3-g12") == 12
    assert group_index("k3", "k3-x-g1") is None
    stale = {"metadata": {"generation": 3}, "status": {"readyReplicas": 1, "observedGeneration": 2}}
    assert not group_ready(stale)
    assert group_ready({"metadata": {"generation": 3}, "status": {"readyReplicas": 1}})
    stopped = {"spec": {"replicas": 0}, "status": {"readyReplicas": 0, "observedGeneration": 1}}
    assert not group_ready(stopped)  # at 0 replicas (the restart budget's brake): no pod
