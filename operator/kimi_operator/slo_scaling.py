"""spec.autoscaling.slo and spec.prefill.autoscaling.slo: a role's groups sized by the model that
plans them, ahead of the load by the groups' own start-up time (docs/scaling.md).

Each reconcile, for each role with an SLO, the operator reads one load `Reading` from Prometheus
and calls `evaluate`, pure and deterministic (the clock is `now`), which returns the groups
wanted and the new `status.autoscaler` memory of that role (`Scaled`, as prefill_scaling's):

1. **Forecast.** Holt's linear trend over the readings (level and trend, kept in status) gives
   the request rate at now + the measured start-up time (a group asked for now serves then); the
   rate read now is its floor, so a burst is answered at once (the fast path) and a falling
   forecast never asks for less than the load already here. Lengths, hit rate and sessions are
   the reading's (Prometheus's 5-minute windows already smooth them).
2. **Model.** plan/capacity.py runs the planner's step model and simulator on one group's share
   of that load at each candidate count (the calibration the caller passes: a stored one, else
   the GB300 built-in for the shape) and the fewest groups in [minReplicas, maxReplicas] whose
   predicted percentiles meet every target the SLO states is the recommendation.
3. **Correction.** The groups' measured TTFT and decode rate, over what the model predicts for the
   load read now on the groups serving now, is the model's error; its running geometric mean
   (`CORRECTION_WEIGHT` a reading), bounded to [1/`CORRECTION_BOUND`, `CORRECTION_BOUND`], scales
   every prediction. A model that is wrong by more than that still steers, and says so.
4. **Stabilization.** A higher recommendation is taken at once, all of it (a group takes tens of
   minutes to serve: one at a time would serve the peak late). A group is removed only when every
   recommendation within scaleDownStabilizationSeconds asked for fewer, one group at a time, at
   most once per scaleUpPeriodSeconds: a group added is not removed within the window (no flap).
   The recommendations are kept as prefill_scaling's are (`recommendation_window`).

No reading (Prometheus did not answer): the count stays, the evaluation counts as a
recommendation to keep it, and `problem` says why (Degraded). Targets that even maxReplicas are
predicted to miss: maxReplicas, and `problem` says what they give.

**What the body supplies** (observe.py's queries, the chart's recording rules; per deployment,
and per role: `role="prefill"` for the prefill groups, `role!="prefill"` for the others), over
the 5-minute windows the other rules use, as a `Reading`:

| field | series |
|---|---|
| request_rate_per_s | `sum(rate(vllm:request_success_total[5m]))` |
| prompt_tokens | `sum(rate(vllm:prompt_tokens_total[5m]))` / the request rate (None: no request) |
| output_tokens | `sum(rate(vllm:generation_tokens_total[5m]))` / the request rate |
| prefix_hit_rate | `kimi:prefix_cache_hit_ratio:ratio_5m` (vLLM's hits / queries) |
| sessions | agent sessions active at once where a gateway counts them; else None |
| serving_groups | `kimi:serving_groups:count` (`kimi:prefill_serving_groups:count` for prefill) |
| ttft_s | `kimi:time_to_first_token_seconds:p{50,90,99}_5m` at the SLO's TTFT percentile |
| decode_tok_s | `kimi:decode_tokens_per_second_per_user:p{50,10,1}_5m` for P50, P90, P99 |

(decode_tok_s at P90 is the p10 of per-request rates: what 90% of requests get at least; the p1
rule is new). `startup_s` is `status.groups[].startupSeconds`' latest, or the p90 of
`kimi_operator_group_startup_seconds`.

Task completion is not a target here: vLLM's series do not say which requests form a task
(plan/capacity.py).
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from kimi_operator.api.problem import Problem
from kimi_operator.api.spec import ScalingBounds
from kimi_operator.plan.calibration import Calibration
from kimi_operator.plan.capacity import Load, Predicted, Role, fewest_meeting, predicted
from kimi_operator.plan.configs import Configuration
from kimi_operator.prefill_scaling import recommendation_window
from kimi_operator.rollout import epoch

Percentile = Literal[50, 90, 99]
UNAVAILABLE: Final = "SloMetricsUnavailable"  # Degraded's reason while Prometheus does not answer
UNREACHABLE: Final = "SloUnreachable"  # Degraded's reason while even maxReplicas miss the SLO
SCALED: Final = "SloScaled"  # the Normal Event of each change of the count
ALPHA: Final = 0.3  # Holt's level weight per reading
BETA: Final = 0.1  # Holt's trend weight per reading
CORRECTION_WEIGHT: Final = 0.2  # of each reading's error in the running correction
CORRECTION_BOUND: Final = 2.0  # the correction stays within [1/2, 2]
MIN_REQUESTS: Final = 30  # a reading whose 5-minute window has fewer corrects nothing
WINDOW_S: Final = 300.0  # the recording rules' window
# A lone agent turn, for what a shape can meet at best (`attainable`): its length, cached share
# and output. The admission webhook knows no load; this is the lightest an agent asks.
LONE_PROMPT_TOKENS: Final = 16384
LONE_HIT_RATE: Final = 0.9
LONE_OUTPUT_TOKENS: Final = 256
LONE_RATE_PER_S: Final = 0.001  # one request every 1000 s: alone


@dataclass(frozen=True)
class Slo:
    """A role's targets (None: not a target). `decode_tokens_per_s` at `decode_percentile` q:
    q% of requests decode at least that fast (q = 90 is the p10 of per-request rates)."""

    ttft_seconds: float | None = None
    ttft_percentile: Percentile = 90
    decode_tokens_per_s: float | None = None
    decode_percentile: Percentile = 90

    def met(self, figures: Predicted, correction: "Correction") -> bool:
        ttft, decode = correction.applied(self, figures)
        return (self.ttft_seconds is None or ttft <= self.ttft_seconds) and (
            self.decode_tokens_per_s is None or decode >= self.decode_tokens_per_s
        )


@dataclass(frozen=True)
class Reading:
    """One answer of Prometheus for a role (the module docstring names each series). Lengths and
    measured figures are None when the window had no request."""

    at: str  # RFC 3339: when it was read
    request_rate_per_s: float
    prompt_tokens: float | None
    output_tokens: float | None
    prefix_hit_rate: float | None
    serving_groups: int
    ttft_s: float | None = None  # measured, at the SLO's TTFT percentile
    decode_tok_s: float | None = None  # measured, at the SLO's decode percentile
    sessions: float | None = None


@dataclass(frozen=True)
class Correction:
    """Measured over predicted, smoothed: TTFT's and the decode rate's; and the last reading's
    error (measured / predicted - 1), what status reports as the model's recent error."""

    ttft: float = 1.0
    decode: float = 1.0
    ttft_error: float | None = None
    decode_error: float | None = None

    def applied(self, slo: Slo, figures: Predicted) -> tuple[float, float]:
        """The corrected TTFT and decode rate at the SLO's percentiles."""
        return (
            figures.ttft_s[slo.ttft_percentile] * self.ttft,
            figures.decode_tok_s[slo.decode_percentile] * self.decode,
        )


