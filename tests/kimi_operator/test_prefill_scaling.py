"""The prefill autoscaler's decision (prefill_scaling.py) on a virtual clock: each evaluation gets
only the last status, as after an operator restart, and the expected counts are worked out by hand
in the comments."""

import calendar
import time
from collections.abc import Sequence
from typing import Any

import pytest

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.prefill_scaling import (
    SCALED,
    SERVING,
    UNAVAILABLE,
    VALUE,
    Load,
    evaluate,
    queries,
    recommend,
    sample,
)
from kimi_operator.reconcile.status import Outcome, scaled_outcome
from kimi_operator.rollout import TIME_FORMAT
from tests.support.corpus import POOL
from tests.support.specs import edited

T0 = calendar.timegm(time.strptime("2026-01-01T00:00:00Z", TIME_FORMAT))
URL = "http://prometheus:9090"


def at(seconds: int) -> str:
    return time.strftime(TIME_FORMAT, time.gmtime(T0 + seconds))


def deployment(
    replicas: int = 1, target: dict[str, Any] | None = None, **bounds: int
) -> KimiDeployment:
    scaling = {
        "minReplicas": 1,
        "maxReplicas": 4,
        "target": target or {"waitingRequestsPerGroup": 4},
    }
    prefill = {"replicas": replicas, "autoscaling": scaling | bounds}
    doc = edited(POOL | {"spec.prefill": prefill})
    return KimiDeployment.model_validate(doc)


def waiting(total: float) -> Load:
    return Load({VALUE: total})


def counts(kd: KimiDeployment, steps: Sequence[tuple[int, Load | None]]) -> list[int]:
    """The count wanted after each (seconds, load) evaluation, the status carried between them."""
    status: dict[str, Any] = {}
    out = []
    for seconds, load in steps:
        scaled = evaluate(kd, status, load, now=at(seconds), url=URL)
        assert scaled.status is not None
        assert scaled.kd.spec.prefill is not None
        assert scaled.kd.spec.prefill.replicas == scaled.status["desiredReplicas"]
        status = {"prefillAutoscaler": scaled.status}
        out.append(scaled.status["desiredReplicas"])
    return out


def test_load_adds_one_group_per_scale_up_period() -> None:
    kd = deployment(scaleUpPeriodSeconds=600)
    # 40 waiting / 4 per group: 10 wanted, 4 at most. The first change is free; then one per
    # 600 s: 2 at 0 s, 3 at 600 s, 4 at 1200 s, and no fifth.
    steps = [(0, waiting(40)), (30, waiting(40)), (599, waiting(40)), (600, waiting(40))]
    steps += [(1199, waiting(40)), (1200, waiting(40)), (1800, waiting(40))]
    assert counts(kd, steps) == [2, 2, 2, 3, 3, 4, 4]


def test_a_group_is_removed_only_after_the_stabilization_window() -> None:
    kd = deployment(replicas=3, scaleUpPeriodSeconds=60, scaleDownStabilizationSeconds=300)
    # No load from the start: 1 recommended each time, but a new autoscaler counts its starting
    # 3 as a recommendation made at 0 s, so the first group goes at 300 s (the window past) and
    # the next 60 s later (one per period, every recommendation since asking for 1).
    steps = [(s, waiting(0)) for s in (0, 60, 240, 299, 300, 330, 360, 420)]
    assert counts(kd, steps) == [3, 3, 3, 3, 2, 2, 1, 1]


def test_a_burst_within_the_window_holds_the_groups() -> None:
    kd = deployment(replicas=3, scaleUpPeriodSeconds=60, scaleDownStabilizationSeconds=300)
    # At 400 s the start's 3 is out of the window (replaced at 0 s), and 1 holds: down to 2. A
    # burst at 460 s (60 s after that change) asks for 4: up to 3, one group. Then quiet at
    # 500 s: the burst's 4 held until 500 s and stays in the window until 800 s, so 3 is kept at
    # 799 s, and 2 at 800 s.
    steps = [(400, waiting(0)), (460, waiting(16)), (500, waiting(0)), (799, waiting(0))]
    steps += [(800, waiting(0))]
    status: dict[str, Any] = {
        "prefillAutoscaler": {
            "desiredReplicas": 3,
            # 3 held until 0 s, when 1 replaced it; 1 holds since.
            "recommendations": [{"at": at(0), "replicas": 3}, {"at": at(0), "replicas": 1}],
        }
    }
    out = []
    for seconds, load in steps:
        scaled = evaluate(kd, status, load, now=at(seconds), url=URL)
        assert scaled.status is not None
        status = {"prefillAutoscaler": scaled.status}
        out.append(scaled.status["desiredReplicas"])
    assert out == [2, 3, 3, 3, 2]


