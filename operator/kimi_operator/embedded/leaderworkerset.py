"""A stand-in for LeaderWorkerSet's controller and the kubelets, for the sandbox: each group's pods
made as LWS names them (the leader `<lws>-0`, its workers `<lws>-0-<i>`), owned by their
LeaderWorkerSet (so `kubectl drain` evicts them and the garbage collector deletes them with it),
bound by the scheduler model (embedded.scheduler: cordoned and tainted nodes avoided) and Ready
there, as a kubelet reports a pod it runs; the LeaderWorkerSet's status Ready once every pod of
its group is. A group that loses a pod (evicted, deleted) or whose template changed is recreated
whole, LWS's RecreateGroupOnPodRestart: its other pods deleted, then the group made anew and
placed again. A group being deleted is left alone, and one the garbage collector takes in the
middle of a pass ends that pass's work on it (NotFound is no error to a controller). Not
modelled: a Pending pod is not retried (kube-scheduler would bind it once room appears; here the
group stays as placed), nor the StatefulSets between a LeaderWorkerSet and its
pods, nor the pods' containers.
"""

import random
from collections.abc import Mapping, Sequence
from typing import Any

from kimi_operator.embedded.disruption import is_ready
from kimi_operator.embedded.kubelet import cluster_scheduler, create_pods, write_group_status
from kimi_operator.embedded.scheduler import lws_pods
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.merge import owned_by, owner_reference
from kimi_operator.k8s.resources import LEADER_WORKER_SET, POD

# Which revision of its LeaderWorkerSet's spec a pod was made from (LWS labels its pods with
# a hash of the template; the generation serves here).
REVISION_LABEL = "leaderworkerset.sigs.k8s.io/template-revision-hash"


def _stale(lws: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the group's pods must go: one is gone or going, or made from another spec."""
    wanted = {pod.name for pod in lws_pods(lws)} if lws["spec"].get("replicas", 1) else set()
    revision = str(lws["metadata"].get("generation", 1))
    return {p["metadata"]["name"] for p in pods} != wanted or any(
        p["metadata"].get("deletionTimestamp")
        or (p["metadata"].get("labels") or {}).get(REVISION_LABEL) != revision
        for p in pods
    )


def play_groups(client: Client, rng: random.Random, namespace: str | None = None) -> list[str]:
    """One pass of the controller and the kubelets over the LeaderWorkerSets (in `namespace`,
    or everywhere); returns what it did, a line each: groups recreated, started, Ready."""
    said = []
    pods = client.list(POD, namespace)
    for lws in client.list(LEADER_WORKER_SET, namespace):
        meta = lws["metadata"]
        if meta.get("deletionTimestamp"):
            continue  # left to its deletion, as Kubernetes' controllers leave an object going
        where = f"LeaderWorkerSet {meta['namespace']}/{meta['name']}"
        mine = [p for p in pods if owned_by(p, meta["uid"])]
        if mine and _stale(lws, mine):
            going = [
                p["metadata"]["name"] for p in mine if not p["metadata"].get("deletionTimestamp")
            ]
            for name in going:
                client.delete(POD, meta["namespace"], name)
            if going:
                said.append(f"{where}: a pod went or its spec changed: the group is recreated")
            mine = []
        elif not mine and lws["spec"].get("replicas", 1):
            # A fresh model each time: the pods just deleted or made count as the API has them.
            revision = {REVISION_LABEL: str(meta.get("generation", 1))}
            owned = {"labels": revision, "ownerReferences": [owner_reference(lws)]}
            pending = create_pods(client, cluster_scheduler(client, rng), lws, owned)
            said += [f"{where}: pod {name} Pending (no node fits it)" for name in pending]
            mine = [p for p in client.list(POD, meta["namespace"]) if owned_by(p, meta["uid"])]
        ready = bool(mine) and not _stale(lws, mine) and all(is_ready(p) for p in mine)
        if write_group_status(client, lws, ready=ready) and ready:
            said.append(f"{where} up: its pods Ready on {_nodes(mine)} (no GPUs here: played)")
    return said


def _nodes(pods: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(sorted(str(p["spec"].get("nodeName")) for p in pods))
