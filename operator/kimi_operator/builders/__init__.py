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
    # Images whose vLLM has the cross-node custom all-reduce fix (vllm issue 52778).
    custom_all_reduce_fixed_images: frozenset[str] = frozenset()


def serving_image(kd: KimiDeployment, defaults: OperatorDefaults) -> str:
    return kd.spec.image or defaults.serving_image


def custom_all_reduce_disabled(kd: KimiDeployment, defaults: OperatorDefaults) -> bool:
    """Whether `--disable-custom-all-reduce` is added: TP across nodes (GB300 MNNVL) on an image
    not known to carry the fix for vllm issue 52778."""
    image = serving_image(kd, defaults)
    return kd.spec.nodes_per_group > 1 and image not in defaults.custom_all_reduce_fixed_images


def needs_compute_domain(kd: KimiDeployment) -> bool:
    """A latency_specialized group across nodes: its multicast memory needs the IMEX channel that
    only a ComputeDomain provides (a rule refuses `Disabled` for it)."""
    return kd.spec.decode.backend == "latency_specialized" and kd.spec.nodes_per_group > 1


def uses_compute_domain(kd: KimiDeployment, defaults: OperatorDefaults) -> bool:
    mode = kd.spec.compute_domain
    return mode == "Required" or (mode == "Auto" and defaults.compute_domain_available)


def build_children(kd: KimiDeployment, defaults: OperatorDefaults) -> list[dict[str, Any]]:
    spec = kd.spec
    image = serving_image(kd, defaults)
    with_domain = uses_compute_domain(kd, defaults)
    no_custom_all_reduce = custom_all_reduce_disabled(kd, defaults)
    children: list[dict[str, Any]] = []
    for group in range(spec.replicas):
        if with_domain:
            children.append(compute_domain(kd, group))
        children.append(leader_worker_set(kd, group, image, with_domain, no_custom_all_reduce))
    children += [service(kd), pod_disruption_budget(kd)]
    if spec.monitoring.pod_monitor:
        children.append(pod_monitor(kd))
    return children