def test_no_answer_keeps_the_count_says_so_and_holds_a_scale_down() -> None:
    kd = deployment(replicas=2, scaleUpPeriodSeconds=60, scaleDownStabilizationSeconds=300)
    old = {
        "prefillAutoscaler": {
            "desiredReplicas": 2,
            "lastScaleTime": at(0),
            "recommendations": [{"at": at(0), "replicas": 2}],
        }
    }
    down = evaluate(kd, old, Load(error="ConnectionRefused"), now=at(1000), url=URL)
    assert down.kd.spec.prefill is not None
    assert down.kd.spec.prefill.replicas == 2
    assert down.status is not None
    assert down.problem is not None
    assert down.problem.reason == UNAVAILABLE
    assert down.problem.message == (
        f"no answer from Prometheus {URL} (ConnectionRefused): keeping 2 prefill groups"
    )
    assert down.status["message"] == down.problem.message
    assert down.notices == []
    # The silence counts as a recommendation to keep 2, holding until no load replaces it at
    # 1001 s: nothing is removed until 1301 s.
    after = {"prefillAutoscaler": down.status}
    quiet = evaluate(kd, after, waiting(0), now=at(1001), url=URL)
    assert quiet.status is not None
    assert quiet.status["desiredReplicas"] == 2
    assert quiet.problem is None
    held = evaluate(kd, {"prefillAutoscaler": quiet.status}, waiting(0), now=at(1300), url=URL)
    assert held.status is not None
    assert held.status["desiredReplicas"] == 2
    later = evaluate(kd, {"prefillAutoscaler": held.status}, waiting(0), now=at(1301), url=URL)
    assert later.status is not None
    assert later.status["desiredReplicas"] == 1


def test_an_empty_answer_is_no_answer_naming_the_query() -> None:
    kd = deployment(replicas=2)
    scaled = evaluate(kd, {}, Load({VALUE: None}), now=at(0), url=URL)
    assert scaled.problem is not None
    assert queries(kd)[VALUE] in scaled.problem.message
    assert scaled.status is not None
    assert scaled.status["desiredReplicas"] == 2


def test_ttft_scales_with_the_serving_groups_within_the_tolerance() -> None:
    kd = deployment(replicas=2, target={"ttftSecondsP90": 0.5})
    load = {SERVING: 2.0}
    # 2 groups x 0.52 s / 0.5 s = 2.08: within 10% of 2, so 2; x 0.6 s: 2.4, so 3.
    first = evaluate(kd, {}, Load(load | {VALUE: 0.52}), now=at(0))
    assert first.status is not None
    assert first.status["desiredReplicas"] == 2
    second = evaluate(kd, {}, Load(load | {VALUE: 0.6}), now=at(0))
    assert second.status is not None
    assert second.status["desiredReplicas"] == 3
    assert second.status["value"] == 0.6
    # No request in the window (NaN): no load, minReplicas recommended, kept for the window.
    idle = evaluate(kd, {}, Load(load | {VALUE: float("nan")}), now=at(0))
    assert idle.status is not None
    assert idle.status["recommendations"][-1]["replicas"] == 1
    assert "value" not in idle.status


def test_recommendations_are_ceilings_in_bounds() -> None:
    scaling = deployment().spec.prefill.autoscaling  # type: ignore[union-attr]
    assert scaling is not None
    assert recommend(scaling, 8 / 4, current=1) == 2
    assert recommend(scaling, 3 * 0.1 / 0.1, current=1) == 3  # 3.0000000000000004: not 4
    assert recommend(scaling, 2.2, current=1) == 3
    assert recommend(scaling, 9.0, current=1) == 4  # maxReplicas
    assert recommend(scaling, 0.0, current=3) == 1  # minReplicas


def test_a_change_is_a_notice_and_is_remembered() -> None:
    kd = deployment()
    scaled = evaluate(kd, {}, waiting(12), now=at(0), url=URL)
    (notice,) = scaled.notices
    assert notice.reason == SCALED
    assert notice.message.startswith("prefill groups 1 -> 2: 12 requests waiting")
    assert scaled.status is not None
    assert scaled.status["lastScaleTime"] == at(0)
    again = evaluate(kd, {"prefillAutoscaler": scaled.status}, waiting(12), now=at(1), url=URL)
    assert again.notices == []
    assert again.status is not None
    assert again.status["lastScaleTime"] == at(0)
    assert "2 kept: one group added per scaleUpPeriodSeconds" in again.status["message"]


def test_edited_bounds_apply_at_once_and_the_status_alone_counts() -> None:
    kd = deployment(replicas=1, maxReplicas=3)
    old = {"prefillAutoscaler": {"desiredReplicas": 4}}  # spec.prefill.replicas 1: a start only
    scaled = evaluate(kd, old, None, now=at(0))
    assert scaled.status is not None
    assert scaled.status["desiredReplicas"] == 3
    (notice,) = scaled.notices
    assert "spec.prefill.autoscaling allows 1 to 3 prefill groups" in notice.message


