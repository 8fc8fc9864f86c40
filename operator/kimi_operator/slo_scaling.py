"""spec.autoscaling.slo and spec.prefill.autoscaling.slo: a role's groups sized by the model that
plans them, ahead of the load by the groups' own start-up time (docs/scaling.md).

Each reconcile, for each role with an SLO, the operator reads one load `Reading` from Prometheus
and calls `evaluate`, pure and deterministic (the clock is `now`), which returns the groups
wanted and the new `status.autoscaler` memory of that role (`Scaled`, as prefill_scaling's):

1. **Forecast.** `Holt`'s linear trend over the readings (kept in status) gives the request rate
   at now + the measured start-up time (a group asked for now serves then) + half the readings'
   5-minute window (a 5-minute mean tells of the load 2.5 minutes ago), with a margin of its own
   recent error; the rate read now is its floor (a burst is answered at once: the fast path) and
   `MAX_GROWTH` times it the ceiling. Lengths, hit rate and sessions are the reading's.
2. **Model.** plan/capacity.py runs the planner's step model and simulator on one group's share
   of that load (the calibration the caller passes: a stored one, else the GB300 built-in for
   the shape); the fewest groups in [minReplicas, maxReplicas] whose predicted percentiles meet
   every target the SLO states is the recommendation.
3. **Correction.** One factor, `Correction.slower`: how much slower the groups run than the
   calibration says, learnt from the measured decode rate (else TTFT) against the model's for
   the load read on the groups serving; bounded to [1/`CORRECTION_BOUND`, `CORRECTION_BOUND`].
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

**What `Scaled.status` holds** (camelCase, for `status.sloAutoscaler`'s model):
`desiredReplicas`, `lastScaleTime`, `recommendations` ([{at, replicas}], as prefill_scaling's),
`message` (why, in one line), and once a reading came, the view (`VIEW`): `load` {requestRate,
promptTokens, outputTokens, prefixHitRate} (the reading's, whose lengths an idle window
reuses), `forecast` {at, level, trend, deviation, risingSeconds, horizonSeconds, requestRate}
(Holt's memory and the rate sized for), `correction` {slower, ttftError, decodeError} and
`needed` {replicas, ttftSeconds, decodeTokensPerSecond, fewer: the same at one group fewer} (the
model's figures, corrected, for the forecast load). **Status is written only when what it says
changes** (as prefill_scaling's; the controller writes status only when it differs): the view
is of the last reading that moved it by more than `SETTLED` or changed the count recommended
(`_moved`), with floats to `DIGITS` significant digits, and the message is the view's; so a
steady load, read within a few % every poll, writes no status. `Scaled.memory` is the view of
every reading, written or not, which the caller passes to the next evaluation in the same
process (slo_roles.py keeps it per role), so the forecast learns from every reading.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from kimi_operator.api.problem import Problem
from kimi_operator.api.spec import ScalingBounds
from kimi_operator.plan.calibration import Calibration
from kimi_operator.plan.capacity import ALONE_RATE_PER_S, RATE_ROUNDING, Load, Role, predicted
from kimi_operator.plan.configs import Configuration
from kimi_operator.plan.target import fewest
from kimi_operator.prefill_scaling import POLL_S, recommendation_window
from kimi_operator.rollout import epoch

Percentile = Literal[50, 90, 99]
UNAVAILABLE: Final = "SloMetricsUnavailable"  # Degraded's reason while Prometheus does not answer
UNREACHABLE: Final = "SloUnreachable"  # Degraded's reason while even maxReplicas miss the SLO
SCALED: Final = "SloScaled"  # the Normal Event of each change of the count
ALPHA: Final = 0.3  # Holt's level weight per reading
BETA: Final = 0.1  # Holt's trend weight per reading
GAMMA: Final = 0.1  # the forecast's mean error's weight per reading
DEVIATIONS: Final = 2.0  # mean errors of margin on the forecast
# The forecast is at most this many times the rate read now: the readings' 5-minute window turns
# a step of the load into a 5-minute ramp, whose trend, carried for the start-up time, would ask
# for several times the groups the step needs.
MAX_GROWTH: Final = 2.0
CORRECTION_WEIGHT: Final = 0.2  # of each reading's ratio in the running `slower` (geometric)
CORRECTION_BOUND: Final = 2.0  # `slower` stays within [1/2, 2]
MIN_REQUESTS: Final = 30  # a reading whose 5-minute window has fewer corrects nothing
WINDOW_S: Final = 300.0  # the recording rules' window
# A lone agent turn, for what a shape can meet at best (`attainable`): its length, cached share
# and output. The admission webhook knows no load; this is the lightest an agent asks.
LONE_PROMPT_TOKENS: Final = 16384
LONE_HIT_RATE: Final = 0.9
LONE_OUTPUT_TOKENS: Final = 256
MOST_RATE_PER_S: Final = 1e6  # `sustainable_rate`'s search stops here: "any rate"
# What a role's status shows of the last reading that moved it (`_moved`) by more than SETTLED:
# a steady load's 5-minute rate wanders by a few %, and the forecast on it, by its trend and
# margin, by twice that. Floats to DIGITS significant digits.
VIEW: Final = ("load", "forecast", "correction", "needed")
SETTLED: Final = 0.1
DIGITS: Final = 4


@dataclass(frozen=True)
class Slo:
    """A role's targets (None: not a target). `decode_tokens_per_s` at `decode_percentile` q:
    q% of requests decode at least that fast (q = 90 is the p10 of per-request rates)."""

    ttft_seconds: float | None = None
    ttft_percentile: Percentile = 90
    decode_tokens_per_s: float | None = None
    decode_percentile: Percentile = 90

    def met(self, figures: "Figures") -> bool:
        return (self.ttft_seconds is None or figures.ttft_s <= self.ttft_seconds) and (
            self.decode_tokens_per_s is None or figures.decode_tok_s >= self.decode_tokens_per_s
        )


@dataclass(frozen=True)
class Figures:
    """The model's TTFT and decode rate at the SLO's percentiles on `groups` groups, corrected."""

    groups: int
    ttft_s: float
    decode_tok_s: float


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
    """How much slower the groups run than their calibration says (`slower`; 1: as calibrated),
    and the last reading's errors (measured / predicted - 1), the model's recent error.

    One factor for every step: a group whose steps all take k times as long serves a rate r as
    the model's group serves k x r, with every time k times as long (scale the clock). So it
    moves the knee where a group stops keeping up, which a factor on the predicted latencies,
    tiny below the knee and huge past it, would not."""

    slower: float = 1.0
    ttft_error: float | None = None
    decode_error: float | None = None


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

    def figures(self, load: Load, groups: int, slower: float = 1.0) -> Figures:
        """The model's figures for `load` on `groups`, on groups `slower` times as slow."""
        rate = load.request_rate_per_s * slower
        model = predicted(
            self.config, self.calibration, replace(load, request_rate_per_s=rate), groups
        )
        return Figures(
            groups,
            model.ttft_s[self.slo.ttft_percentile] * slower,
            model.decode_tok_s[self.slo.decode_percentile] / slower,
        )


