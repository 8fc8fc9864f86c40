"""A shared cache being deleted is neither joined nor mounted: a new deployment waits for it to
go, then makes it anew (on the embedded API server, one reconcile at a time)."""

from typing import Any

from kimi_operator.builders.lifecycle import SHARED_CLAIM
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, LEADER_WORKER_SET, PERSISTENT_VOLUME_CLAIM
from tests.support import cluster
from tests.support.cluster import condition, sample

NS, NAME = "inference", "k3-tp8-dspark"
# What keeps a claim a pod mounts (Kubernetes' storage object in use protection).
PROTECTION = "kubernetes.io/pvc-protection"


def reconcile_once(client: Client) -> dict[str, Any]:
    return cluster.reconcile_once(client, NS, NAME)


def test_a_compile_cache_claim_being_deleted_is_not_used(client: Client) -> None:
    """A bug once: the namespace's compile-cache claim, deleted by a person while another
    deployment's pods still mounted it, was mounted by the groups of a new deployment, whose
    pods then waited for a claim going away."""
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": SHARED_CLAIM, "namespace": NS, "finalizers": [PROTECTION]},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "200Gi"}},
        },
    }
    client.create(PERSISTENT_VOLUME_CLAIM, claim)
    client.delete(PERSISTENT_VOLUME_CLAIM, NS, SHARED_CLAIM)
    going = client.get(PERSISTENT_VOLUME_CLAIM, NS, SHARED_CLAIM)
    assert going is not None
    assert going["metadata"].get("deletionTimestamp")
    client.create(KIMI_DEPLOYMENT, sample())
    status = reconcile_once(client)
    weights = condition(status, "WeightsReady")
    assert (weights["status"], weights["reason"]) == ("False", "CacheTerminating")
    assert SHARED_CLAIM in weights["message"]
    assert client.list(LEADER_WORKER_SET, NS) == []
    after = client.get(PERSISTENT_VOLUME_CLAIM, NS, SHARED_CLAIM)
    assert after is not None
    assert after["metadata"]["resourceVersion"] == going["metadata"]["resourceVersion"]
    # The pods that kept it are gone: the claim goes, and is made anew for the deployment.
    client.patch(PERSISTENT_VOLUME_CLAIM, NS, SHARED_CLAIM, {"metadata": {"finalizers": None}})
    assert client.get(PERSISTENT_VOLUME_CLAIM, NS, SHARED_CLAIM) is None
    status = reconcile_once(client)
    assert condition(status, "WeightsReady")["status"] == "True"
    made = client.get(PERSISTENT_VOLUME_CLAIM, NS, SHARED_CLAIM)
    assert made is not None
    assert not made["metadata"].get("deletionTimestamp")
    assert [g["metadata"]["name"] for g in client.list(LEADER_WORKER_SET, NS)] == [f"{NAME}-g0"]
