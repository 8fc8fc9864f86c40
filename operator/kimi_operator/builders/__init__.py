"""Pure builders: a validated KimiDeployment in, the manifests of its children out."""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kimi_operator.api.spec import KimiDeployment, TracingSpec
from kimi_operator.api.status import WeightsStatus
from kimi_operator.builders.autoscaling import (
    DEFAULT_PROMETHEUS_URL,
    horizontal_pod_autoscaler,
    scaled_object,
    threshold,
)
from kimi_operator.builders.calibration import calibration_children
from kimi_operator.builders.disaggregation import (
    DEFAULT_ROUTING_SIDECAR_IMAGE,
    Serving,
    serving_roles,
)
from kimi_operator.builders.images import DefaultImageGate
from kimi_operator.builders.meta import GROUP_LETTERS
from kimi_operator.builders.nodes import UnfitNodes
from kimi_operator.builders.routing import DEFAULT_EPP_IMAGE, routing_children
from kimi_operator.builders.serving import pod_disruption_budget, pod_monitor, service
from kimi_operator.builders.tracing import effective
from kimi_operator.builders.weights import (
    cache_claim,
    cache_name,
    compile_cache_claim,
    download_job,
    hf_sources,
    resolve_job,
)
from kimi_operator.builders.workloads import compute_domain, leader_worker_set

# Role (model, draft) -> how that Hugging Face source was resolved.
Resolved = Mapping[str, WeightsStatus]

DEFAULT_SERVING_IMAGE = "ghcr.io/kimi-operator/vllm-kimi:0.33.0"
DEFAULT_SERVING_VLLM_VERSION = "0.33.0"
# The vLLM version of a deployment's own spec.image, declared on the KimiDeployment (an operator
# cannot look inside an image).
VLLM_VERSION_ANNOTATION = "kimi-operator.io/vllm-version"
# From vLLM 0.33.0 on, the custom all-reduce keeps a TP group that spans nodes off CUDA IPC
# (vllm/distributed/device_communicators/custom_all_reduce.py in the 0.33.0 wheel): buffers are
# allocated per rank, not IPC-shared (lines 294-311), the all-reduce itself never runs across
# nodes (fully_connected stays False, so should_custom_ar refuses, lines 253-266 and 496-511), and
# all-gather / reduce-scatter use MNNVL multicast through symmetric memory (lines 357-408,
# 588-606, 636-645), or the communicator disables itself (lines 231-236, 349-355). Older images
# opened CUDA IPC handles across nodes (vllm issue 52778): for them the operator adds
# --disable-custom-all-reduce. docs/custom-all-reduce.md has the derivation.
FIRST_VLLM_WITHOUT_CROSS_NODE_IPC = (0, 33, 0)


