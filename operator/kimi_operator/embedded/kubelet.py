"""A stand-in for what a GPU cluster does to the children once they exist: the LeaderWorkerSet
controller and kubelets bring the groups up, the NVIDIA DRA driver readies the ComputeDomains.

There are no GPUs, pods or nodes behind the embedded API server, so the demo and the tests say
"these groups are up now" by writing the status those controllers would write.
"""

import datetime
from typing import Any

from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import COMPUTE_DOMAIN, LEADER_WORKER_SET


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def group_ready_status(lws: dict[str, Any]) -> dict[str, Any]:
    replicas = int(lws.get("spec", {}).get("replicas", 1))
    return {
        "replicas": replicas,
        "readyReplicas": replicas,
        "updatedReplicas": replicas,
        "observedGeneration": lws.get("metadata", {}).get("generation", 1),
        "conditions": [
            {
                "type": "Available",
                "status": "True",
                "reason": "AllGroupsReady",
                "message": "All replicas are ready",
                "lastTransitionTime": _now(),
            }
        ],
    }


def mark_ready(client: Client, namespace: str | None = None) -> list[str]:
    """Mark every LeaderWorkerSet and ComputeDomain (in `namespace`, or everywhere) ready that is
    not yet; returns `Kind namespace/name` of each one marked."""
    marked = []
    for lws in client.list(LEADER_WORKER_SET, namespace):
        if (lws.get("status") or {}).get("readyReplicas") != lws.get("spec", {}).get("replicas", 1):
            meta = lws["metadata"]
            status = {"status": group_ready_status(lws)}
            client.patch(
                LEADER_WORKER_SET, meta["namespace"], meta["name"], status, subresource="status"
            )
            marked.append(f"LeaderWorkerSet {meta['namespace']}/{meta['name']}")
    for domain in client.list(COMPUTE_DOMAIN, namespace):
        if (domain.get("status") or {}).get("status") != "Ready":
            meta = domain["metadata"]
            status = {"status": {"status": "Ready", "nodes": []}}
            client.patch(
                COMPUTE_DOMAIN, meta["namespace"], meta["name"], status, subresource="status"
            )
            marked.append(f"ComputeDomain {meta['namespace']}/{meta['name']}")
    return marked
