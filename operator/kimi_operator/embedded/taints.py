"""A stand-in for kube-controller-manager's taint-eviction controller
(pkg/controller/tainteviction): a pod bound to a node with a `NoExecute` taint it does not
tolerate is deleted, its `DisruptionTarget` condition (`DeletionByTaintManager`) written first.
Its owner (the LeaderWorkerSet stand-in) then makes the pods again where the scheduler model
finds room. Not modelled: `tolerationSeconds` (a toleration here holds for good) and the
controller's rate limits.
"""

from kimi_operator.embedded.disruption import disrupted
from kimi_operator.embedded.scheduler import Pod, untolerated
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import NODE, POD

NO_EXECUTE = frozenset({"NoExecute"})


def evict_untolerated(client: Client) -> list[str]:
    """One pass over the bound pods; returns `namespace/name` of each pod deleted."""
    nodes = {node["metadata"]["name"]: node for node in client.list(NODE)}
    deleted = []
    for pod in client.list(POD):
        meta = pod["metadata"]
        node = nodes.get(pod["spec"].get("nodeName", ""))
        if node is None or meta.get("deletionTimestamp"):
            continue
        if untolerated(Pod.of(pod).tolerations, node, NO_EXECUTE) is None:
            continue
        why = "Taint manager: deleting due to NoExecute taint"
        status = {"status": disrupted(pod, "DeletionByTaintManager", why)}
        client.patch(POD, meta["namespace"], meta["name"], status, subresource="status")
        client.delete(POD, meta["namespace"], meta["name"])
        deleted.append(f"{meta['namespace']}/{meta['name']}")
    return deleted