@dataclass(frozen=True)
class OperatorDefaults:
    """What the operator is configured with, rather than what the spec says."""

    serving_image: str = DEFAULT_SERVING_IMAGE
    # The vLLM version serving_image carries (chart value servingImage.vllmVersion).
    serving_image_vllm_version: str = DEFAULT_SERVING_VLLM_VERSION
    # With `computeDomain: Auto`, whether the cluster serves the ComputeDomain API.
    compute_domain_available: bool = True
    # Prometheus that KEDA's triggers and the prefill autoscaler query (chart value
    # autoscaling.prometheusUrl).
    prometheus_url: str = DEFAULT_PROMETHEUS_URL
    # How the operator's own queries authenticate (chart value autoscaling.prometheusAuth): a file
    # holding a bearer token, read at every query (projected tokens rotate), and the CA of an HTTPS
    # Prometheus's certificate; "" for none (no Authorization header, the system's CAs).
    prometheus_token_file: str = ""
    prometheus_ca_file: str = ""
    # The KEDA TriggerAuthentication of the ScaledObjects' Prometheus triggers, as
    # `TriggerAuthentication/<name>` (in each deployment's namespace) or
    # `ClusterTriggerAuthentication/<name>`; "" for none.
    keda_authentication: str = ""
    # With spec.autoscaling: whether the cluster serves KEDA's ScaledObject API (else an HPA).
    keda_available: bool = True
    # The endpoint picker of spec.routing.mode InferencePool (chart value endpointPicker.image).
    epp_image: str = DEFAULT_EPP_IMAGE
    # llm-d's routing sidecar of spec.prefill's decode leaders (endpointPicker.routingSidecarImage).
    routing_sidecar_image: str = DEFAULT_ROUTING_SIDECAR_IMAGE
    # With spec.routing.mode InferencePool: whether the cluster serves the InferencePool API
    # (else no pool and no endpoint picker: the Service alone, Degraded says why).
    inference_pool_available: bool = True
    # Tracing of deployments that leave spec.observability.tracing out (chart value tracing); None
    # for none. Not an input of the groups' templates (upgrades.py): a change reaches a group
    # when it is written for another reason.
    tracing: TracingSpec | None = None
    # Operator-wide: whose turn it is to move to serving_image (shared by copies of this object).
    image_gate: DefaultImageGate = field(default_factory=DefaultImageGate, compare=False)
    # Operator-wide: the nodes TP groups must leave, kept from the Node watch (builders/nodes.py).
    nodes: UnfitNodes = field(default_factory=UnfitNodes, compare=False)


def serving_image(kd: KimiDeployment, defaults: OperatorDefaults) -> str:
    return kd.spec.image or defaults.serving_image


def vllm_version(kd: KimiDeployment, defaults: OperatorDefaults) -> str:
    """The vLLM version the deployment's image carries, "" when not declared."""
    if not kd.spec.image:
        return defaults.serving_image_vllm_version
    annotations = (kd.metadata.model_extra or {}).get("annotations") or {}
    version = annotations.get(VLLM_VERSION_ANNOTATION, "")
    return version if isinstance(version, str) else ""


