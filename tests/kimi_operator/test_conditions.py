"""The status a reconcile computes (kimi_operator/conditions.py): transition times, Warning
Events for new problems only, an invalid spec keeping what was observed, and what the status says
during a rollout (docs/rollout.md), and when groups wait for nodes (InsufficientCapacity, in the
scheduler's words)."""

import dataclasses
from typing import Any

from kimi_operator import conditions as cond
from kimi_operator.api.problem import Problem

ROLLING = cond.Observation(
    groups_wanted=3,
    groups_present=3,
    groups_ready=2,
    endpoint="http://k3.inference.svc:8000/v1",
    groups_updated=2,
    rolling=True,
)


def seen(**changes: Any) -> cond.Observation:
    return dataclasses.replace(ROLLING, **changes)


def entries(observation: cond.Observation) -> dict[str, tuple[str, str, str]]:
    return {kind: entry for kind, entry in cond.valid_conditions(observation).entries.items()}


def test_rolling_out_says_how_many_groups_are_updated() -> None:
    now = entries(seen())
    assert now["Progressing"] == ("True", "RollingOut", "2 of 3 groups updated")
    assert now["Ready"] == ("False", "GroupsNotReady", "2 of 3 TP groups ready")
    assert now["Degraded"][:2] == ("False", "AsExpected")
    # A surge group ready in place of the one restarting: every group's worth is serving.
    assert entries(seen(groups_ready=3, groups_present=4))["Ready"][:2] == (
        "True",
        "AllGroupsReady",
    )


def test_a_stalled_rollout_is_degraded_and_no_longer_progressing() -> None:
    why = "k3-g0 not Ready within spec.rollout.progressDeadlineSeconds (60 s)"
    now = entries(seen(groups_updated=1, stalled=why))
    assert now["Degraded"] == ("True", "RolloutStalled", why)
    assert now["Progressing"] == ("False", "RolloutStalled", f"1 of 3 groups updated; {why}")
    status = cond.render({}, cond.valid_conditions(seen(stalled=why)), generation=2, now="t")
    assert [p.reason for p in cond.newly_bad({}, status)] == ["RolloutStalled"]


def test_waiting_for_the_default_image_turn_is_progress_not_a_problem() -> None:
    waiting = "the operator's default image x:2 waits for inference/a to finish moving to it"
    now = entries(seen(groups_ready=3, groups_updated=3, rolling=False, waiting=waiting))
    assert now["Progressing"] == ("True", "WaitingForTurn", waiting)
    assert now["Ready"][0] == "True"


def test_rollout_fields_are_kept_when_not_given() -> None:
    old = {"updatedReplicas": 2, "image": "x:1", "imageSource": "Pinned", "pendingImage": "x:2"}
    status = cond.render(old, cond.valid_conditions(seen()), generation=1, now="t")
    assert {k: status[k] for k in old} == old
    given = {"updatedReplicas": 3, "image": "x:2", "imageSource": "OperatorDefault"}
    status = cond.render(old, cond.valid_conditions(seen()), generation=1, now="t", rollout=given)
    assert (status["image"], status["pendingImage"]) == ("x:2", "")


def steady(**changes: Any) -> cond.Observation:
    base: dict[str, Any] = {
        "groups_wanted": 2,
        "groups_present": 2,
        "groups_ready": 1,
        "endpoint": "http://x",
        "domains_wanted": 2,
        "domains_ready": 2,
    }
    return cond.Observation(**(base | changes))


def test_transition_time_moves_only_when_the_status_changes() -> None:
    first = cond.render({}, cond.valid_conditions(steady()), generation=1, now="T1")
    same = cond.render(first, cond.valid_conditions(steady()), generation=1, now="T2")
    assert same == first
    ready = cond.render(
        first, cond.valid_conditions(steady(groups_ready=2)), generation=1, now="T3"
    )
    times = {c["type"]: c["lastTransitionTime"] for c in ready["conditions"]}
    assert times == {
        "Ready": "T3",
        "Progressing": "T3",
        "Degraded": "T1",
        "SpecValid": "T1",
        "MNNVLReady": "T1",
        "WeightsReady": "T1",
        "RoutingReady": "T1",
    }


def test_new_problems_are_worth_one_event_each() -> None:
    missing = Problem("LeaderWorkerSetNotInstalled", "install it")
    first = cond.render({}, cond.valid_conditions(steady()), generation=1, now="T")
    broken = cond.render(
        first, cond.valid_conditions(steady(blockers=[missing])), generation=1, now="T"
    )
    assert cond.newly_bad(first, broken) == [missing]  # Ready and Degraded: one event
    assert cond.newly_bad(broken, broken) == []  # not again on every resync


def test_invalid_spec_keeps_what_was_observed() -> None:
    ready = cond.render(
        {}, cond.valid_conditions(steady(groups_ready=2)), generation=1, now="T1", counts=(2, 2)
    )
    problem = Problem.in_field("spec.gpus", "is not one of the allowed values", "8, 16", got=4)
    invalid = cond.render(ready, cond.invalid_conditions(ready, [problem]), generation=2, now="T2")
    by_type = {c["type"]: c for c in invalid["conditions"]}
    assert by_type["Ready"]["status"] == "True"
    assert by_type["SpecValid"] | {"lastTransitionTime": ""} == {
        "type": "SpecValid",
        "status": "False",
        "reason": "Invalid",
        "message": "spec.gpus: is not one of the allowed values (got 4; allowed: 8, 16)",
        "lastTransitionTime": "",
        "observedGeneration": 2,
    }
    assert invalid["replicas"] == ready["replicas"] == 2


