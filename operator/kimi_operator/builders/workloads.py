"""Per TP group: a LeaderWorkerSet and the ComputeDomain that gives its pods multi-node NVLink."""

from collections.abc import Mapping
from typing import Any

from kimi_operator.api.spec import KimiDeployment, TracingSpec
from kimi_operator.builders.disaggregation import Serving
from kimi_operator.builders.meta import group_name, metadata
from kimi_operator.builders.placement import GROUP_LABEL, group_affinity, group_annotations
from kimi_operator.builders.pod import Role, pod_template


def channel_claim_name(kd: KimiDeployment, group: int, serving: Serving = "aggregated") -> str:
    """The ResourceClaimTemplate the ComputeDomain generates and every pod of the group claims."""
    return f"{group_name(kd, group, serving)}-channel"


def compute_domain(
    kd: KimiDeployment, group: int, serving: Serving = "aggregated"
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": metadata(kd, group_name(kd, group, serving), "compute-domain"),
        "spec": {
            "numNodes": 0,
            "channel": {"resourceClaimTemplate": {"name": channel_claim_name(kd, group, serving)}},
        },
    }


def leader_worker_set(
    kd: KimiDeployment,
    group: int,
    image: str,
    with_domain: bool,
    no_custom_all_reduce: bool,
    *,
    caches: Mapping[str, str],
    serving: Serving,
    sidecar_image: str,
    tracing: TracingSpec | None,
) -> dict[str, Any]:
    name = group_name(kd, group, serving)
    channel = channel_claim_name(kd, group, serving) if with_domain else None

    def pod(role: Role) -> dict[str, Any]:
        built = pod_template(
            kd,
            role,
            image=image,
            channel_claim=channel,
            no_custom_all_reduce=no_custom_all_reduce,
            caches=caches,
            serving=serving,
            sidecar_image=sidecar_image,
            tracing=tracing,
        )
        built["metadata"]["labels"][GROUP_LABEL] = name
        affinity = group_affinity(kd, name)
        if affinity:
            built["spec"]["affinity"] = affinity
        return built

    annotations = group_annotations(kd)
    extra = {"annotations": annotations} if annotations else {}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": metadata(kd, name, "serving", **extra),
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": kd.spec.nodes_per_group,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": pod("leader"),
                "workerTemplate": pod("worker"),
            },
        },
    }