@dataclass(frozen=True)
class Scaled:
    """One evaluation: the groups wanted, the role's new status memory, a notice for a change of
    the count (a Normal Event), what keeps the SLO from being served as asked (Degraded), and
    `memory`: the view this reading made, written or not (`_moved`), for the next evaluation in
    the same process (None: no reading yet)."""

    replicas: int
    status: dict[str, Any]
    notices: list[Problem] = field(default_factory=list)
    problem: Problem | None = None
    memory: dict[str, Any] | None = None


def _bounded(bounds: ScalingBounds, count: int) -> int:
    return max(bounds.min_replicas, min(bounds.max_replicas, count))


@dataclass(frozen=True)
class Holt:
    """Holt's linear trend on the request rate (level in requests/s, trend in requests/s per s),
    how long the trend has been rising (`rising_s`), and the mean absolute error of its
    one-reading-ahead forecasts (`deviation`): a load that leaves its recent course (a ramp
    starting, a burst) widens the margin before the trend has caught up with it."""

    level: float
    trend: float = 0.0
    deviation: float = 0.0
    rising_s: float = 0.0

    def updated(self, rate: float, dt: float) -> "Holt":
        """After a reading `dt` seconds on (irregular intervals: the trend carries the level). The
        state may be several polls old (status's after a restart, kept until it moved: `_moved`);
        it rose through them only if its trend did, so a trend that turns up now rose one poll."""
        if dt <= 0:
            return self
        expected = self.level + self.trend * dt
        level = ALPHA * rate + (1 - ALPHA) * expected
        trend = BETA * (level - self.level) / dt + (1 - BETA) * self.trend
        return Holt(
            level=level,
            trend=trend,
            deviation=GAMMA * abs(rate - expected) + (1 - GAMMA) * self.deviation,
            rising_s=(self.rising_s + dt if self.trend > 0 else min(dt, POLL_S))
            if trend > 0
            else 0.0,
        )

    def ahead(self, seconds: float) -> float:
        """The rate `seconds` on, with `DEVIATIONS` mean errors of margin. A rising trend is
        carried no further ahead than it has lasted (a ramp that began a minute ago says little
        of the next fifteen)."""
        carried = min(seconds, self.rising_s) if self.trend > 0 else seconds
        return self.level + self.trend * carried + DEVIATIONS * self.deviation


