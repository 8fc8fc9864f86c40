"""Groups waiting for nodes: the scheduler's words in Progressing (InsufficientCapacity)."""

from typing import Any

from kimi_operator import conditions as cond


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
