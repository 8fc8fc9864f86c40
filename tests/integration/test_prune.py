"""A scale-down finds every surplus group, whatever an earlier, interrupted one left behind; a
child of any kind the spec no longer asks for is deleted."""

import random
from typing import Any

from kimi_operator.builders import OperatorDefaults
from kimi_operator.embedded.kubelet import register_nodes, start_groups
from kimi_operator.embedded.scheduler import fleet
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import (
    COMPUTE_DOMAIN,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    POD,
    POD_MONITOR,
)
from kimi_operator.reconcile import reconcile
from tests.support import cluster
from tests.support.cluster import sample

NS, NAME = "inference", "k3-tp8-dspark"


def reconcile_once(client: Client) -> dict[str, Any]:
    return cluster.reconcile_once(client, NS, NAME)


def groups(client: Client) -> list[str]:
    return sorted(
        f"{resource.kind}/{obj['metadata']['name']}"
        for resource in (COMPUTE_DOMAIN, LEADER_WORKER_SET)
        for obj in client.list(resource, NS)
    )


def test_a_gap_left_by_an_interrupted_scale_down_hides_no_group(client: Client) -> None:
    doc = sample()
    doc["spec"]["replicas"] = 3
    client.create(KIMI_DEPLOYMENT, doc)
    assert reconcile_once(client)["replicas"] == 3
    # An operator killed half-way through scaling down to 1 (g1 deleted, g2 not yet), and a
    # status that since counts 1 group: nothing says that g2 is there.
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"replicas": 1}})
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"status": {"replicas": 1}}, subresource="status")
    for resource in (COMPUTE_DOMAIN, LEADER_WORKER_SET):
        assert client.delete(resource, NS, f"{NAME}-g1")
    reconcile_once(client)
    assert groups(client) == [f"ComputeDomain/{NAME}-g0", f"LeaderWorkerSet/{NAME}-g0"]


def test_objects_of_another_deployment_or_owner_are_left_alone(client: Client) -> None:
    for name in (NAME, "other"):
        doc = sample()
        doc["metadata"]["name"] = name
        doc["spec"]["replicas"] = 2
        client.create(KIMI_DEPLOYMENT, doc)
    reconcile_once(client)
    other = client.get(KIMI_DEPLOYMENT, NS, "other")
    assert other is not None
    reconcile(other, client, OperatorDefaults(), spec_changed=True, now="now")
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"replicas": 0}})
    reconcile_once(client)
    assert groups(client) == [
        f"{kind}/other-g{i}" for kind in ("ComputeDomain", "LeaderWorkerSet") for i in range(2)
    ]


def test_turning_monitoring_off_deletes_the_pod_monitor(client: Client) -> None:
    """A bug once: the PodMonitor outlived `monitoring: {podMonitor: false}` and kept
    scraping (only groups and domains were pruned)."""
    client.create(KIMI_DEPLOYMENT, sample())
    reconcile_once(client)
    assert len(client.list(POD_MONITOR, NS)) == 1
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"monitoring": {"podMonitor": False}}})
    reconcile_once(client)
    assert client.list(POD_MONITOR, NS) == []
    assert groups(client) == [f"ComputeDomain/{NAME}-g0", f"LeaderWorkerSet/{NAME}-g0"]


def test_a_compute_domain_outlives_the_pods_of_its_group(client: Client) -> None:
    """A bug once: a scale-down deleted the group's ComputeDomain with its LeaderWorkerSet, while
    the group's pods still ran their preStop and vLLM's shutdown drain on the IMEX channel. The
    domain now goes once no pod claims its channel (pods here are deleted by hand: the embedded
    API server has no kubelet to end them)."""
    doc = sample()
    doc["spec"]["replicas"] = 2
    doc["spec"]["serving"] = {"drainSeconds": 0}
    client.create(KIMI_DEPLOYMENT, doc)
    reconcile_once(client)
    register_nodes(client, fleet(1)[:8])
    assert start_groups(client, NS, random.Random(0)) == []
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"replicas": 1}})
    body = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert body is not None
    outcome = reconcile(body, client, OperatorDefaults(), spec_changed=True, now="now")
    assert outcome.error is None
    leaving = [p for p in client.list(POD, NS) if p["metadata"]["name"].startswith(f"{NAME}-g1-")]
    assert leaving  # still terminating
    assert groups(client) == [
        f"ComputeDomain/{NAME}-g0",
        f"ComputeDomain/{NAME}-g1",
        f"LeaderWorkerSet/{NAME}-g0",
    ]
    # The controller comes back, pruning, while the pods are not watched.
    assert outcome.prune_later
    assert outcome.requeue_after_s is not None
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"status": outcome.status}, subresource="status")
    reconcile_once(client)  # the pods still there: kept
    assert f"ComputeDomain/{NAME}-g1" in groups(client)
    for pod in leaving:
        assert client.delete(POD, NS, pod["metadata"]["name"])
    reconcile_once(client)
    assert groups(client) == [f"ComputeDomain/{NAME}-g0", f"LeaderWorkerSet/{NAME}-g0"]


def test_a_compute_domain_turned_off_goes_once_its_pods_are_replaced(client: Client) -> None:
    """The same for a domain the spec no longer uses: its group is rewritten without the claim,
    and the domain goes once no pod of the old template claims its channel."""
    doc = sample()
    doc["spec"]["serving"] = {"drainSeconds": 0}
    client.create(KIMI_DEPLOYMENT, doc)
    reconcile_once(client)
    register_nodes(client, fleet(1)[:4])
    assert start_groups(client, NS, random.Random(0)) == []
    disabled = {"computeDomain": "Disabled", "decode": {"backend": "auto"}}
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": disabled})
    reconcile_once(client)
    assert groups(client) == [f"ComputeDomain/{NAME}-g0", f"LeaderWorkerSet/{NAME}-g0"]
    for pod in client.list(POD, NS):  # replaced by LeaderWorkerSet with the new template
        assert client.delete(POD, NS, pod["metadata"]["name"])
    reconcile_once(client)
    assert groups(client) == [f"LeaderWorkerSet/{NAME}-g0"]
