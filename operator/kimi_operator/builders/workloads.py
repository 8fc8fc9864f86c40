"""Per TP group: a LeaderWorkerSet and the ComputeDomain that gives its pods multi-node NVLink."""

import functools
from typing import Any

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders.meta import group_name, metadata
from kimi_operator.builders.pod import pod_template

# LWS places each group's pods on nodes sharing this label: one NVLink domain (GB300 NVL72 rack).
EXCLUSIVE_TOPOLOGY = {"leaderworkerset.sigs.k8s.io/exclusive-topology": "nvidia.com/gpu.clique"}


def channel_claim_name(kd: KimiDeployment, group: int) -> str:
    """The ResourceClaimTemplate the ComputeDomain generates and every pod of the group claims."""
    return f"{group_name(kd, group)}-channel"


def compute_domain(kd: KimiDeployment, group: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": metadata(kd, group_name(kd, group), "compute-domain"),
        "spec": {
            "numNodes": 0,
            "channel": {"resourceClaimTemplate": {"name": channel_claim_name(kd, group)}},
        },
    }


def leader_worker_set(
    kd: KimiDeployment, group: int, image: str, with_domain: bool, no_custom_all_reduce: bool
) -> dict[str, Any]:
    pod = functools.partial(
        pod_template,
        kd,
        image=image,
        channel_claim=channel_claim_name(kd, group) if with_domain else None,
        no_custom_all_reduce=no_custom_all_reduce,
    )
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": metadata(kd, group_name(kd, group), "serving", annotations=EXCLUSIVE_TOPOLOGY),
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
