"""The sandbox's LeaderWorkerSet controller and kubelets (embedded.leaderworkerset) on the
embedded API server: a group's pods named as LWS names them, owned by it, bound by the scheduler
model and Ready; the group Ready once they all are; a group that loses a pod, or whose spec
changes, recreated whole and placed again off cordoned nodes; a group at 0 replicas runs none; a
group or budget deleted under a pass, or being deleted, stops no one."""

import io
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from kimi_operator.embedded.disruption import is_ready, sync_budgets
from kimi_operator.embedded.kubelet import register_nodes
from kimi_operator.embedded.leaderworkerset import play_groups
from kimi_operator.embedded.processes import wait
from kimi_operator.embedded.sandbox import Sandbox, serve
from kimi_operator.embedded.scheduler import fleet
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import (
    LEADER_WORKER_SET,
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    Resource,
)
from tests.support.trays import NS, one_tray_group


def _group(client: Client, size: int) -> dict[str, Any]:
    return client.create(LEADER_WORKER_SET, one_tray_group("g0", size))


def _pods(client: Client) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in client.list(POD, NS)}


def _ready_replicas(client: Client) -> int:
    lws = client.get(LEADER_WORKER_SET, NS, "g0")
    assert lws is not None
    return int((lws.get("status") or {}).get("readyReplicas", 0))


def test_pods_bound_ready_and_owned(client: Client) -> None:
    register_nodes(client, fleet(1)[:4])
    lws = _group(client, size=3)
    said = play_groups(client, random.Random(0))
    pods = _pods(client)
    assert sorted(pods) == ["g0-0", "g0-0-1", "g0-0-2"]
    assert all(is_ready(p) and p["spec"]["nodeName"] for p in pods.values())
    assert len({p["spec"]["nodeName"] for p in pods.values()}) == 3  # a tray each
    (owner,) = pods["g0-0"]["metadata"]["ownerReferences"]
    assert (owner["uid"], owner["controller"]) == (lws["metadata"]["uid"], True)
    assert _ready_replicas(client) == 1
    assert said[-1].startswith(f"LeaderWorkerSet {NS}/g0 up: its pods Ready on rack0-tray")
    assert play_groups(client, random.Random(0)) == []  # nothing more to do


def test_a_pod_gone_recreates_the_group_off_cordoned_nodes(client: Client) -> None:
    register_nodes(client, fleet(1)[:4])
    _group(client, size=2)
    play_groups(client, random.Random(0))
    before = _pods(client)
    leader_node = before["g0-0"]["spec"]["nodeName"]
    client.patch(NODE, "", leader_node, {"spec": {"unschedulable": True}})
    client.delete(POD, NS, "g0-0-1")  # a worker evicted: the whole group goes

    said = play_groups(client, random.Random(0))
    assert said == [
        f"LeaderWorkerSet {NS}/g0: a pod went or its spec changed: the group is recreated"
    ]
    assert _pods(client) == {}
    assert _ready_replicas(client) == 0

    play_groups(client, random.Random(0))
    after = _pods(client)
    assert sorted(after) == ["g0-0", "g0-0-1"]
    assert leader_node not in {p["spec"]["nodeName"] for p in after.values()}
    uids = {p["metadata"]["uid"] for p in after.values()}
    assert not uids & {p["metadata"]["uid"] for p in before.values()}
    assert _ready_replicas(client) == 1


def test_a_new_spec_recreates_the_group_and_zero_replicas_run_none(client: Client) -> None:
    register_nodes(client, fleet(1)[:4])
    _group(client, size=2)
    play_groups(client, random.Random(0))
    first = {p["metadata"]["uid"] for p in _pods(client).values()}
    client.patch(LEADER_WORKER_SET, NS, "g0", {"metadata": {"labels": {"x": "y"}}})
    assert play_groups(client, random.Random(0)) == []  # the metadata is no new spec
    image = {
        "spec": {"leaderWorkerTemplate": {"workerTemplate": {"metadata": {"labels": {"v": "2"}}}}}
    }
    client.patch(LEADER_WORKER_SET, NS, "g0", image)
    play_groups(client, random.Random(0))
    play_groups(client, random.Random(0))
    pods = _pods(client)
    assert sorted(pods) == ["g0-0", "g0-0-1"]
    assert not first & {p["metadata"]["uid"] for p in pods.values()}
    assert pods["g0-0-1"]["metadata"]["labels"]["v"] == "2"
    assert _ready_replicas(client) == 1

    client.patch(LEADER_WORKER_SET, NS, "g0", {"spec": {"replicas": 0}})
    play_groups(client, random.Random(0))
    assert _pods(client) == {}
    assert _ready_replicas(client) == 0


