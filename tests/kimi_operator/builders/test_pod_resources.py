"""Serving pods hold real requests: never BestEffort, memory and /dev/shm bounded."""

from typing import Any

import pytest

from kimi_operator.builders import OperatorDefaults, build_children
from tests.kimi_operator.builders.cases import CASES, deployment
from tests.support.pods import pod_specs
from tests.support.specs import edited


def qos_class(pod: dict[str, Any]) -> str:
    """The kubelet's QoS class of a pod spec (Kubernetes' GetPodQOS, for cpu and memory)."""
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    amounts = [
        (c.get("resources", {}).get("requests", {}), c.get("resources", {}).get("limits", {}))
        for c in containers
    ]
    if not any(r.get(k) or lim.get(k) for r, lim in amounts for k in ("cpu", "memory")):
        return "BestEffort"
    guaranteed = all(
        lim.get(k) and r.get(k, lim[k]) == lim[k] for r, lim in amounts for k in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


def pods(**spec: Any) -> list[dict[str, Any]]:
    doc = edited({f"spec.{k}": v for k, v in spec.items()})
    return [pod for _, pod in pod_specs(build_children(deployment(doc), OperatorDefaults()))]


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_serving_pod_is_best_effort(case: str) -> None:
    doc, defaults = CASES[case]
    for _, pod in pod_specs(build_children(deployment(doc), defaults)):
        assert qos_class(pod) in ("Burstable", "Guaranteed")
        (shm,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
        assert shm["emptyDir"]["sizeLimit"]


def test_defaults_request_a_share_of_a_gb300_tray_with_memory_bounded() -> None:
    for pod in pods():
        assert qos_class(pod) == "Burstable"
        for container in [*pod["initContainers"], *pod["containers"]]:
            assert container["resources"]["requests"] == {
                "cpu": "64",
                "memory": "512Gi",
                "ephemeral-storage": "100Gi",
            }
            assert container["resources"]["limits"]["memory"] == "512Gi"
            assert "cpu" not in container["resources"]["limits"]
        assert pod["volumes"][0] == {
            "name": "dshm",
            "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"},
        }


def test_guaranteed_limits_cpu_to_the_request() -> None:
    for pod in pods(resources={"cpu": "100", "memory": "700Gi", "guaranteed": True}):
        assert qos_class(pod) == "Guaranteed"
        assert pod["containers"][0]["resources"]["limits"]["cpu"] == "100"


def test_a_pod_without_cpu_or_memory_is_best_effort() -> None:
    """The QoS check can fail: the pods as they were before spec.resources."""
    bare = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}]}
    assert qos_class(bare) == "BestEffort"


def test_pull_secrets_and_pod_metadata_reach_every_pod_and_keep_the_operators_labels() -> None:
    doc = edited(
        {
            "spec.imagePullSecrets": [{"name": "registry"}],
            "spec.podMetadata": {"labels": {"team": "x"}, "annotations": {"a.io/b": "c"}},
        }
    )
    children = build_children(deployment(doc), OperatorDefaults())
    found = list(pod_specs(children))
    assert len(found) == 2  # leader and worker templates
    for lws in (c for c in children if c["kind"] == "LeaderWorkerSet"):
        for role in ("leaderTemplate", "workerTemplate"):
            template = lws["spec"]["leaderWorkerTemplate"][role]
            assert template["spec"]["imagePullSecrets"] == [{"name": "registry"}]
            assert template["metadata"]["annotations"] == {"a.io/b": "c"}
            assert template["metadata"]["labels"]["team"] == "x"
            assert template["metadata"]["labels"]["app.kubernetes.io/instance"] == "k3"