@dataclass(frozen=True)
class Scaler:
    """What a role is sized on: the deployment's shape (`deployment_configuration`), its
    calibration (a stored one, else `builtin_calibration` for the shape), the role, its SLO and
    bounds (spec.autoscaling's or spec.prefill.autoscaling's)."""

    config: Configuration
    calibration: Calibration
    role: Role
    slo: Slo
    bounds: ScalingBounds

    def predicted(self, load: Load, groups: int) -> Predicted:
        return predicted(self.config, self.calibration, load, groups)


@dataclass(frozen=True)
class Scaled:
    """One evaluation: the groups wanted, the role's new status memory, a notice for a change of
    the count (a Normal Event), and what keeps the SLO from being served as asked (Degraded)."""

    replicas: int
    status: dict[str, Any]
    notices: list[Problem] = field(default_factory=list)
    problem: Problem | None = None


def _bounded(bounds: ScalingBounds, count: int) -> int:
    return max(bounds.min_replicas, min(bounds.max_replicas, count))


def _holt(old: Mapping[str, Any], rate: float, t: float) -> tuple[float, float]:
    """Holt's level and trend (requests/s, and per s) after the rate read at `t` (irregular
    intervals: the trend carries the level over the time since the last reading)."""
    since = epoch(str(old.get("at", ""))) if old else None
    if since is None or since >= t:
        return rate, 0.0
    level, trend = float(old["level"]), float(old["trend"])
    dt = t - since
    new_level = ALPHA * rate + (1 - ALPHA) * (level + trend * dt)
    return new_level, BETA * (new_level - level) / dt + (1 - BETA) * trend