class _DeletedAfterListing:
    """A client through which the object `name` of `resource` is deleted just after a pass lists
    them (the garbage collector taking it with its KimiDeployment): the pass holds an object
    that is gone, as a controller's cache does for a moment."""

    def __init__(self, client: Client, resource: Resource, name: str) -> None:
        self.client, self.resource, self.name = client, resource, name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.client, attribute)

    def list(self, resource: Resource, namespace: str | None = None, **options: Any) -> Any:
        found = self.client.list(resource, namespace, **options)
        if resource is self.resource:
            self.client.delete(resource, NS, self.name)
        return found


def test_a_group_deleted_under_a_pass_ends_it_quietly(client: Client) -> None:
    """The sandbox's CI failure: `kubectl delete kimi` while a pass placed g0's pods; writing
    the status of what the garbage collector had just taken (404) stopped the sandbox, and with
    it the API server. A controller reads NotFound as "gone": nothing left to do."""
    register_nodes(client, fleet(1)[:4])
    _group(client, size=2)
    racing: Any = _DeletedAfterListing(client, LEADER_WORKER_SET, "g0")

    play_groups(racing, random.Random(0))

    assert client.get(LEADER_WORKER_SET, NS, "g0") is None
    wait(lambda: _pods(client) == {} or None, 10, "the garbage collector took the pods made")


def test_a_group_being_deleted_gets_no_pods(client: Client) -> None:
    """A LeaderWorkerSet with a deletionTimestamp (a finalizer holds it, or a foreground
    deletion waits on its pods) is left to its deletion, as Kubernetes' controllers leave an
    object being deleted: no pods made for it, none made again."""
    register_nodes(client, fleet(1)[:4])
    held = one_tray_group("g0", 2)
    held["metadata"]["finalizers"] = ["test.kimi-operator.io/hold"]
    client.create(LEADER_WORKER_SET, held)
    client.delete(LEADER_WORKER_SET, NS, "g0")
    lws = client.get(LEADER_WORKER_SET, NS, "g0")
    assert lws is not None
    assert lws["metadata"].get("deletionTimestamp")

    assert play_groups(client, random.Random(0)) == []
    assert _pods(client) == {}
    client.patch(LEADER_WORKER_SET, NS, "g0", {"metadata": {"finalizers": None}})


def test_a_budget_deleted_under_a_pass_ends_it_quietly(client: Client) -> None:
    """The disruption controller's pass over a PodDisruptionBudget its KimiDeployment's deletion
    took meanwhile: nothing written, nothing raised (it stopped the sandbox before)."""
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "g0", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "g0"}}, "maxUnavailable": 0},
    }
    client.create(POD_DISRUPTION_BUDGET, budget)
    racing: Any = _DeletedAfterListing(client, POD_DISRUPTION_BUDGET, "g0")

    assert sync_budgets(racing) == []
    assert client.get(POD_DISRUPTION_BUDGET, NS, "g0") is None


def test_a_failed_pass_is_said_and_the_sandbox_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever a pass meets from the API server (a 404 raced past, a timeout under load), the
    sandbox says it and plays the next tick: its API server stays up for kubectl."""
    stop, passes = threading.Event(), []

    def tick(played: Sandbox) -> None:
        passes.append(played)
        if len(passes) == 1:
            raise ApiError('patch Pod .../g0-0/status: HTTP 404: pods "g0-0" not found', code=404)
        stop.set()

    monkeypatch.setattr(Sandbox, "tick", tick)
    out = io.StringIO()
    serve(tmp_path / "sandbox.kubeconfig", out, stop)

    assert len(passes) == 2
    assert (
        'sandbox: a pass failed (patch Pod .../g0-0/status: HTTP 404: pods "g0-0" not found); '
        "trying again\n"
    ) in out.getvalue()