def test_without_autoscaling_nothing_is_decided_or_kept() -> None:
    kd = KimiDeployment.model_validate(edited(POOL | {"spec.prefill": {"replicas": 2}}))
    scaled = evaluate(kd, {"prefillAutoscaler": {"desiredReplicas": 4}}, None, now=at(0))
    assert scaled.kd is kd
    assert scaled.status is None
    assert queries(kd) == {}
    result = scaled_outcome(Outcome({"prefillAutoscaler": {"desiredReplicas": 4}}), scaled)
    assert "prefillAutoscaler" not in result.status
    assert result.requeue_after_s is None


def test_the_outcome_carries_the_memory_notices_and_a_poll() -> None:
    scaled = evaluate(deployment(), {}, waiting(12), now=at(0))
    result = scaled_outcome(Outcome({"replicas": 1}, requeue_after_s=90.0), scaled)
    assert result.status["prefillAutoscaler"] == scaled.status
    assert result.notices == scaled.notices
    assert result.requeue_after_s == 30.0
    assert not result.prune_again  # a group added: the plan creates it


def test_a_group_taken_away_asks_for_a_pruning_reconcile() -> None:
    kd = deployment(replicas=2, scaleUpPeriodSeconds=60, scaleDownStabilizationSeconds=300)
    old = {"prefillAutoscaler": {"desiredReplicas": 2, "recommendations": []}}
    scaled = evaluate(kd, old, waiting(0), now=at(0))  # 1 wanted, no window to wait for
    assert scaled.status is not None
    assert scaled.status["desiredReplicas"] == 1
    assert scaled_outcome(Outcome({}), scaled).prune_again
    kept = evaluate(kd, {"prefillAutoscaler": scaled.status}, waiting(0), now=at(30))
    assert not scaled_outcome(Outcome({}), kept).prune_again


@pytest.mark.parametrize(
    ("answer", "value"),
    [
        ({"status": "success", "data": {"resultType": "vector", "result": []}}, None),
        (
            {
                "status": "success",
                "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "3.5"]}]},
            },
            3.5,
        ),
        ({"status": "success", "data": {"resultType": "scalar", "result": [1, "2"]}}, 2.0),
    ],
)
def test_sample_reads_an_instant_answer(answer: dict[str, Any], value: float | None) -> None:
    assert sample(answer) == value


@pytest.mark.parametrize(
    "answer",
    [
        {"status": "error", "error": "parse error"},
        {"status": "success", "data": {"resultType": "matrix", "result": []}},
        {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}},
    ],
)
def test_sample_refuses_what_is_not_an_answer(answer: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"^(status 'error'|not a vector|a malformed vector)"):
        sample(answer)


def test_the_message_says_why_the_count_is_kept() -> None:
    kd = deployment(replicas=3, scaleUpPeriodSeconds=60, scaleDownStabilizationSeconds=300)
    first = evaluate(kd, {}, waiting(0), now=at(0))
    assert first.status is not None
    assert first.status["message"] == (
        "0 requests waiting in the prefill groups (target 4 per group): 1 prefill groups "
        "recommended; 3 kept: until every recommendation within scaleDownStabilizationSeconds "
        "asks for fewer"
    )
    # Down to 2 at 300 s; at 330 s the window asks for fewer, but a period has not passed.
    old = {"prefillAutoscaler": first.status}
    down = evaluate(kd, old, waiting(0), now=at(300))
    assert down.status is not None
    assert down.status["desiredReplicas"] == 2
    held = evaluate(kd, {"prefillAutoscaler": down.status}, waiting(0), now=at(330))
    assert held.status is not None
    assert held.status["message"].endswith("2 kept: one group removed per scaleUpPeriodSeconds")


def test_steady_load_writes_no_status() -> None:
    """The same decision made again leaves status.prefillAutoscaler as it was: a write only when
    something changes, not at every poll (30 s) of every autoscaled deployment."""
    kd = deployment(replicas=2, scaleUpPeriodSeconds=60, scaleDownStabilizationSeconds=300)
    first = evaluate(kd, {}, waiting(8), now=at(0), url=URL)  # 8 / 4: 2, the count
    assert first.status is not None
    status = first.status
    for seconds in (30, 60, 90, 400):
        again = evaluate(kd, {"prefillAutoscaler": status}, waiting(8), now=at(seconds), url=URL)
        assert again.status == status, seconds
        assert again.notices == []
    # A change of load is one: 1 recommended from 420 s, held since 0 s by 2 (until 420 s).
    lower = evaluate(kd, {"prefillAutoscaler": status}, waiting(0), now=at(420), url=URL)
    assert lower.status is not None
    assert lower.status["recommendations"] == [
        {"at": at(420), "replicas": 2},
        {"at": at(420), "replicas": 1},
    ]
