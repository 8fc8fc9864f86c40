"""Node maintenance with the real kubectl against the embedded API server: `kubectl get nodes`,
cordon and taint read by the scheduler model, and `kubectl drain` evicting through a
PodDisruptionBudget (held while the budget allows nothing, done once it allows one)."""

import datetime
import random
from typing import Any

from kimi_operator.embedded.clients import Kubectl
from kimi_operator.embedded.disruption import sync_budgets
from kimi_operator.embedded.kubelet import register_nodes, start_groups
from kimi_operator.embedded.scheduler import fleet
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.merge import owner_reference
from kimi_operator.k8s.resources import LEADER_WORKER_SET, POD, POD_DISRUPTION_BUDGET
from tests.support.trays import NS, one_tray_group

DRAIN = ("--ignore-daemonsets", "--delete-emptydir-data")
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _group(client: Client, name: str, size: int) -> dict[str, Any]:
    return client.create(LEADER_WORKER_SET, one_tray_group(name, size))


def _nodes_of(client: Client, group: str) -> set[str]:
    return {
        p["spec"]["nodeName"]
        for p in client.list(POD, NS, label_selector=f"app={group}")
        if p["spec"].get("nodeName")
    }


def test_cordoned_and_tainted_nodes_get_no_new_pods(client: Client, kubectl: Kubectl) -> None:
    register_nodes(client, fleet(1)[:4])
    table = kubectl.run("get", "nodes").splitlines()
    assert table[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [row.split()[:2] for row in table[1:]] == [[f"rack0-tray{i}", "Ready"] for i in range(4)]

    assert kubectl.run("cordon", "rack0-tray0") == "node/rack0-tray0 cordoned"
    kubectl.run("taint", "nodes", "rack0-tray1", "nvidia.com/gpu-health=xid:NoSchedule")
    row = kubectl.run("get", "node", "rack0-tray0", "--no-headers").split()
    assert row[1] == "Ready,SchedulingDisabled"

    _group(client, "g0", size=2)
    assert start_groups(client, NS, random.Random(0)) == []
    assert _nodes_of(client, "g0") == {"rack0-tray2", "rack0-tray3"}

    # Back in service: the next group lands on the two trays left.
    kubectl.run("uncordon", "rack0-tray0")
    kubectl.run("taint", "nodes", "rack0-tray1", "nvidia.com/gpu-health=xid:NoSchedule-")
    _group(client, "g1", size=2)
    assert start_groups(client, NS, random.Random(0)) == []
    assert _nodes_of(client, "g1") == {"rack0-tray0", "rack0-tray1"}


def _serving(client: Client, name: str, node: str, owner: dict[str, Any]) -> None:
    """A Ready pod of `owner` (kubectl drain evicts only pods with a controller) on `node`."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"app": "web"},
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
    }
    client.create(POD, pod)
    ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    client.patch(POD, NS, name, {"status": ready}, subresource="status")


def test_drain_waits_for_the_disruption_budget(client: Client, kubectl: Kubectl) -> None:
    register_nodes(client, fleet(1)[:3])
    owner = _group(client, "web", size=2)
    _serving(client, "web-0", "rack0-tray0", owner)
    _serving(client, "web-1", "rack0-tray1", owner)
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
    }
    client.create(POD_DISRUPTION_BUDGET, budget)
    sync_budgets(client, NOW)

    # Nothing allowed: kubectl retries the 429 until its timeout, the pod stays.
    held = kubectl.run("drain", "rack0-tray0", *DRAIN, "--timeout=3s", check=False)
    assert f'error when evicting pods/"web-0" -n "{NS}" (will retry after 5s): {VIOLATES}' in held
    assert "global timeout reached: 3s" in held
    assert client.get(POD, NS, "web-0") is not None
    row = kubectl.run("get", "node", "rack0-tray0", "--no-headers").split()
    assert row[1] == "Ready,SchedulingDisabled"  # cordoned first, as kubectl drain does

    # One disruption allowed: the drain evicts the pod and completes; the budget is spent.
    client.patch(POD_DISRUPTION_BUDGET, NS, "web", {"spec": {"minAvailable": 1}})
    sync_budgets(client, NOW)
    done = kubectl.run("drain", "rack0-tray0", *DRAIN, "--timeout=30s")
    assert "pod/web-0 evicted" in done
    assert done.endswith("node/rack0-tray0 drained")
    assert client.get(POD, NS, "web-0") is None
    spent = client.get(POD_DISRUPTION_BUDGET, NS, "web")
    assert spent is not None
    assert spent["status"]["disruptionsAllowed"] == 0
    assert list(spent["status"]["disruptedPods"]) == ["web-0"]


def test_drain_without_a_budget_evicts_at_once(client: Client, kubectl: Kubectl) -> None:
    register_nodes(client, fleet(1)[:1])
    _serving(client, "web-0", "rack0-tray0", _group(client, "web", size=1))
    done = kubectl.run("drain", "rack0-tray0", *DRAIN, "--timeout=30s")
    assert "evicting pod default/web-0" in done
    assert client.get(POD, NS, "web-0") is None
