"""spec.prefill.autoscaling: the operator is the prefill groups' autoscaler (docs/scaling.md).

A KimiDeployment has one scale subresource, the decode groups' (spec.replicas, which KEDA or an
HPA writes), so nothing outside can scale the prefill role. Each reconcile, observe.py asks
Prometheus for the prefill groups' load (`queries`, the chart's recording rules); `evaluate`, pure,
decides the count as an HPA would and renders that many prefill groups: groups needed =
ceil(load / target) (the HPA's 10% tolerance), within [minReplicas, maxReplicas], one group added
at most once per scaleUpPeriodSeconds, one removed only when every recommendation within
scaleDownStabilizationSeconds asked for fewer (a recommendation holds until another replaces
it). What it must remember (the count, the last change, the recommendations in the window) lives
in status.prefillAutoscaler, so a restarted operator carries on, and changes only when the
decision does: steady load writes no status. No answer from Prometheus keeps the count, and
Degraded says so.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kimi_operator.api.problem import Problem
from kimi_operator.api.spec import (
    KimiDeployment,
    PrefillAutoscalingSpec,
    PrefillAutoscalingTarget,
)
from kimi_operator.api.status import PrefillAutoscalerStatus, Recommendation
from kimi_operator.observability.rules import (
    PREFILL_SERVING_GROUPS,
    PREFILL_TTFT_P90,
    PREFILL_WAITING_REQUESTS,
)
from kimi_operator.rollout import epoch

POLL_S = 30.0  # how often the load is read (KEDA's polling interval for the decode groups)
QUERY_TIMEOUT_S = 5.0  # a reconcile waits no longer for Prometheus
TOLERANCE = 0.1  # the HPA's: within 10% of the current count, the count stays
UNAVAILABLE = "PrefillMetricsUnavailable"  # Degraded's reason while Prometheus does not answer
SCALED = "PrefillScaled"  # the Normal Event of each change of the count
VALUE, SERVING = "value", "serving"  # the keys of `queries`


@dataclass(frozen=True)
class Load:
    """Prometheus's answers to `queries`, by key (None: an empty vector); `error`: why it did not
    answer (observe.py)."""

    values: Mapping[str, float | None] = field(default_factory=dict)
    error: str = ""


@dataclass(frozen=True)
class Scaled:
    """One evaluation: the deployment with spec.prefill.replicas set to the count wanted (what the
    plan renders and the status counts), status.prefillAutoscaler (None without autoscaling), a
    notice for a change of the count (a Normal Event), why Prometheus gave no answer, and whether
    the count went down (a group to drain and delete, which only a pruning reconcile finds)."""

    kd: KimiDeployment
    status: dict[str, Any] | None = None
    notices: list[Problem] = field(default_factory=list)
    problem: Problem | None = None
    fewer: bool = False


def autoscaling(kd: KimiDeployment) -> PrefillAutoscalingSpec | None:
    """spec.prefill.autoscaling with a target; None without one (none at all, or `slo`: the
    SLO scaler's, slo_scaling.py)."""
    prefill = kd.spec.prefill
    scaling = prefill.autoscaling if prefill is not None else None
    return scaling if scaling is not None and scaling.target is not None else None


def _target(scaling: PrefillAutoscalingSpec) -> PrefillAutoscalingTarget:
    assert scaling.target is not None  # `autoscaling` gives only those with one
    return scaling.target


def queries(kd: KimiDeployment) -> dict[str, str]:
    """The instant queries of the deployment's prefill load ({} without autoscaling): the
    requests waiting in all its prefill groups, or their TTFT p90 and how many serve."""
    scaling = autoscaling(kd)
    if scaling is None:
        return {}
    where = f'{{namespace="{kd.metadata.namespace}", deployment="{kd.metadata.name}"}}'
    if _target(scaling).waiting_requests_per_group is not None:
        return {VALUE: f"sum({PREFILL_WAITING_REQUESTS}{where})"}
    return {
        VALUE: f"max({PREFILL_TTFT_P90}{where})",
        SERVING: f"sum({PREFILL_SERVING_GROUPS}{where})",
    }


def sample(answer: Mapping[str, Any]) -> float | None:
    """The value of an answer of Prometheus's /api/v1/query; None for an empty vector.
    ValueError: not a successful answer."""
    if answer.get("status") != "success":
        raise ValueError(f"status {answer.get('status')!r}: {answer.get('error', '')}")
    data = answer.get("data") or {}
    kind, result = data.get("resultType"), data.get("result") or []
    try:
        if kind == "scalar":
            return float(result[1])
        if kind == "vector":
            return float(result[0]["value"][1]) if result else None
    except (KeyError, IndexError, TypeError) as error:
        raise ValueError(f"a malformed {kind}: {error!r}") from None
    raise ValueError(f"not a vector: {kind!r}")


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def needed(scaling: PrefillAutoscalingSpec, values: Mapping[str, float | None]) -> float | None:
    """Prefill groups the load needs, unrounded; None when Prometheus has no value. A NaN TTFT
    (no request in the window) is no load."""
    value = values.get(VALUE)
    waiting = _target(scaling).waiting_requests_per_group
    if waiting is not None:
        return None if value is None else (_finite(value) or 0.0) / waiting
    serving, ttft = values.get(SERVING), _target(scaling).ttft_seconds_p90
    if serving is None or ttft is None:
        return None
    return serving * (_finite(value) or 0.0) / ttft


def recommend(scaling: PrefillAutoscalingSpec, groups: float, current: int) -> int:
    """The HPA's answer: ceil(groups), unless within its tolerance of `current`; in bounds."""
    if current > 0 and abs(groups / current - 1) <= TOLERANCE:
        wanted = current
    else:
        wanted = math.ceil(groups - 1e-9)  # 8 / 4 is 2, not 3 by a rounding error
    return _bounded(scaling, wanted)


def _bounded(scaling: PrefillAutoscalingSpec, count: int) -> int:
    return max(scaling.min_replicas, min(scaling.max_replicas, count))


def recommendation_window(
    kept: list[tuple[str, int]], at: str, replicas: int, now: float, seconds: int
) -> list[tuple[str, int]]:
    """The recommendations that held within the last `seconds`, each higher than every later one
    (their maximum is the first: the most a scale-down must respect), ending with the one made at
    `at` (`replicas`). A recommendation holds until another replaces it: in `kept` and the result,
    the last, still holding, has the time it was first made; the others, the time they were
    replaced. So one made again changes nothing, and steady load writes no status."""
    if kept and kept[-1][1] == replicas:
        past, current = kept[:-1], kept[-1]
    else:
        past = [*kept[:-1], (at, kept[-1][1])] if kept else []
        current = (at, replicas)
    higher: list[tuple[str, int]] = []
    floor = current[1]
    for until, count in reversed(past):
        if count > floor and now - (epoch(until) or 0.0) < seconds:
            higher.append((until, count))
            floor = count
    return [*reversed(higher), current]


def with_prefill_replicas(kd: KimiDeployment, replicas: int) -> KimiDeployment:
    """`kd` rendering `replicas` prefill groups (spec.prefill.replicas, never written back)."""
    assert kd.spec.prefill is not None
    prefill = kd.spec.prefill.model_copy(update={"replicas": replicas})
    return kd.model_copy(update={"spec": kd.spec.model_copy(update={"prefill": prefill})})


def _described(scaling: PrefillAutoscalingSpec, values: Mapping[str, float | None]) -> str:
    value = _finite(values.get(VALUE))
    waiting = _target(scaling).waiting_requests_per_group
    if waiting is not None:
        return f"{value or 0:g} requests waiting in the prefill groups (target {waiting} per group)"
    serving = values.get(SERVING) or 0
    ttft = "none (no request)" if value is None else f"{value:.3g} s"
    return (
        f"prefill TTFT p90 {ttft} over {serving:g} serving prefill groups "
        f"(target {_target(scaling).ttft_seconds_p90:g} s)"
    )


def step_towards(current: int, rec: int, highest: int, free: bool) -> tuple[int, str]:
    """One group towards the recommendation `rec`, when the period since the last change is
    over (`free`) and, for a removal, the `highest` recommendation in the window is lower too;
    else the count, and why it is kept."""
    if rec > current:
        return (current + 1, "") if free else (current, "one group added per scaleUpPeriodSeconds")
    if highest < current:
        return (
            (current - 1, "") if free else (current, "one group removed per scaleUpPeriodSeconds")
        )
    if rec < current:
        return (
            current,
            "until every recommendation within scaleDownStabilizationSeconds asks for fewer",
        )
    return current, ""


def evaluate(
    kd: KimiDeployment, old: Mapping[str, Any], load: Load | None, *, now: str, url: str = ""
) -> Scaled:
    """The prefill groups wanted at `now` (RFC 3339), from the last status `old` and the `load`
    read now (None: not read this time, the count stays as recorded). `url`: the Prometheus
    asked, for the messages."""
    scaling = autoscaling(kd)
    if scaling is None:
        return Scaled(kd)
    assert kd.spec.prefill is not None
    prior = PrefillAutoscalerStatus.model_validate(
        old.get("prefillAutoscaler") or {"desiredReplicas": kd.spec.prefill.replicas}
    )
    before = prior.desired_replicas
    current = _bounded(scaling, before)  # the bounds may have been edited
    state = prior.model_copy(deep=True)
    if current != before:
        state.message = (
            f"spec.prefill.autoscaling allows {scaling.min_replicas} to "
            f"{scaling.max_replicas} prefill groups"
        )
    problem = None
    if load is not None:
        t = epoch(now) or 0.0
        groups = None if load.error else needed(scaling, load.values)
        if groups is None:
            why = load.error or f"no value for {queries(kd)[VALUE]}"
            message = f"no answer from Prometheus {url} ({why}): keeping {current} prefill groups"
            problem, rec = Problem(UNAVAILABLE, message), current
        else:
            rec = recommend(scaling, groups, current)
            state.value = _finite(load.values.get(VALUE))
            message = f"{_described(scaling, load.values)}: {rec} prefill groups recommended"
        kept = [(r.at, r.replicas) for r in prior.recommendations]
        if not old.get("prefillAutoscaler"):  # a new autoscaler: no scale-down for one window
            kept = [(now, current)]  # (after the start's count is replaced)
        window = recommendation_window(kept, now, rec, t, scaling.scale_down_stabilization_seconds)
        state.recommendations = [Recommendation(at=a, replicas=r) for a, r in window]
        since = epoch(prior.last_scale_time) if prior.last_scale_time else None
        free = since is None or t - since >= scaling.scale_up_period_seconds
        current, held = step_towards(current, rec, window[0][1], free)
        state.message = f"{message}; {current} kept: {held}" if held else message
    notices = []
    if current != before:
        state.last_scale_time = now
        notices.append(
            Problem(SCALED, f"prefill groups {before} -> {current}: {state.message}"[:1024])
        )
    state.desired_replicas = current
    status = PrefillAutoscalerStatus.model_validate(state.model_dump())
    return Scaled(
        with_prefill_replicas(kd, current),
        status.model_dump(exclude_none=True),
        notices,
        problem,
        fewer=current < before,
    )


def recorded_prefill(kd: KimiDeployment, status: Mapping[str, Any]) -> KimiDeployment:
    """`kd` with the prefill groups its status last wanted (a check of the cluster's children)."""
    return evaluate(kd, status, None, now="").kd