def _smoothed(running: float, measured: float | None, model: float) -> tuple[float, float | None]:
    """The running correction after one measured/predicted ratio, and that ratio's error."""
    if measured is None or measured <= 0 or not 0 < model < math.inf:
        return running, None
    ratio = measured / model
    mean = math.exp(
        (1 - CORRECTION_WEIGHT) * math.log(running) + CORRECTION_WEIGHT * math.log(ratio)
    )
    return min(CORRECTION_BOUND, max(1 / CORRECTION_BOUND, mean)), ratio - 1


def _correction(scaler: Scaler, old: Correction, reading: Reading, load: Load) -> Correction:
    """`old` after the reading's measured figures against the model's for the load read on the
    groups that served it (no change from a window of fewer than `MIN_REQUESTS`)."""
    if reading.serving_groups < 1 or reading.request_rate_per_s * WINDOW_S < MIN_REQUESTS:
        return old
    slo, model = scaler.slo, scaler.predicted(load, reading.serving_groups)
    ttft, ttft_error = _smoothed(old.ttft, reading.ttft_s, model.ttft_s[slo.ttft_percentile])
    decode, decode_error = _smoothed(
        old.decode, reading.decode_tok_s, model.decode_tok_s[slo.decode_percentile]
    )
    return Correction(ttft, decode, ttft_error, decode_error)


def _rounded(error: float | None) -> float | None:
    return None if error is None else round(error, 3)


def _figures(slo: Slo, figures: Predicted, correction: Correction) -> dict[str, Any]:
    ttft, decode = correction.applied(slo, figures)
    return {
        "replicas": figures.groups,
        "ttftSeconds": round(ttft, 3),
        "decodeTokensPerSecond": round(decode, 1) if math.isfinite(decode) else None,
    }


def _described(slo: Slo) -> str:
    parts = []
    if slo.ttft_seconds is not None:
        parts.append(f"TTFT p{slo.ttft_percentile} <= {slo.ttft_seconds:g} s")
    if slo.decode_tokens_per_s is not None:
        parts.append(f"{slo.decode_tokens_per_s:g} tok/s per user at P{slo.decode_percentile}")
    return " and ".join(parts) or "no target"


def _load(reading: Reading, last: Mapping[str, Any]) -> Load:
    """The reading as the model's load; an idle window's lengths are the last ones read."""
    return Load(
        request_rate_per_s=max(reading.request_rate_per_s, 0.0),
        prompt_tokens=reading.prompt_tokens or float(last.get("promptTokens", 1.0)),
        output_tokens=reading.output_tokens or float(last.get("outputTokens", 2.0)),
        prefix_hit_rate=reading.prefix_hit_rate
        if reading.prefix_hit_rate is not None
        else float(last.get("prefixHitRate", 0.0)),
        sessions=reading.sessions,
    )


def _recommend(
    scaler: Scaler, state: dict[str, Any], reading: Reading, startup_s: float
) -> tuple[int, str, Problem | None]:
    """The groups the forecast needs, why, and the problem when even maxReplicas miss; writes
    the reading, forecast, correction and the model's figures into `state`."""
    slo, bounds = scaler.slo, scaler.bounds
    load = _load(reading, state.get("load") or {})
    t = epoch(reading.at) or 0.0
    level, trend = _holt(state.get("forecast") or {}, load.request_rate_per_s, t)
    ahead = max(load.request_rate_per_s, level + trend * startup_s)
    forecast = Load(ahead, load.prompt_tokens, load.output_tokens, load.prefix_hit_rate,
                    load.sessions)  # fmt: skip
    running = state.get("correction") or {}
    correction = _correction(
        scaler,
        Correction(float(running.get("ttft", 1.0)), float(running.get("decode", 1.0))),
        reading,
        load,
    )
    needed = fewest_meeting(
        scaler.config,
        scaler.calibration,
        forecast,
        lambda figures: slo.met(figures, correction),
        bounds.max_replicas,
    )
    rec = _bounded(bounds, needed or bounds.max_replicas)
    at = scaler.predicted(forecast, rec)
    problem = None
    if needed is None:
        ttft, decode = correction.applied(slo, at)
        problem = Problem(
            UNREACHABLE,
            f"{_described(slo)} is predicted to be missed even at maxReplicas "
            f"{bounds.max_replicas}: TTFT p{slo.ttft_percentile} {ttft:.3g} s, "
            f"{decode:.3g} tok/s per user at P{slo.decode_percentile}",
        )
    state["load"] = {
        "requestRate": round(load.request_rate_per_s, 4),
        "promptTokens": round(load.prompt_tokens),
        "outputTokens": round(load.output_tokens),
        "prefixHitRate": round(load.prefix_hit_rate, 3),
    }
    state["forecast"] = {
        "at": reading.at,
        "level": level,
        "trend": trend,
        "horizonSeconds": round(startup_s),
        "requestRate": round(ahead, 4),
    }
    state["correction"] = {
        "ttft": round(correction.ttft, 4),
        "decode": round(correction.decode, 4),
        "ttftError": _rounded(correction.ttft_error),
        "decodeError": _rounded(correction.decode_error),
    }
    state["needed"] = _figures(slo, at, correction)
    if rec > 1:
        state["needed"]["fewer"] = _figures(slo, scaler.predicted(forecast, rec - 1), correction)
    message = (
        f"{load.request_rate_per_s:.3g} requests/s now, {ahead:.3g} forecast in "
        f"{startup_s:.0f} s: {rec} groups recommended for {_described(slo)}"
    )
    return rec, message, problem