def _correction(
    scaler: Scaler, old: Correction, reading: Reading, load: Load, dt: float
) -> Correction:
    """`old` after the reading's measured figures against the model's for the load read on the
    groups that served it, `dt` seconds after `old`: the decode rate's ratio moves `slower`
    (TTFT's where none was read), by `CORRECTION_WEIGHT` per `POLL_S`. After a restart `old` is
    status's, kept until it moved by more than `SETTLED` (`_moved`): k polls old, it moves as k
    such readings would have moved it, 1 - (1 - weight)^k of the way (else a ratio whose one
    step is under `SETTLED` would never move what a process without memory reads). Only where
    the model has the groups within the TTFT target at that load: past that knee a group's
    queue grows without bound, and a ratio of two queues says little of how fast the groups run
    (the errors are still reported). A window of fewer than `MIN_REQUESTS` moves nothing."""
    if reading.serving_groups < 1 or reading.request_rate_per_s * WINDOW_S < MIN_REQUESTS:
        return old
    model = scaler.figures(load, reading.serving_groups, old.slower)
    ttft = reading.ttft_s / model.ttft_s if reading.ttft_s and model.ttft_s > 0 else None
    decode = (
        reading.decode_tok_s / model.decode_tok_s
        if reading.decode_tok_s and 0 < model.decode_tok_s < math.inf
        else None
    )
    target = scaler.slo.ttft_seconds
    keeps_up = target is None or model.ttft_s <= target
    slower = (1 / decode if decode is not None else ttft) if keeps_up else None
    if slower is None:
        return replace(old, ttft_error=_error(ttft), decode_error=_error(decode))
    weight = 1 - (1 - CORRECTION_WEIGHT) ** (dt / POLL_S)
    mean = math.exp(math.log(old.slower) + weight * math.log(slower))
    return Correction(
        slower=min(CORRECTION_BOUND, max(1 / CORRECTION_BOUND, mean)),
        ttft_error=_error(ttft),
        decode_error=_error(decode),
    )


def _error(ratio: float | None) -> float | None:
    return None if ratio is None else ratio - 1


def _rounded(error: float | None) -> float | None:
    return None if error is None else round(error, 3)


def _shown(figures: Figures) -> dict[str, Any]:
    return {
        "replicas": figures.groups,
        "ttftSeconds": round(figures.ttft_s, 3),
        "decodeTokensPerSecond": round(figures.decode_tok_s, 1)
        if math.isfinite(figures.decode_tok_s)
        else None,
    }