def _release(version: str) -> tuple[int, ...] | None:
    match = re.match(r"v?(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(x) for x in match.groups()) if match else None


def custom_all_reduce_disabled(kd: KimiDeployment, defaults: OperatorDefaults) -> bool:
    """Whether `--disable-custom-all-reduce` is added: TP across nodes (GB300 MNNVL) on an image
    whose vLLM is older than 0.33.0 or not declared."""
    release = _release(vllm_version(kd, defaults))
    fixed = release is not None and release >= FIRST_VLLM_WITHOUT_CROSS_NODE_IPC
    return kd.spec.nodes_per_group > 1 and not fixed


def needs_compute_domain(kd: KimiDeployment) -> bool:
    """A latency_specialized group across nodes: its multicast memory needs the IMEX channel that
    only a ComputeDomain provides (a rule refuses `Disabled` for it)."""
    return kd.spec.decode.backend == "latency_specialized" and kd.spec.nodes_per_group > 1


def uses_compute_domain(kd: KimiDeployment, defaults: OperatorDefaults) -> bool:
    mode = kd.spec.compute_domain
    return mode == "Required" or (mode == "Auto" and defaults.compute_domain_available)


def preview_weights(kd: KimiDeployment) -> dict[str, WeightsStatus]:
    """For `render`: each Hugging Face revision as if it were the commit (the operator resolves
    it first, in a Job), sized by `cache.size` or as if empty."""
    return {
        role: WeightsStatus(
            role=role,
            repo=source.repo,
            revision=source.revision,
            commit=source.revision,
            bytes=0,
            claim_name=cache_name(source, source.revision),
        )
        for role, source in hf_sources(kd)
    }


def build_children(
    kd: KimiDeployment,
    defaults: OperatorDefaults,
    spares: int = 0,
    *,
    weights: Resolved | None = None,
    indices: Mapping[str, Sequence[int]] | None = None,
) -> list[dict[str, Any]]:
    """The children the deployment controls. `spares`: surge groups to build beyond each role's
    replicas (a rollout's, see rollout.py); `indices`: instead, the groups to build of each role
    (by letter: group_set.py names them). `weights`: how its Hugging Face sources were
    resolved (None: `preview_weights`); one not resolved yet gets a resolve Job, and no group is
    built until all are (the pods mount their cache claims)."""
    spec = kd.spec
    weights = preview_weights(kd) if weights is None else weights
    image = serving_image(kd, defaults)
    children: list[dict[str, Any]] = [
        resolve_job(kd, role, source, image)
        for role, source in hf_sources(kd)
        if role not in weights
    ]
    if not children:
        caches = {role: w.claim_name for role, w in weights.items()}
        children += _groups(kd, defaults, spares, caches, indices or {})
    children += [service(kd), pod_disruption_budget(kd, evacuating=defaults.nodes.policy.enabled)]
    if defaults.inference_pool_available:
        children += routing_children(kd, defaults.epp_image, effective(kd, defaults.tracing))
    if spec.monitoring.pod_monitor:
        children.append(pod_monitor(kd))
    if threshold(kd) is not None:  # with spec.autoscaling.slo the operator scales: no child
        children.append(
            scaled_object(kd, defaults.prometheus_url, defaults.keda_authentication)
            if defaults.keda_available
            else horizontal_pod_autoscaler(kd)
        )
    # The scheduled calibrations sweep the first decode group the plan keeps.
    first = min((indices or {}).get(GROUP_LETTERS["decode"]) or [0])
    return children + calibration_children(kd, first)


def _groups(
    kd: KimiDeployment,
    defaults: OperatorDefaults,
    spares: int,
    caches: Mapping[str, str],
    indices: Mapping[str, Sequence[int]],
) -> list[dict[str, Any]]:
    with_domain = uses_compute_domain(kd, defaults)
    children: list[dict[str, Any]] = []
    for serving in serving_roles(kd.spec):
        letter = GROUP_LETTERS[serving]
        wanted = indices.get(letter, range(_group_count(kd, serving, spares)))
        for group in wanted:
            if with_domain:
                children.append(compute_domain(kd, group, serving))
            children.append(group_workload(kd, defaults, group, serving, caches))
    return children


def group_workload(
    kd: KimiDeployment,
    defaults: OperatorDefaults,
    group: int,
    serving: Serving,
    caches: Mapping[str, str],
) -> dict[str, Any]:
    """The LeaderWorkerSet of one TP group (`caches`: role -> the weights claim it mounts)."""
    return leader_worker_set(
        kd,
        group,
        serving_image(kd, defaults),
        uses_compute_domain(kd, defaults),
        custom_all_reduce_disabled(kd, defaults),
        caches=caches,
        serving=serving,
        sidecar_image=defaults.routing_sidecar_image,
        tracing=effective(kd, defaults.tracing),
    )


def _group_count(kd: KimiDeployment, serving: Serving, spares: int) -> int:
    """Groups of a role: spec.replicas for the decode role, spec.prefill.replicas for the
    prefill role, each with a rollout's surge groups (rollout.decide drops a role's spares when
    that role is not rolling)."""
    if serving == "prefill":
        replicas = kd.spec.prefill.replicas if kd.spec.prefill is not None else 0
    else:
        replicas = kd.spec.replicas
    return replicas + spares if replicas else 0


def build_caches(
    kd: KimiDeployment, defaults: OperatorDefaults, weights: Resolved
) -> list[dict[str, Any]]:
    """The weights caches of the resolved Hugging Face sources: a claim and its download Job
    each, shared with other deployments of the same key (not controlled by this one); and the
    namespace's compile-cache claim, shared with its other deployments."""
    image = serving_image(kd, defaults)
    claim = compile_cache_claim(kd)
    out = [] if claim is None else [claim]
    for role, source in hf_sources(kd):
        if role in weights:
            out += [
                cache_claim(kd, source, weights[role]),
                download_job(kd, source, weights[role], image),
            ]
    return out