def pod(name: str, scheduled: str, reason: str = "", message: str = "") -> dict[str, Any]:
    condition = {"type": "PodScheduled", "status": scheduled, "reason": reason, "message": message}
    return {"metadata": {"name": name}, "status": {"conditions": [condition]}}


FULL = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


def test_only_unschedulable_pods_count() -> None:
    assert cond.unschedulable([pod("a", "True"), {"metadata": {"name": "b"}}]) == ""
    # Scheduled=False for another reason (e.g. a scheduling gate) is not a capacity problem.
    assert cond.unschedulable([pod("c", "False", "SchedulingGated", "gated")]) == ""
    assert cond.unschedulable([pod("k3-g1-0-2", "False", "Unschedulable", FULL)]) == (
        f"pod k3-g1-0-2 cannot be scheduled: {FULL}"
    )
    two = [pod(f"k3-g1-0-{i}", "False", "Unschedulable", FULL) for i in (3, 2)]
    assert cond.unschedulable(two) == f"pod k3-g1-0-2 (and 1 more pod) cannot be scheduled: {FULL}"
    several = [pod(f"k3-g1-0-{i}", "False", "Unschedulable", FULL) for i in (3, 1, 2)]
    assert cond.unschedulable(several) == (
        f"pod k3-g1-0-1 (and 2 more pods) cannot be scheduled: {FULL}"
    )


def test_progressing_says_insufficient_capacity_until_the_group_runs() -> None:
    seen = cond.Observation(
        groups_wanted=2, groups_present=2, groups_ready=1, endpoint="", unschedulable="why"
    )
    out = cond.valid_conditions(seen)
    assert out.entries["Progressing"] == (
        "True",
        "InsufficientCapacity",
        "1 of 2 TP groups ready; why",
    )
    assert out.entries["Ready"][:2] == ("False", "GroupsNotReady")
    started = cond.valid_conditions(
        cond.Observation(groups_wanted=2, groups_present=2, groups_ready=1, endpoint="")
    )
    assert started.entries["Progressing"][1] == "GroupsStarting"


def test_scale_fields_are_written_and_kept() -> None:
    seen = cond.Observation(groups_wanted=1, groups_present=1, groups_ready=1, endpoint="e")
    scale = cond.ScaleStatus(selector="a=b", gpus=16, autoscaler="ScaledObject/k3")
    status = cond.render({}, cond.valid_conditions(seen), generation=1, now="t", scale=scale)
    assert (status["selector"], status["gpus"], status["autoscaler"]) == (
        "a=b",
        16,
        "ScaledObject/k3",
    )
    kept = cond.render(status, cond.valid_conditions(seen), generation=2, now="t")
    assert (kept["selector"], kept["gpus"], kept["autoscaler"]) == ("a=b", 16, "ScaledObject/k3")


def test_with_prefill_groups_ready_needs_both_roles() -> None:
    settled = seen(groups_ready=3, rolling=False, prefill_wanted=2, prefill_present=2)
    for prefill_ready, want in ((0, "False"), (1, "False"), (2, "True")):
        ready = entries(dataclasses.replace(settled, prefill_ready=prefill_ready))["Ready"]
        assert ready[0] == want, prefill_ready
        assert f"3 of 3 TP groups ready, {prefill_ready} of 2 prefill groups" in ready[2]
    # A prefill group too many (one being pruned) keeps Progressing until it is gone.
    extra = dataclasses.replace(settled, prefill_ready=2, prefill_present=3)
    assert entries(extra)["Progressing"][1] != "Reconciled"


def test_a_rollout_of_the_prefill_role_says_how_far_it_got() -> None:
    rolling = seen(groups_ready=3, groups_updated=3, prefill_wanted=2, prefill_present=2)
    progressing = entries(dataclasses.replace(rolling, prefill_ready=1, prefill_updated=1))
    assert progressing["Progressing"] == (
        "True",
        "RollingOut",
        "3 of 3 groups updated, 1 of 2 prefill groups",
    )


def test_a_group_draining_is_progressing_not_a_phase() -> None:
    """drain.py: Ready as the groups kept are, Progressing says what drains (with its count)."""
    text = "k3-g1 out of routing, draining: 3 requests in flight; goes when they finish or at …"
    after_scale_down = seen(groups_wanted=1, groups_present=1, groups_ready=1, rolling=False)
    now = entries(dataclasses.replace(after_scale_down, draining=text))
    assert now["Progressing"] == ("True", "Draining", text)
    assert now["Ready"][:2] == ("True", "AllGroupsReady")
    assert entries(after_scale_down)["Progressing"][1] == "Reconciled"
    # During a rollout: the count of groups updated, then the drain.
    rolling = entries(seen(draining=text))["Progressing"]
    assert rolling == ("True", "RollingOut", f"2 of 3 groups updated; {text}")