def _given(slo: Slo, figures: Figures) -> str:
    return (
        f"TTFT p{slo.ttft_percentile} {figures.ttft_s:.3g} s, "
        f"{figures.decode_tok_s:.3g} tok/s per user at P{slo.decode_percentile}"
    )


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
    scaler: Scaler,
    state: dict[str, Any],
    memory: Mapping[str, Any],
    reading: Reading,
    *,
    startup_s: float,
    current: int,
) -> tuple[int, str, Problem | None, dict[str, Any]]:
    """The groups the forecast needs, why, the problem when even maxReplicas miss, and the view
    (`VIEW`: the reading, forecast, correction and the model's figures) made from `memory`'s
    (the last one made, written or not) and the reading; writes it into `state` when it moved
    from the one there (`_moved`)."""
    slo, bounds = scaler.slo, scaler.bounds
    load = _load(reading, memory.get("load") or {})
    t = epoch(reading.at) or 0.0
    last = memory.get("forecast") or {}
    since = epoch(str(last.get("at", "")))
    dt = t - since if since is not None else POLL_S
    holt = (
        Holt(
            float(last["level"]),
            float(last["trend"]),
            float(last.get("deviation", 0.0)),
            float(last.get("risingSeconds", 0.0)),
        )
        if since is not None
        else Holt(load.request_rate_per_s)
    ).updated(load.request_rate_per_s, dt)
    now_rate = load.request_rate_per_s
    ahead = min(max(now_rate, holt.ahead(startup_s + WINDOW_S / 2)), MAX_GROWTH * now_rate)
    forecast = Load(ahead, load.prompt_tokens, load.output_tokens, load.prefix_hit_rate,
                    load.sessions)  # fmt: skip
    running = Correction(float((memory.get("correction") or {}).get("slower", 1.0)))
    correction = _correction(scaler, running, reading, load, dt)
    slower = correction.slower
    needed = fewest(
        lambda groups: slo.met(scaler.figures(forecast, groups, slower)),
        bounds.max_replicas,
        current,
    )
    rec = _bounded(bounds, needed or bounds.max_replicas)
    fresh: dict[str, Any] = {
        "load": {
            "requestRate": _significant(load.request_rate_per_s),
            "promptTokens": round(load.prompt_tokens),
            "outputTokens": round(load.output_tokens),
            "prefixHitRate": round(load.prefix_hit_rate, 3),
        },
        "forecast": {
            "at": reading.at,
            "level": _significant(holt.level),
            "trend": _significant(holt.trend),
            "deviation": _significant(holt.deviation),
            "risingSeconds": round(holt.rising_s),
            "horizonSeconds": round(startup_s),
            "requestRate": _significant(ahead),
        },
        "correction": {
            "slower": _significant(slower),
            "ttftError": _rounded(correction.ttft_error),
            "decodeError": _rounded(correction.decode_error),
        },
        "needed": _shown(scaler.figures(forecast, rec, slower)),
    }
    if rec > 1:
        fresh["needed"]["fewer"] = _shown(scaler.figures(forecast, rec - 1, slower))
    if _moved(state, fresh):
        state.update(fresh)
    problem = None
    if needed is None:
        shown = state["needed"]
        rate = shown["decodeTokensPerSecond"]
        at = Figures(rec, shown["ttftSeconds"], math.inf if rate is None else rate)
        problem = Problem(
            UNREACHABLE,
            f"{_described(slo)} is predicted to be missed even at maxReplicas "
            f"{bounds.max_replicas}: {_given(slo, at)}",
        )
    message = (
        f"{state['load']['requestRate']:.3g} requests/s now, "
        f"{state['forecast']['requestRate']:.3g} forecast in "
        f"{state['forecast']['horizonSeconds']} s: {rec} groups recommended for {_described(slo)}"
    )
    return rec, message, problem, fresh


