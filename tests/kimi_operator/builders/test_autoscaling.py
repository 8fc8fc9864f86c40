"""spec.autoscaling's children: valid for their API servers (KEDA's vendored CRD, Kubernetes'
autoscaling/v2 schema), one group at a time, and which one a cluster gets."""

from typing import Any

import kubernetes_validate
import pytest

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.builders.autoscaling import horizontal_pod_autoscaler, scaled_object
from kimi_operator.embedded.admission import CustomResource
from kimi_operator.embedded.upstream import upstream_crd
from kimi_operator.k8s.resources import (
    COMPUTE_DOMAIN,
    EXTERNAL_METRICS,
    LEADER_WORKER_SET,
    POD_MONITOR,
    SCALED_OBJECT,
    Resource,
)
from kimi_operator.reconcile import plan_children
from tests.support.specs import edited

KEDA = CustomResource.of(upstream_crd("ScaledObject"), "keda.sh/v1alpha1")
TARGETS = [{"decodeRateFloor": 25}, {"waitingRequestsPerGroup": 4}, {"kvCacheUsagePercent": 85}]


def deployment(target: dict[str, int], **autoscaling: Any) -> KimiDeployment:
    spec = {"maxReplicas": 6, "target": target, **autoscaling}
    return KimiDeployment.model_validate(edited({"spec.autoscaling": spec}))


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: next(iter(t)))
def test_the_scaled_object_is_valid_for_kedas_crd(target: dict[str, int]) -> None:
    child = scaled_object(deployment(target), "http://prometheus.monitoring.svc:9090")
    assert KEDA.refusals(child) == []
    (trigger,) = child["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["serverAddress"] == "http://prometheus.monitoring.svc:9090"


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: next(iter(t)))
def test_the_hpa_is_valid_autoscaling_v2(target: dict[str, int]) -> None:
    child = horizontal_pod_autoscaler(deployment(target))
    kubernetes_validate.validate(child, "1.34", strict=True)
    (metric,) = child["spec"]["metrics"]
    assert metric["external"]["metric"]["selector"] == {"matchLabels": {"deployment": "k3"}}


@pytest.mark.parametrize("kind", ["TriggerAuthentication", "ClusterTriggerAuthentication"])
def test_a_named_trigger_authentication_gives_the_trigger_its_bearer_token(kind: str) -> None:
    """KEDA's prometheus scaler sends a bearer token only with authModes "bearer" in the
    trigger's metadata, the token itself coming from the trigger authentication."""
    child = scaled_object(deployment(TARGETS[0]), "https://p:9091", f"{kind}/thanos")
    assert KEDA.refusals(child) == []
    (trigger,) = child["spec"]["triggers"]
    assert trigger["authenticationRef"] == {"kind": kind, "name": "thanos"}
    assert trigger["metadata"]["authModes"] == "bearer"
    defaults = OperatorDefaults(keda_authentication=f"{kind}/thanos")
    (built,) = [
        c for c in build_children(deployment(TARGETS[0]), defaults) if c["kind"] == "ScaledObject"
    ]
    assert built["spec"]["triggers"][0]["authenticationRef"]["name"] == "thanos"
    (plain,) = scaled_object(deployment(TARGETS[0]), "https://p:9091")["spec"]["triggers"]
    assert "authenticationRef" not in plain
    assert "authModes" not in plain["metadata"]


def test_a_broken_scaled_object_is_refused() -> None:
    child = scaled_object(deployment(TARGETS[0]), "http://p:9090")
    child["spec"]["minReplicaCount"] = "one"
    assert KEDA.refusals(child) != []


def test_one_group_at_a_time_and_a_long_wait_before_removing_one() -> None:
    kd = deployment(TARGETS[1], minReplicas=2, scaleUpPeriodSeconds=900)
    keda = scaled_object(kd, "http://p:9090")["spec"]
    hpa = horizontal_pod_autoscaler(kd)["spec"]
    assert keda["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == hpa["behavior"]
    assert (keda["minReplicaCount"], keda["maxReplicaCount"]) == (2, 6)
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 6)
    up, down = hpa["behavior"]["scaleUp"], hpa["behavior"]["scaleDown"]
    assert up["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 900}]
    assert down["stabilizationWindowSeconds"] == 1800
    assert down["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 900}]


def test_no_autoscaler_without_spec_autoscaling() -> None:
    kinds = {
        c["kind"]
        for c in build_children(KimiDeployment.model_validate(edited({})), OperatorDefaults())
    }
    assert not kinds & {"ScaledObject", "HorizontalPodAutoscaler"}


def served(keda: bool, metric: bool) -> dict[Resource, bool]:
    found = {LEADER_WORKER_SET: True, COMPUTE_DOMAIN: True, POD_MONITOR: True, SCALED_OBJECT: keda}
    found[Resource(EXTERNAL_METRICS, "v1beta1", "kimi_num_requests_waiting", "ExternalMetric")] = (
        metric
    )
    return found


@pytest.mark.parametrize(
    ("keda", "metric", "kind", "degraded"),
    [
        (True, False, "ScaledObject", False),
        (False, True, "HorizontalPodAutoscaler", False),
        (False, False, "HorizontalPodAutoscaler", True),
    ],
)
def test_keda_where_served_else_an_hpa_and_why_it_cannot_scale(
    keda: bool, metric: bool, kind: str, degraded: bool
) -> None:
    plan = plan_children(deployment(TARGETS[1]), OperatorDefaults(), served(keda, metric))
    autoscalers = [
        c["kind"] for c in plan.children if c["kind"] in ("ScaledObject", "HorizontalPodAutoscaler")
    ]
    assert autoscalers == [kind]
    reasons = [p.reason for p in plan.degradations]
    assert reasons == (["ScaledObjectNotInstalled"] if degraded else [])
    if degraded:
        (problem,) = plan.degradations
        assert "kimi_num_requests_waiting" in problem.message
        assert "install KEDA" in problem.message
