"""The autoscalers' view of a KimiDeployment with `spec.autoscaling`: the KEDA trigger and the
prometheus-adapter query it gets (tests/observability and tests/kimi_kernels/decode_metrics)."""

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders.autoscaling import (
    adapter_rules,
    scaled_object,
    target_metric,
    threshold,
)
from tests.support.specs import edited

NAMESPACE, NAME = "ns", "busy"
# target -> (value in the spec, what KEDA's query and the adapter's metric evaluate to, groups)
TARGETS = {
    "waitingRequestsPerGroup": (8, 18.0, 18.0, 3),  # ceil(18 / 8)
    "kvCacheUsagePercent": (80, 1.6, 1.6, 2),  # ceil((0.9 + 0.7) / 0.8)
    "decodeRateFloor": (30, 6.0, 200_000.0, 6),  # ceil(2 groups x 30 / 10 tok/s)
}


def deployment(
    target: str, value: int | None = None, namespace: str = NAMESPACE, name: str = NAME
) -> KimiDeployment:
    autoscaling = {"maxReplicas": 8, "target": {target: value or TARGETS[target][0]}}
    doc = edited({"spec.autoscaling": autoscaling, "metadata.name": name})
    doc["metadata"]["namespace"] = namespace
    return KimiDeployment.model_validate(doc)


def trigger(kd: KimiDeployment) -> dict[str, str]:
    metadata: dict[str, str] = scaled_object(kd, "http://p:9090")["spec"]["triggers"][0]["metadata"]
    return metadata


def adapter_query(kd: KimiDeployment) -> str:
    """The adapter's metricsQuery as prometheus-adapter sends it for the HPA of `kd`."""
    target = threshold(kd)
    assert target is not None
    metric, _ = target_metric(target)
    (rule,) = (r for r in adapter_rules()["externalRules"] if r["name"]["as"] == metric.external)
    query: str = rule["metricsQuery"]
    matchers = f'namespace="{kd.metadata.namespace}",deployment="{kd.metadata.name}"'
    return (
        query.replace("<<.Series>>", metric.record)
        .replace("<<.LabelMatchers>>", matchers)
        .replace("<<.GroupBy>>", "namespace")
    )
