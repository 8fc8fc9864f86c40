"""What the status says during a rollout (docs/rollout.md)."""

import dataclasses
from typing import Any

from kimi_operator import conditions as cond

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