def _moved(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether the view `new` differs from `old`'s by more than a poll's wandering: status is
    written only when what it says changes (steady load writes none, as prefill_scaling's). It
    moved when it is the first, when the count it recommends or the horizon changed, when the
    rate read, the forecast's level or the rate it forecasts (its trend and margin included)
    moved by more than `SETTLED` of the larger rate forecast, the speed factor `slower` or a mean
    length by more than `SETTLED` of itself, or the prefix hit rate by more than `SETTLED`. The
    whole view (its time `forecast.at`, the model's figures, the errors) is then of the last
    reading that moved it. Holt and the correction go on from every reading's view in the
    process that made it (`evaluate`'s `memory`); after a restart they go on from status's,
    over the time since (`Holt.updated`, `_correction`): what status holds is all the forecast
    needs, its level behind the load by less than `SETTLED` at most."""
    if not all(key in old for key in VIEW):
        return True
    load, forecast, fresh, ahead = old["load"], old["forecast"], new["load"], new["forecast"]
    scale = max(forecast["requestRate"], ahead["requestRate"], ALONE_RATE_PER_S)
    rates = [
        (load["requestRate"], fresh["requestRate"]),
        (forecast["level"], ahead["level"]),
        (forecast["requestRate"], ahead["requestRate"]),
    ]
    relative = [
        (old["correction"]["slower"], new["correction"]["slower"]),
        (load["promptTokens"], fresh["promptTokens"]),
        (load["outputTokens"], fresh["outputTokens"]),
    ]
    return (
        old["needed"]["replicas"] != new["needed"]["replicas"]
        or forecast["horizonSeconds"] != ahead["horizonSeconds"]
        or any(abs(b - a) > SETTLED * scale for a, b in rates)
        or any(abs(b - a) > SETTLED * max(a, b) for a, b in relative)
        or abs(fresh["prefixHitRate"] - load["prefixHitRate"]) > SETTLED
    )


def _significant(value: float) -> float:
    """`value` to `DIGITS` significant digits: no float noise (3.1999999999999997) in status."""
    return float(f"{value:.{DIGITS}g}")


def evaluate(
    scaler: Scaler,
    old: Mapping[str, Any] | None,
    reading: Reading | None,
    *,
    startup_s: float,
    now: str,
    memory: Mapping[str, Any] | None = None,
) -> Scaled:
    """The role's groups wanted at `now` (RFC 3339) from its last status `old` (None: the first
    evaluation, which starts from the configuration's count of that role) and the `reading` (None:
    no answer). `startup_s`: how long a group takes to serve, as the deployment measured it.
    `memory`: the last evaluation's `Scaled.memory` in this process, which Holt and the
    correction go on from (status holds the view only as last written: `_moved`); None (a
    restart, another replica's write): status's view."""
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
        rec, message, problem, memory = _recommend(
            scaler,
            state,
            state if memory is None else memory,
            reading,
            startup_s=startup_s,
            current=current,
        )
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
    return Scaled(current, state, notices, problem, None if memory is None else dict(memory))


def attainable(scaler: Scaler) -> Figures:
    """The best the role's shape does: one lone agent turn at a time (`LONE_*`) on one group."""
    lone = Load(ALONE_RATE_PER_S, LONE_PROMPT_TOKENS, LONE_OUTPUT_TOKENS, LONE_HIT_RATE)
    return scaler.figures(lone, 1)


def refusal(scaler: Scaler, path: str) -> Problem | None:
    """Why the admission webhook refuses the SLO (at `path`, e.g. spec.autoscaling.slo): a
    target that no count of groups meets, as even a lone agent turn misses it; the message says
    what the shape can meet. None: enough groups meet it, in the model."""
    best = attainable(scaler)
    if scaler.slo.met(best):
        return None
    config = scaler.config
    return Problem(
        "Invalid",
        f"{path}: {_described(scaler.slo)} cannot be met on {config.gpus} GPUs a group "
        f"({config.backend}, {config.draft_tokens} drafts) with any number of groups: a lone "
        f"{LONE_PROMPT_TOKENS}-token agent turn ({LONE_HIT_RATE:.0%} from the prefix cache, "
        f"{LONE_OUTPUT_TOKENS} tokens out) gets {_given(scaler.slo, best)} at best "
        f"({scaler.calibration.name} calibration)",
        path,
    )


def sustainable_rate(scaler: Scaler, load: Load) -> float:
    """The highest request rate one group serves with the model's figures meeting the scaler's
    SLO, at `load`'s lengths, hit rate and sessions (its rate is not used): what the scaler's
    model says a group is worth, to set beside a group's measured capacity
    (benchmarks/slo_capacity_cpu.py). The rates tried are `Load.share`'s grid (the cache's
    `RATE_ROUNDING` steps), so the answer meets the SLO and the grid's next rate does not; a
    search up to `MOST_RATE_PER_S` by doubling steps, then a bisection, which takes a heavier load
    never to be served better (as `fewest` takes more groups never to serve worse). 0 where even
    a lone request misses the SLO; inf where even `MOST_RATE_PER_S` meets it."""
    step = math.log1p(RATE_ROUNDING)

    def meets(k: int) -> bool:
        rate = replace(load, request_rate_per_s=math.exp(k * step))
        return scaler.slo.met(scaler.figures(rate, 1))

    low, most = (
        math.ceil(math.log(ALONE_RATE_PER_S) / step),
        math.floor(math.log(MOST_RATE_PER_S) / step),
    )
    if not meets(low):
        return 0.0
    width = 1
    while meets(high := min(low + width, most)):
        if high == most:
            return math.inf
        low, width = high, width * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if meets(middle) else (low, middle)
    return math.exp(low * step)
