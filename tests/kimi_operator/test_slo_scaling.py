"""slo_scaling.evaluate on a virtual clock: ahead of a ramp by the start-up time, the count kept
without an answer, stabilization and one group at a time down, no flapping, a bounded
correction, and the webhook's refusal saying what the shape can meet."""

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kimi_operator.api.spec import ScalingBounds
from kimi_operator.plan.calibration import Calibration
from kimi_operator.plan.capacity import Load, Role
from kimi_operator.plan.configs import Configuration, Disaggregated
from kimi_operator.plan.costs import DecodeCost, PrefillCost, StepCosts
from kimi_operator.rollout import TIME_FORMAT
from kimi_operator.slo_scaling import (
    CORRECTION_BOUND,
    SCALED,
    SETTLED,
    UNAVAILABLE,
    UNREACHABLE,
    Reading,
    Scaled,
    Scaler,
    Slo,
    attainable,
    evaluate,
    refusal,
)

START = 1_800_000_000.0
STARTUP_S = 900.0
WINDOW_S = 1200
PERIOD_S = 300
CONFIG = Configuration(name="k3", gpus=16, backend="auto", max_num_seqs=8)
# A small group: 10 ms decode steps (100 tok/s alone), prompts at 50K tokens/s.
CALIBRATION = Calibration(
    name="test",
    origin="test",
    gpus=16,
    backend="auto",
    draft_tokens=0,
    acceptance=0.0,
    max_num_seqs=8,
    costs=StepCosts(ordinary=DecodeCost(0.01, 0.001, 0.0), prefill=PrefillCost(0.05, 2e-5)),
    model="kimi-k3",
)
SLO = Slo(ttft_seconds=1.0, decode_tokens_per_s=60.0)
PROMPT, OUTPUT, HIT = 4000.0, 20.0, 0.5


def scaler(slo: Slo = SLO, most: int = 16) -> Scaler:
    bounds = ScalingBounds.model_validate(
        {"minReplicas": 1, "maxReplicas": most, "scaleDownStabilizationSeconds": WINDOW_S,
         "scaleUpPeriodSeconds": PERIOD_S}
    )  # fmt: skip
    return Scaler(CONFIG, CALIBRATION, "decode", slo, bounds)


def stamp(t: float) -> str:
    return time.strftime(TIME_FORMAT, time.gmtime(START + t))


def reading(t: float, rate: float, serving: int = 0, **measured: float) -> Reading:
    return Reading(stamp(t), rate, PROMPT, OUTPUT, HIT, serving, **measured)


def load(rate: float) -> Load:
    return Load(rate, PROMPT, OUTPUT, HIT)


def needs(s: Scaler, rate: float) -> int:
    """The fewest groups the model says meet the SLO at `rate`, by trying every count."""
    return next(g for g in range(1, 64) if s.slo.met(s.figures(load(rate), g)))


def run(s: Scaler, rates: Iterator[tuple[float, float | None]]) -> list[tuple[float, Scaled]]:
    """Evaluate every (time, rate) in turn (None: no answer), the status carried over."""
    status: dict[str, Any] | None = None
    out = []
    for t, rate in rates:
        answer = (
            None if rate is None else reading(t, rate, (status or {}).get("desiredReplicas", 1))
        )
        scaled = evaluate(s, status, answer, startup_s=STARTUP_S, now=stamp(t))
        status = scaled.status
        out.append((t, scaled))
    return out


