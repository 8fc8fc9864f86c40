"""`spec.autoscaling`: a KEDA ScaledObject, or an `autoscaling/v2` HorizontalPodAutoscaler on an
external metric served by prometheus-adapter (with the rules `adapter_rules` gives the chart).

Both write `spec.replicas` through the KimiDeployment's scale subresource. Every metric is a total
over the deployment's serving groups, with an `AverageValue` target per group, so that the
autoscaler's answer is `ceil(total / target)` whatever the number of groups that exist: a group
that waits for capacity serves nothing, adds nothing to the total, and changes no answer (no
flapping, no runaway). docs/scaling.md has the formulas.
"""

import math
from dataclasses import dataclass
from typing import Any

from kimi_operator.api.spec import AutoscalingTarget, KimiDeployment
from kimi_operator.builders.meta import metadata
from kimi_operator.observability.rules import (
    GROUPS_PER_DECODE_RATE,
    KV_CACHE_USAGE,
    WAITING_REQUESTS,
)

DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
POLLING_INTERVAL_S = 30
# prometheus-adapter's external metric of the decode floor is scaled by this (and the HPA target
# by the same): Kubernetes quantities keep three decimals, and groups per tok/s are small numbers.
DECODE_SCALE = 1_000_000


@dataclass(frozen=True)
class Metric:
    """One autoscaling target: the recording rule, the external metric prometheus-adapter serves
    for it, and how its target value is written."""

    field: str  # the spec.autoscaling.target field
    record: str
    external: str
    adapter_query: str  # prometheus-adapter's metricsQuery


METRICS = {
    "decodeRateFloor": Metric(
        "decodeRateFloor",
        GROUPS_PER_DECODE_RATE,
        "kimi_serving_groups_per_decode_rate",
        f"{DECODE_SCALE} * sum by (<<.GroupBy>>) (<<.Series>>{{<<.LabelMatchers>>}})",
    ),
    "waitingRequestsPerGroup": Metric(
        "waitingRequestsPerGroup",
        WAITING_REQUESTS,
        "kimi_num_requests_waiting",
        "sum by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})",
    ),
    "kvCacheUsagePercent": Metric(
        "kvCacheUsagePercent",
        KV_CACHE_USAGE,
        "kimi_kv_cache_usage_perc",
        "sum by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})",
    ),
}


def threshold(kd: KimiDeployment) -> AutoscalingTarget | None:
    """spec.autoscaling.target: what an HPA or KEDA scales the decode groups on; None without
    spec.autoscaling, or with its `slo` (the operator is the one writer of the count then)."""
    return kd.spec.autoscaling.target if kd.spec.autoscaling is not None else None


def target_metric(target: AutoscalingTarget) -> tuple[Metric, int]:
    """The metric of the one target set, and its value as written."""
    values = target.model_dump(by_alias=True, exclude_none=True)
    ((field, value),) = values.items()  # a rule allows exactly one
    return METRICS[field], value


def _matchers(kd: KimiDeployment) -> str:
    return f'namespace="{kd.metadata.namespace}", deployment="{kd.metadata.name}"'


def keda_query(kd: KimiDeployment) -> tuple[str, str]:
    """The Prometheus trigger's (query, threshold): the total is compared per group."""
    target = threshold(kd)
    assert target is not None
    metric, value = target_metric(target)
    series = f"sum({metric.record}{{{_matchers(kd)}}})"
    if metric.field == "decodeRateFloor":  # groups needed = groups x floor / rate
        return f"{series} * {value}", "1"
    if metric.field == "kvCacheUsagePercent":
        return series, f"{value / 100:g}"
    return series, str(value)


def _hpa_target(metric: Metric, value: int) -> str:
    """The HPA's AverageValue per group, as a Kubernetes quantity."""
    if metric.field == "decodeRateFloor":  # DECODE_SCALE x groups per tok/s, per group
        # Rounded up: a target a hair low would ask for a group more when the load fits exactly.
        return f"{math.ceil(DECODE_SCALE * 1000 / value)}m"
    if metric.field == "kvCacheUsagePercent":
        return f"{value * 10}m"
    return str(value)


def behavior(kd: KimiDeployment) -> dict[str, Any]:
    """One group at a time each way; a scale-down only after a long quiet window."""
    assert kd.spec.autoscaling is not None
    scaling = kd.spec.autoscaling
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Pods", "value": 1, "periodSeconds": scaling.scale_up_period_seconds}
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": scaling.scale_down_stabilization_seconds,
            "selectPolicy": "Min",
            "policies": [
                {"type": "Pods", "value": 1, "periodSeconds": scaling.scale_up_period_seconds}
            ],
        },
    }


def _target_ref(kd: KimiDeployment) -> dict[str, str]:
    return {"apiVersion": kd.api_version, "kind": kd.kind, "name": kd.metadata.name}


def scaled_object(
    kd: KimiDeployment, prometheus_url: str, authentication: str = ""
) -> dict[str, Any]:
    """`authentication`: `Kind/name` of the KEDA TriggerAuthentication that gives the trigger its
    bearer token (and the CA, for HTTPS with a private CA); "" for none."""
    assert kd.spec.autoscaling is not None
    scaling = kd.spec.autoscaling
    query, threshold = keda_query(kd)
    trigger: dict[str, Any] = {
        "type": "prometheus",
        "metricType": "AverageValue",
        "metadata": {"serverAddress": prometheus_url, "query": query, "threshold": threshold},
    }
    if authentication:
        kind, name = authentication.split("/", 1)
        trigger["metadata"]["authModes"] = "bearer"
        trigger["authenticationRef"] = {"kind": kind, "name": name}
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata(kd, kd.metadata.name, "autoscaler"),
        "spec": {
            "scaleTargetRef": _target_ref(kd),
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "pollingInterval": POLLING_INTERVAL_S,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior(kd)}},
            "triggers": [trigger],
        },
    }


def horizontal_pod_autoscaler(kd: KimiDeployment) -> dict[str, Any]:
    target = threshold(kd)
    assert kd.spec.autoscaling is not None
    assert target is not None
    scaling = kd.spec.autoscaling
    metric, value = target_metric(target)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(kd, kd.metadata.name, "autoscaler"),
        "spec": {
            "scaleTargetRef": _target_ref(kd),
            "minReplicas": scaling.min_replicas,
            "maxReplicas": scaling.max_replicas,
            "behavior": behavior(kd),
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {
                            "name": metric.external,
                            "selector": {"matchLabels": {"deployment": kd.metadata.name}},
                        },
                        "target": {
                            "type": "AverageValue",
                            "averageValue": _hpa_target(metric, value),
                        },
                    },
                }
            ],
        },
    }


def adapter_rules() -> dict[str, Any]:
    """prometheus-adapter's `externalRules` for the HPA's metrics (its namespace is the HPA's)."""
    return {
        "externalRules": [
            {
                "seriesQuery": f'{{__name__="{m.record}", namespace!="", deployment!=""}}',
                "resources": {"overrides": {"namespace": {"resource": "namespace"}}},
                "name": {"matches": f"^{m.record}$", "as": m.external},
                "metricsQuery": m.adapter_query,
            }
            for m in METRICS.values()
        ]
    }
