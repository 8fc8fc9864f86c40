"""Deleting a KimiDeployment with each propagation policy, as `kubectl delete --cascade` does:
the embedded API server carries the policy out as kube-apiserver and the garbage collector do
(embedded/deletion.py), and the operator gives a terminating deployment its status only."""

from typing import Any

import pytest

from kimi_operator.builders import OperatorDefaults
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError, OwnerTerminating
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, LEADER_WORKER_SET, SERVICE
from kimi_operator.reconcile import reconcile
from kimi_operator.runner import OperatorThread
from tests.integration.conftest import metrics_of, resync_ticks, resyncs
from tests.support.cluster import NAME, NS, children, condition, create, sample, wait_for

HOLD = "example.com/hold"  # a finalizer of someone else's that keeps the deployment terminating
CHILDREN = {
    "ComputeDomain/k3-tp8-dspark-g0",
    "LeaderWorkerSet/k3-tp8-dspark-g0",
    "PodDisruptionBudget/k3-tp8-dspark",
    "PodMonitor/k3-tp8-dspark",
    "Service/k3-tp8-dspark",
}


def held_deployment(client: Client) -> dict[str, Any]:
    """The sample, reconciled, with a finalizer that holds its deletion."""
    create(client, sample())
    wait_for(lambda: set(children(client)) == CHILDREN or None, what="every child")
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"metadata": {"finalizers": [HOLD]}})
    kd = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert kd is not None
    return kd


def release_hold(client: Client) -> None:
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"metadata": {"finalizers": None}})


def child_writes(api: EmbeddedApiServer, since: int) -> list[str]:
    """The operator's writes to children since `since` (the Lease and statuses aside)."""
    return [
        f"{w.method} {w.path}"
        for w in api.writes(since)
        if "/kimideployments" not in w.path and "/leases/" not in w.path
    ]


def terminating_status(client: Client) -> dict[str, Any] | None:
    kd = client.get(KIMI_DEPLOYMENT, NS, NAME)
    status = (kd or {}).get("status") or {}
    reason = next(
        (c["reason"] for c in status.get("conditions", []) if c["type"] == "Progressing"), ""
    )
    return status if reason == "Terminating" else None


def test_a_foreground_deletion_completes_without_children_coming_back(
    client: Client, api: EmbeddedApiServer, operator: OperatorThread
) -> None:
    held_deployment(client)
    mark = api.mark()
    assert client.delete(KIMI_DEPLOYMENT, NS, NAME, propagation="Foreground")
    kd = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert kd is not None  # held by our finalizer; the collector's is done already
    assert kd["metadata"]["deletionTimestamp"]
    assert kd["metadata"]["finalizers"] == [HOLD]
    assert children(client) == {}
    resyncs(metrics_of(operator))  # whole reconciles of the terminating deployment since
    assert child_writes(api, mark) == []  # the operator wrote no child: the collector did all
    assert children(client) == {}
    status = wait_for(lambda: terminating_status(client), what="the Terminating status")
    assert condition(status, "Progressing")["status"] == "False"
    release_hold(client)
    wait_for(lambda: client.get(KIMI_DEPLOYMENT, NS, NAME) is None, what="the deployment gone")


def test_a_child_deleted_while_its_owner_terminates_is_not_recreated(
    client: Client, api: EmbeddedApiServer, operator: OperatorThread
) -> None:
    """What the garbage collector does in a foreground deletion, one child at a time: the
    operator must not put the LeaderWorkerSet back (GPU pods scheduled for a deployment being
    torn down)."""
    held_deployment(client)
    client.delete(KIMI_DEPLOYMENT, NS, NAME)  # background: held by our finalizer only
    wait_for(lambda: terminating_status(client), what="the Terminating status")
    assert client.delete(LEADER_WORKER_SET, NS, f"{NAME}-g0")
    mark = api.mark()
    resyncs(metrics_of(operator))
    assert child_writes(api, mark) == []
    assert terminating_status(client) is not None
    assert "LeaderWorkerSet/k3-tp8-dspark-g0" not in children(client)
    assert "Service/k3-tp8-dspark" in children(client)  # left to the collector, not pruned