def evaluate(
    scaler: Scaler,
    old: Mapping[str, Any] | None,
    reading: Reading | None,
    *,
    startup_s: float,
    now: str,
) -> Scaled:
    """The role's groups wanted at `now` (RFC 3339) from its last status `old` (None: the first
    evaluation, which starts from the configuration's count of that role) and the `reading` (None:
    no answer). `startup_s`: how long a group takes to serve, as the deployment measured it."""
    bounds = scaler.bounds
    state = dict(old or {})
    split = scaler.config.disaggregated
    start = split.prefill_replicas if scaler.role == "prefill" and split else scaler.config.replicas
    before = int(state.get("desiredReplicas", start))
    current = _bounded(bounds, before)
    t = epoch(now) or 0.0
    problem: Problem | None
    if reading is None:
        message = f"no answer from Prometheus: keeping {current} groups"
        problem, rec = Problem(UNAVAILABLE, message), current
    else:
        rec, message, problem = _recommend(scaler, state, reading, startup_s)
    kept = [(r["at"], int(r["replicas"])) for r in state.get("recommendations", [])]
    if old is None:  # a new autoscaler: no scale-down for one window
        kept = [(now, current)]
    window = recommendation_window(kept, now, rec, t, bounds.scale_down_stabilization_seconds)
    state["recommendations"] = [{"at": a, "replicas": r} for a, r in window]
    since = epoch(str(state.get("lastScaleTime", "")))
    free = since is None or t - since >= bounds.scale_up_period_seconds
    if rec > current:
        current = rec
    elif window[0][1] < current and free:
        current -= 1
    elif rec < current:
        message += (
            "; one group removed per scaleUpPeriodSeconds"
            if window[0][1] < current
            else "; kept until every recommendation within scaleDownStabilizationSeconds "
            "asks for fewer"
        )
    notices = []
    if current != before:
        state["lastScaleTime"] = now
        notices.append(
            Problem(SCALED, f"{scaler.role} groups {before} -> {current}: {message}"[:1024])
        )
    state["desiredReplicas"] = current
    state["message"] = message
    return Scaled(current, state, notices, problem)


def attainable(config: Configuration, calibration: Calibration) -> Predicted:
    """The best the shape does: one lone agent turn at a time (`LONE_*`) on one group."""
    lone = Load(LONE_RATE_PER_S, LONE_PROMPT_TOKENS, LONE_OUTPUT_TOKENS, LONE_HIT_RATE)
    return predicted(config, calibration, lone, 1)


def refusal(config: Configuration, calibration: Calibration, slo: Slo, path: str) -> Problem | None:
    """Why the admission webhook refuses `slo` (at `path`, e.g. spec.autoscaling.slo): a target
    that no count of groups meets, as even a lone agent turn misses it; the message says what the
    shape can meet. None: enough groups meet it, in the model."""
    best = attainable(config, calibration)
    if slo.met(best, Correction()):
        return None
    ttft, decode = Correction().applied(slo, best)
    return Problem(
        "Invalid",
        f"{path}: {_described(slo)} cannot be met on {config.gpus} GPUs a group "
        f"({config.backend}, {config.draft_tokens} drafts) with any number of groups: a lone "
        f"{LONE_PROMPT_TOKENS}-token agent turn ({LONE_HIT_RATE:.0%} from the prefix cache, "
        f"{LONE_OUTPUT_TOKENS} tokens out) gets TTFT p{slo.ttft_percentile} {ttft:.3g} s and "
        f"{decode:.3g} tok/s per user at P{slo.decode_percentile} at best "
        f"({calibration.name} calibration)",
        path,
    )
