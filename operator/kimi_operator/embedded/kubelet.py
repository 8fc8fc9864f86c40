"""A stand-in for what a GPU cluster does to the children once they exist: the LeaderWorkerSet
controller and kubelets bring the groups up, the NVIDIA DRA driver readies the ComputeDomains.

There are no GPUs, pods or nodes behind the embedded API server, so the demo and the tests say
"these groups are up now" by writing the status those controllers would write.
"""

import datetime
from collections.abc import Callable, Mapping
from typing import Any

from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import COMPUTE_DOMAIN, LEADER_WORKER_SET


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def group_ready_status(lws: Mapping[str, Any], *, ready: bool = True) -> dict[str, Any]:
    """The status LeaderWorkerSet's controller writes for the current generation: every group
    Ready, or (`ready` False) every group restarting on the new template and not Ready yet."""
    replicas = int(lws.get("spec", {}).get("replicas", 1))
    return {
        "replicas": replicas,
        "readyReplicas": replicas if ready else 0,
        "updatedReplicas": replicas,
        "observedGeneration": lws.get("metadata", {}).get("generation", 1),
        "conditions": [
            {
                "type": "Available",
                "status": "True" if ready else "False",
                "reason": "AllGroupsReady" if ready else "GroupsNotReady",
                "message": "All replicas are ready" if ready else "Replicas are starting",
                "lastTransitionTime": _now(),
            }
        ],
    }


def _never(_: Mapping[str, Any]) -> bool:
    return False


def mark_ready(
    client: Client,
    namespace: str | None = None,
    *,
    hold: Callable[[Mapping[str, Any]], bool] = _never,
) -> list[str]:
    """Mark every LeaderWorkerSet and ComputeDomain (in `namespace`, or everywhere) ready that is
    not yet for its current generation; returns `Kind namespace/name` of each one marked.
    A LeaderWorkerSet `hold` picks is marked as starting instead (its pods never get Ready: a
    bad image, no capacity)."""
    marked = []
    for lws in client.list(LEADER_WORKER_SET, namespace):
        status = lws.get("status") or {}
        wanted = group_ready_status(lws, ready=not hold(lws))
        if (status.get("readyReplicas"), status.get("observedGeneration")) != (
            wanted["readyReplicas"],
            wanted["observedGeneration"],
        ):
            meta = lws["metadata"]
            client.patch(
                LEADER_WORKER_SET,
                meta["namespace"],
                meta["name"],
                {"status": wanted},
                subresource="status",
            )
            if wanted["readyReplicas"]:
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