def test_an_orphan_deletion_leaves_the_children_without_owner_references(
    client: Client,
    api: EmbeddedApiServer,
    operator: OperatorThread,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kd = held_deployment(client)
    mark = api.mark()
    assert client.delete(KIMI_DEPLOYMENT, NS, NAME, propagation="Orphan")
    wait_for(lambda: terminating_status(client), what="the Terminating status")
    resyncs(metrics_of(operator))  # whole reconciles since: no adoption of the children back
    assert child_writes(api, mark) == []
    release_hold(client)
    wait_for(lambda: client.get(KIMI_DEPLOYMENT, NS, NAME) is None, what="the deployment gone")
    uid = kd["metadata"]["uid"]
    wait_for(lambda: uid not in operator.controller.known(), what="the operator to forget it")
    resync_ticks(operator, monkeypatch).wait(2)  # resyncs since, with nothing left to revisit
    found = children(client)
    assert set(found) == CHILDREN  # kept, as the user asked
    assert all(not c["metadata"].get("ownerReferences") for c in found.values())
    assert child_writes(api, mark) == []


@pytest.mark.usefixtures("operator")
def test_a_re_created_deployment_adopts_the_orphans_of_its_name(client: Client) -> None:
    """docs/architecture.md, "Terminating deployments": adopted by label, as a Deployment
    adopts ReplicaSets, so a re-created deployment runs on the groups kept, not beside them."""
    create(client, sample())
    wait_for(lambda: set(children(client)) == CHILDREN or None, what="every child")
    client.delete(KIMI_DEPLOYMENT, NS, NAME, propagation="Orphan")
    assert client.get(KIMI_DEPLOYMENT, NS, NAME) is None
    kept = children(client)
    assert all(not c["metadata"].get("ownerReferences") for c in kept.values())
    create(client, sample())
    kd = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert kd is not None

    def adopted() -> bool:
        refs = [c["metadata"].get("ownerReferences") or [] for c in children(client).values()]
        return all(r and r[0]["uid"] == kd["metadata"]["uid"] for r in refs)

    wait_for(adopted, what="the orphans adopted")
    now = children(client)
    assert set(now) == CHILDREN
    uids = {key: c["metadata"]["uid"] for key, c in now.items()}
    assert uids == {key: c["metadata"]["uid"] for key, c in kept.items()}  # none made anew


def test_the_collector_waits_for_blocking_dependents_in_a_foreground_deletion(
    client: Client,
) -> None:
    """An owner deleted in the foreground goes only after its dependents that block it: one
    held by a finalizer of its own holds the owner too."""
    owner = client.create(SERVICE, service("owner"))
    ref = {
        "apiVersion": "v1",
        "kind": "Service",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": True,
    }
    client.create(SERVICE, service("blocking", refs=[ref], finalizers=[HOLD]))
    client.create(SERVICE, service("plain", refs=[{**ref, "blockOwnerDeletion": False}]))
    assert client.delete(SERVICE, NS, "owner", propagation="Foreground")
    held = client.get(SERVICE, NS, "owner")
    assert held is not None
    assert held["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert client.get(SERVICE, NS, "plain") is None
    blocking = client.get(SERVICE, NS, "blocking")
    assert blocking is not None
    assert blocking["metadata"]["deletionTimestamp"]
    client.patch(SERVICE, NS, "blocking", {"metadata": {"finalizers": None}})
    assert client.get(SERVICE, NS, "blocking") is None
    assert client.get(SERVICE, NS, "owner") is None


def test_an_unknown_propagation_policy_is_refused(client: Client) -> None:
    client.create(SERVICE, service("owner"))
    with pytest.raises(ApiError, match='propagationPolicy: Unsupported value: "Sideways"'):
        client.delete(SERVICE, NS, "owner", propagation="Sideways")
    assert client.get(SERVICE, NS, "owner") is not None


def service(
    name: str, *, refs: list[dict[str, Any]] | None = None, finalizers: list[str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if refs:
        meta["ownerReferences"] = refs
    if finalizers:
        meta["finalizers"] = finalizers
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {"ports": [{"port": 80}]},
    }


def test_a_reconcile_that_finds_its_owner_terminating_reports_no_failure(client: Client) -> None:
    """A reconcile began from a copy read before the deletion; the group it would put back is
    gone (the collector's work) and the owner, read afresh, is terminating: the write is not
    made (`OwnerTerminating`), and the status says Terminating, not Degraded, with no Warning
    Event (controller/loop.py calls it no failure)."""
    client.create(KIMI_DEPLOYMENT, sample())
    body = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert body is not None
    first = reconcile(body, client, OperatorDefaults(), spec_changed=True, now="now")
    assert first.error is None
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"metadata": {"finalizers": [HOLD]}})
    client.delete(KIMI_DEPLOYMENT, NS, NAME)  # held terminating by our finalizer
    assert client.delete(LEADER_WORKER_SET, NS, f"{NAME}-g0")
    stale = {**body, "status": first.status}  # read before the deletion
    outcome = reconcile(stale, client, OperatorDefaults(), spec_changed=False, now="now")
    assert isinstance(outcome.error, OwnerTerminating)
    assert condition(outcome.status, "Degraded").get("status") != "True", outcome.status
    assert condition(outcome.status, "Progressing")["reason"] == "Terminating"
    assert outcome.events == []
    assert client.get(LEADER_WORKER_SET, NS, f"{NAME}-g0") is None
    release_hold(client)
