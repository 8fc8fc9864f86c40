"""Pure builders: a validated KimiDeployment in, the manifests of its children out."""

from dataclasses import dataclass
from typing import Any

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders.serving import pod_disruption_budget, pod_monitor, service
from kimi_operator.builders.workloads import compute_domain, leader_worker_set

DEFAULT_SERVING_IMAGE = "ghcr.io/kimi-operator/vllm-kimi:0.33.0"


@dataclass(frozen=True)
class OperatorDefaults:
    """What the operator is configured with, rather than what the spec says."""

    serving_image: str = DEFAULT_SERVING_IMAGE
    # With `computeDomain: Auto`, whether the cluster serves the ComputeDomain API.
    compute_domain_available: bool = True


def build_children(kd: KimiDeployment, defaults: OperatorDefaults) -> list[dict[str, Any]]:
    spec = kd.spec
    image = spec.image or defaults.serving_image
    with_domain = spec.compute_domain == "Required" or (
        spec.compute_domain == "Auto" and defaults.compute_domain_available
    )
    children: list[dict[str, Any]] = []
    for group in range(spec.replicas):
        if with_domain:
            children.append(compute_domain(kd, group))
        children.append(leader_worker_set(kd, group, image, with_domain))
    children += [service(kd), pod_disruption_budget(kd)]
    if spec.monitoring.pod_monitor:
        children.append(pod_monitor(kd))
    return children
