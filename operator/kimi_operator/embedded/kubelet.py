"""A stand-in for what a GPU cluster does to the children once they exist: the LeaderWorkerSet
controller and kubelets bring the groups up, the NVIDIA DRA driver readies the ComputeDomains.

There are no GPUs, pods or nodes behind the embedded API server, so the demo and the tests say
"these groups are up now" by writing the status those controllers would write; `start_groups`
also writes the groups' pods as the scheduler model (embedded.scheduler) places them on the
cluster's Node objects, Pending where no node is left, as kube-scheduler leaves them.
"""

import datetime
import random
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from kimi_operator.embedded.scheduler import Pod, Scheduler, lws_pods
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import COMPUTE_DOMAIN, LEADER_WORKER_SET, NODE, POD, Resource


def now_stamp() -> str:
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
                "lastTransitionTime": now_stamp(),
            }
        ],
    }


def _never(_: Mapping[str, Any]) -> bool:
    return False


def write_group_status(client: Client, lws: Mapping[str, Any], *, ready: bool) -> bool:
    """Write the LeaderWorkerSet's status (group_ready_status) where it says otherwise for its
    current generation; returns whether it was written."""
    status = lws.get("status") or {}
    wanted = group_ready_status(lws, ready=ready)
    if (status.get("readyReplicas"), status.get("observedGeneration")) == (
        wanted["readyReplicas"],
        wanted["observedGeneration"],
    ):
        return False
    meta = lws["metadata"]
    return write_status(client, LEADER_WORKER_SET, meta["namespace"], meta["name"], wanted)


def write_status(
    client: Client, resource: Resource, namespace: str, name: str, status: Mapping[str, Any]
) -> bool:
    """Merge `status` into the object's status subresource; False when the object is gone (the
    garbage collector took it with its owner since it was read): NotFound, to a controller,
    says there is nothing left to do, not that something failed."""
    try:
        client.patch(resource, namespace, name, {"status": dict(status)}, subresource="status")
    except ApiError as error:
        if error.code != HTTPStatus.NOT_FOUND:
            raise
        return False
    return True


def ready_domains(client: Client, namespace: str | None = None) -> list[str]:
    """The DRA driver: every ComputeDomain (in `namespace`, or everywhere) not Ready made so;
    returns `ComputeDomain namespace/name` of each."""
    marked = []
    for domain in client.list(COMPUTE_DOMAIN, namespace):
        if (domain.get("status") or {}).get("status") != "Ready":
            meta = domain["metadata"]
            ready = {"status": "Ready", "nodes": []}
            if write_status(client, COMPUTE_DOMAIN, meta["namespace"], meta["name"], ready):
                marked.append(f"ComputeDomain {meta['namespace']}/{meta['name']}")
    return marked


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
        ready = not hold(lws)
        if write_group_status(client, lws, ready=ready) and ready:
            meta = lws["metadata"]
            marked.append(f"LeaderWorkerSet {meta['namespace']}/{meta['name']}")
    return marked + ready_domains(client, namespace)


def register_nodes(client: Client, nodes: Sequence[Mapping[str, Any]]) -> None:
    """The nodes' kubelets register them: each Node created, then its status (capacity, Ready)
    written to the status subresource, as a kubelet does."""
    for node in nodes:
        client.create(NODE, node)
        status = {"status": node["status"]}
        client.patch(NODE, "", node["metadata"]["name"], status, subresource="status")


def cluster_scheduler(client: Client, rng: random.Random) -> Scheduler:
    """The scheduler model over the cluster as it is now: its Node objects and the pods bound
    to them and not ended (the API is the one record of both)."""
    nodes = client.list(NODE)
    names = {node["metadata"]["name"] for node in nodes}
    bound = [
        (Pod.of(pod), pod["spec"]["nodeName"])
        for pod in client.list(POD)
        if pod["spec"].get("nodeName") in names
        and (pod.get("status") or {}).get("phase") not in {"Succeeded", "Failed"}
    ]
    return Scheduler(nodes, rng, bound)


def create_pods(
    client: Client,
    scheduler: Scheduler,
    lws: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
) -> list[str]:
    """Create the pods of the LeaderWorkerSet's group (with `metadata` added to each: labels,
    owners), each bound by `scheduler` and Ready there, as its kubelet reports it, or left
    Pending with kube-scheduler's message; returns the names of those left Pending."""
    namespace = lws["metadata"]["namespace"]
    extra = dict(metadata or {})
    labels = extra.pop("labels", {})
    pending = []
    for pod in lws_pods(lws):
        node = scheduler.schedule(pod)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod.name, "namespace": namespace, "labels": pod.labels | labels}
            | extra,
            "spec": pod.spec | ({"nodeName": node["metadata"]["name"]} if node else {}),
        }
        client.create(POD, body)
        at = now_stamp()
        if node is None:
            pending.append(pod.name)
            message = scheduler.unschedulable_message(pod)
            unschedulable = {"status": "False", "reason": "Unschedulable", "message": message}
            conditions = [{"type": "PodScheduled", "lastTransitionTime": at} | unschedulable]
            status = {"phase": "Pending", "conditions": conditions}
        else:
            kinds = ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            conditions = [{"type": t, "status": "True", "lastTransitionTime": at} for t in kinds]
            status = {"phase": "Running", "conditions": conditions}
        # A Pod's status is its own subresource (the scheduler and kubelet write it there).
        write_status(client, POD, namespace, pod.name, status)
    return pending


def start_groups(client: Client, namespace: str, rng: random.Random) -> list[str]:
    """Create the pods of every LeaderWorkerSet in `namespace` that has none yet (create_pods;
    without owners, so they outlive their group as pods still terminating would); mark a group
    ready once all its pods are bound. Returns the names of the pods left Pending."""
    scheduler = cluster_scheduler(client, rng)
    pending = []
    existing = {p["metadata"]["name"] for p in client.list(POD, namespace)}
    for lws in client.list(LEADER_WORKER_SET, namespace):
        if any(pod.name in existing for pod in lws_pods(lws)):
            continue
        left = create_pods(client, scheduler, lws)
        pending += left
        if not left:
            write_group_status(client, lws, ready=True)
    return pending