def changes(counts: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """(time, change of the count) wherever it changed."""
    return [(t, c - before) for (_, before), (t, c) in itertools.pairwise(counts) if c != before]


def test_a_ramp_is_met_by_groups_asked_for_a_start_up_time_ahead() -> None:
    s = scaler()
    peak = 8.0 * 3  # the ramp ends where several groups are needed
    assert needs(s, peak) >= 4
    ramp_s = 3600.0

    def rate(t: float) -> float:
        return peak * min(t, ramp_s) / ramp_s

    decisions = run(s, ((t, rate(t)) for t in range(0, 4800, 60)))
    # Once the trend is known (Holt needs readings to learn it), to the end of the ramp.
    settled = [(t, d) for t, d in decisions if 900 <= t <= ramp_s - STARTUP_S]
    assert settled
    # What each decision asked for serves at t + start-up: it covers the load then.
    for t, scaled in settled:
        assert scaled.replicas >= needs(s, rate(t + STARTUP_S)), t
    # Reacting to the load read now would have been short for the same moments.
    assert any(needs(s, rate(t)) < needs(s, rate(t + STARTUP_S)) for t, _ in settled)
    # Each change is a notice; the status says why, at the count and at one fewer.
    changes = [d for _, d in decisions if d.notices]
    assert all(n.reason == SCALED for d in changes for n in d.notices)
    final = decisions[-1][1].status
    assert final["needed"]["replicas"] <= final["desiredReplicas"]
    assert final["needed"]["fewer"]["replicas"] == final["needed"]["replicas"] - 1
    assert final["needed"]["fewer"]["ttftSeconds"] > final["needed"]["ttftSeconds"]


def test_without_an_answer_the_count_stays_and_degraded_says_why() -> None:
    s = scaler()
    high = run(s, iter([(0.0, 20.0)]))[-1][1]
    assert high.replicas > 1
    silent = evaluate(s, high.status, None, startup_s=STARTUP_S, now=stamp(30))
    assert silent.replicas == high.replicas
    assert silent.problem is not None
    assert silent.problem.reason == UNAVAILABLE
    assert not silent.notices
    # The silence counts as a recommendation to keep the count: no removal for a window.
    quiet = evaluate(s, silent.status, reading(60, 0.1, high.replicas), startup_s=STARTUP_S,
                     now=stamp(60))  # fmt: skip
    assert quiet.replicas == high.replicas
    assert quiet.problem is None


def test_groups_leave_one_at_a_time_after_the_stabilization_window() -> None:
    s = scaler()
    rates = [(float(t), 20.0 if t < 600 else 0.5) for t in range(0, 600 + 3 * WINDOW_S, 30)]
    decisions = run(s, iter(rates))
    top = max(d.replicas for _, d in decisions)
    assert top >= 3
    steps = changes([(t, d.replicas) for t, d in decisions])
    downs = [(t, change) for t, change in steps if change < 0]
    assert downs
    assert downs[0][0] >= 600 + WINDOW_S - 30  # every recommendation in the window asked fewer
    assert all(change == -1 for _, change in downs)
    assert all(b - a >= PERIOD_S for (a, _), (b, _) in itertools.pairwise(downs))


def test_a_load_that_comes_and_goes_does_not_flap() -> None:
    s = scaler()
    # Bursts of 5 minutes, every 35 minutes: each one asks for groups, each lull for fewer.
    rates = [(float(t), 20.0 if t % 2100 < 300 else 1.0) for t in range(0, 4 * 2100, 30)]
    steps = changes([(t, d.replicas) for t, d in run(s, iter(rates))])
    ups = [t for t, change in steps if change > 0]
    downs = [t for t, change in steps if change < 0]
    assert len(ups) >= 3
    assert downs
    assert not any(0 <= down - up < WINDOW_S for up in ups for down in downs)


def test_the_correction_follows_slower_groups_within_its_bound() -> None:
    s = scaler()
    rate = 6.0
    status: dict[str, Any] | None = None
    plain = evaluate(s, None, reading(0, rate), startup_s=STARTUP_S, now=stamp(0))
    for step in range(60):  # the groups decode ten times slower than the model says
        serving = (status or {}).get("desiredReplicas", plain.replicas)
        model = s.figures(load(rate), serving)
        answer = reading(30 * step, rate, serving, decode_tok_s=model.decode_tok_s / 10)
        scaled = evaluate(s, status, answer, startup_s=STARTUP_S, now=stamp(30 * step))
        status = scaled.status
    assert status is not None
    assert status["correction"]["slower"] == pytest.approx(CORRECTION_BOUND)
    assert status["correction"]["decodeError"] < -0.5  # what the model still gets wrong
    assert status["desiredReplicas"] > plain.replicas


def test_groups_a_little_slower_are_learnt_though_no_one_reading_moves_the_status() -> None:
    """Without the process's memory (each evaluation as after a restart: status alone), the
    correction is status's, kept until it moves by more than SETTLED; each reading's step
    towards 1.3 (a fifth of it, 5%) is less, so the steps since the one written add up."""
    s = scaler()
    status: dict[str, Any] | None = None
    for step in range(40):
        serving = (status or {}).get("desiredReplicas", 1)
        truth = s.figures(load(6.0), serving, slower=1.3)
        answer = reading(30 * step, 6.0, serving, decode_tok_s=truth.decode_tok_s)
        status = evaluate(s, status, answer, startup_s=STARTUP_S, now=stamp(30 * step)).status
    assert status is not None
    assert status["correction"]["slower"] == pytest.approx(1.3, rel=SETTLED)


def test_groups_as_fast_as_the_model_leave_it_uncorrected() -> None:
    s = scaler()
    status: dict[str, Any] | None = None
    for step in range(20):
        serving = (status or {}).get("desiredReplicas", 1)
        model = s.figures(load(6.0), serving)
        answer = reading(30 * step, 6.0, serving, decode_tok_s=model.decode_tok_s,
                         ttft_s=model.ttft_s)  # fmt: skip
        status = evaluate(s, status, answer, startup_s=STARTUP_S, now=stamp(30 * step)).status
    assert status is not None
    assert status["correction"]["slower"] == pytest.approx(1.0, abs=0.05)


def test_a_load_beyond_max_replicas_takes_them_all_and_says_what_they_give() -> None:
    s = scaler(most=2)
    scaled = evaluate(s, None, reading(0, 200.0), startup_s=STARTUP_S, now=stamp(0))
    assert scaled.replicas == 2
    assert scaled.problem is not None
    assert scaled.problem.reason == UNREACHABLE
    assert "maxReplicas 2" in scaled.problem.message


def test_the_webhook_refuses_what_no_count_meets_and_says_what_can_be() -> None:
    best = attainable(scaler())
    too_fast = scaler(Slo(ttft_seconds=best.ttft_s / 2))
    problem = refusal(too_fast, "spec.autoscaling.slo")
    assert problem is not None
    assert problem.path == "spec.autoscaling.slo"
    assert f"TTFT p90 {best.ttft_s:.3g} s" in problem.message
    assert f"{best.decode_tok_s:.3g} tok/s per user at P90" in problem.message
    assert refusal(scaler(Slo(ttft_seconds=best.ttft_s * 2)), "spec.autoscaling.slo") is None
    assert refusal(scaler(Slo(decode_tokens_per_s=best.decode_tok_s * 2)), "x") is not None


def test_each_role_of_a_disaggregated_deployment_starts_from_its_own_count() -> None:
    split = CONFIG.model_copy(
        update={"replicas": 3, "disaggregated": Disaggregated(prefill_replicas=2)}
    )
    bounds = scaler().bounds
    roles: tuple[tuple[Role, int], ...] = (("prefill", 2), ("decode", 3))
    for role, count in roles:
        s = Scaler(split, CALIBRATION, role, Slo(ttft_seconds=1.0), bounds)
        kept = evaluate(s, None, None, startup_s=STARTUP_S, now=stamp(0))
        assert kept.replicas == count
        # A load its share cannot serve on that count asks for more of that role's groups.
        busy = evaluate(s, kept.status, reading(30, 200.0, count), startup_s=STARTUP_S,
                        now=stamp(30))  # fmt: skip
        assert busy.replicas > count
        assert busy.notices[0].message.startswith(f"{role} groups {count} -> ")
