"""Create, update, scale, delete, resync and drift repair, against the embedded API server."""

from typing import Any

import pytest

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.kubelet import mark_ready
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import (
    EVENT,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    POD_MONITOR,
    SERVICE,
)
from kimi_operator.runner import OperatorThread
from tests.integration.conftest import metrics_of, resync_ticks, resyncs
from tests.support.cluster import (
    NAME,
    NS,
    children,
    condition,
    create,
    reconciled,
    sample,
    status_of,
    wait_for,
)

pytestmark = pytest.mark.usefixtures("operator")


def edit(client: Client, spec: dict[str, Any], generation: int) -> dict[str, Any]:
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": spec})
    status: dict[str, Any] = wait_for(
        lambda: reconciled(client, generation), what=f"generation {generation}"
    )
    return status


def test_create_builds_every_child_owned_and_labelled(client: Client) -> None:
    status = create(client, sample())
    kd = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert kd is not None
    found = children(client)
    assert sorted(found) == [
        "ComputeDomain/k3-tp8-dspark-g0",
        "LeaderWorkerSet/k3-tp8-dspark-g0",
        "PodDisruptionBudget/k3-tp8-dspark",
        "PodMonitor/k3-tp8-dspark",
        "Service/k3-tp8-dspark",
    ]
    for child in found.values():
        (ref,) = child["metadata"]["ownerReferences"]
        assert ref == {
            "apiVersion": "kimi-operator.io/v1alpha1",
            "kind": "KimiDeployment",
            "name": NAME,
            "uid": kd["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        labels = child["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "kimi-operator"
        assert {"app.kubernetes.io/name", "app.kubernetes.io/component"} <= labels.keys()
    # No bookkeeping on the object: no finalizer, no annotations.
    assert "finalizers" not in kd["metadata"]
    assert not kd["metadata"].get("annotations")
    assert status["replicas"] == 1
    assert status["readyReplicas"] == 0
    assert status["endpoint"] == ""
    assert condition(status, "SpecValid")["status"] == "True"
    assert condition(status, "Ready")["reason"] == "GroupsNotReady"
    assert condition(status, "Progressing")["status"] == "True"
    assert condition(status, "Degraded")["status"] == "False"
    assert condition(status, "MNNVLReady")["reason"] == "ComputeDomainNotReady"
    assert all(c["observedGeneration"] == 1 for c in status["conditions"])


def test_ready_groups_make_the_deployment_ready(client: Client) -> None:
    create(client, sample())
    assert mark_ready(client, NS) == [
        "LeaderWorkerSet inference/k3-tp8-dspark-g0",
        "ComputeDomain inference/k3-tp8-dspark-g0",
    ]
    status = wait_for(
        lambda: (
            (s := status_of(client, NS, NAME))
            and condition(s, "MNNVLReady")["status"] == "True"
            and s.get("readyReplicas") == 1
            and s
        ),
        what="ready groups and domains after the next resync",
    )
    assert status["endpoint"] == "http://k3-tp8-dspark.inference.svc:8000/v1"
    assert condition(status, "Ready") | {"lastTransitionTime": None} == {
        "type": "Ready",
        "status": "True",
        "reason": "AllGroupsReady",
        "message": "1 of 1 TP groups ready; serving",
        "lastTransitionTime": None,
        "observedGeneration": 1,
    }
    assert condition(status, "Progressing")["status"] == "False"
    assert condition(status, "MNNVLReady")["status"] == "True"


def test_update_gpus_backend_and_replicas(client: Client) -> None:
    create(client, sample())
    edit(client, {"gpus": 16}, 2)
    lws = children(client)["LeaderWorkerSet/k3-tp8-dspark-g0"]
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 4
    args = template["leaderTemplate"]["spec"]["containers"][0]["args"]
    assert args[args.index("--tensor-parallel-size") + 1] == "16"
    assert args[args.index("--nnodes") + 1] == "4"

    edit(client, {"decode": {"backend": "auto"}}, 3)
    lws = children(client)["LeaderWorkerSet/k3-tp8-dspark-g0"]
    args = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"]
    assert args[args.index("--additional-config") + 1] == '{"decode_backend":"auto"}'

    status = edit(client, {"replicas": 3}, 4)
    groups = sorted(k for k in children(client) if k.startswith(("LeaderWorkerSet", "Compute")))
    assert groups == [
        f"{kind}/k3-tp8-dspark-g{i}"
        for kind in ("ComputeDomain", "LeaderWorkerSet")
        for i in range(3)
    ]
    assert status["replicas"] == 3

    status = edit(client, {"replicas": 1}, 5)
    groups = sorted(k for k in children(client) if k.startswith(("LeaderWorkerSet", "Compute")))
    assert groups == ["ComputeDomain/k3-tp8-dspark-g0", "LeaderWorkerSet/k3-tp8-dspark-g0"]
    assert status["replicas"] == 1


def test_switching_compute_domain_off_removes_the_domains(client: Client) -> None:
    doc = sample()
    doc["spec"]["replicas"] = 2
    create(client, doc)
    # Disabled is refused for the fast path across trays: stock decode does without.
    edit(client, {"computeDomain": "Disabled", "decode": {"backend": "auto"}}, 2)
    found = children(client)
    assert not [k for k in found if k.startswith("ComputeDomain")]
    pod = found["LeaderWorkerSet/k3-tp8-dspark-g1"]["spec"]["leaderWorkerTemplate"][
        "leaderTemplate"
    ]
    assert "resourceClaims" not in pod["spec"]
    status = status_of(client, NS, NAME)
    assert condition(status, "MNNVLReady")["reason"] == "ComputeDomainDisabled"


def test_turning_monitoring_off_removes_the_pod_monitor(client: Client) -> None:
    """As the chart's ServiceAccount: its RBAC lets the operator find and delete it."""
    create(client, sample())
    assert "PodMonitor/k3-tp8-dspark" in children(client)
    edit(client, {"monitoring": {"podMonitor": False}}, 2)
    assert wait_for(
        lambda: "PodMonitor/k3-tp8-dspark" not in children(client), what="the PodMonitor gone"
    )
    assert len(children(client)) == 4


def test_delete_takes_the_children_with_it(
    client: Client,
    api: EmbeddedApiServer,
    operator: OperatorThread,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = resync_ticks(operator, monkeypatch)
    create(client, sample())
    assert children(client)
    client.delete(KIMI_DEPLOYMENT, NS, NAME)
    # Nothing for the operator to do: the ownerReferences let the garbage collector (here the
    # embedded server's stand-in) delete every child.
    wait_for(lambda: not children(client), what="children garbage-collected")
    # Two passes of the resync loop, counted on the loop itself (a slow machine slows both): a
    # reconcile that read the deployment just before it went has landed by then.
    ticks.wait(2)
    assert not children(client)
    since = api.mark()
    ticks.wait(2)
    assert api.writes(since) == []  # forgotten: no more resyncs


def test_resync_writes_nothing_when_nothing_changed(
    client: Client, api: EmbeddedApiServer, operator: OperatorThread
) -> None:
    create(client, sample())
    mark_ready(client, NS)
    wait_for(lambda: status_of(client, NS, NAME).get("readyReplicas") == 1, what="ready")
    resyncs(metrics_of(operator))  # let any write in flight land
    since = api.mark()
    registry = operator.controller.metrics.registry
    labels = {"trigger": "resync", "result": "reconciled"}
    before = registry.get_sample_value("kimi_operator_reconciles_total", labels) or 0.0
    resyncs(metrics_of(operator), 3)
    after = registry.get_sample_value("kimi_operator_reconciles_total", labels) or 0.0
    assert after - before >= 3  # the resyncs did run, and found the spec valid ...
    assert api.writes(since) == []  # ... and wrote nothing


def test_drift_is_repaired_on_the_next_resync(client: Client) -> None:
    create(client, sample())
    lws_name = "k3-tp8-dspark-g0"
    edited = {
        "spec": {"leaderWorkerTemplate": {"size": 7}},
        "metadata": {"labels": {"app.kubernetes.io/managed-by": "someone"}},
    }
    client.patch(LEADER_WORKER_SET, NS, lws_name, edited)
    client.delete(SERVICE, NS, NAME)
    client.delete(POD_MONITOR, NS, NAME)

    def repaired() -> bool:
        found = children(client)
        lws = found.get(f"LeaderWorkerSet/{lws_name}")
        return bool(
            lws
            and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
            and lws["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kimi-operator"
            and f"Service/{NAME}" in found
            and f"PodMonitor/{NAME}" in found
        )

    wait_for(repaired, timeout=30, what="drift repaired")


def test_removed_fields_are_removed_from_the_child(client: Client) -> None:
    doc = sample()
    doc["spec"]["scheduling"] = {"nodeSelector": {"pool": "gb300", "zone": "a"}}
    create(client, doc)
    edit(client, {"scheduling": {"nodeSelector": {"zone": None}}}, 2)
    lws = children(client)["LeaderWorkerSet/k3-tp8-dspark-g0"]
    assert lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["nodeSelector"] == {
        "pool": "gb300"
    }


def test_cross_node_tp_on_an_undeclared_vllm_disables_custom_all_reduce_with_a_warning(
    client: Client,
) -> None:
    doc = sample()
    doc["spec"]["image"] = "registry.example/vllm:own"  # no kimi-operator.io/vllm-version
    create(client, doc)
    events = wait_for(
        lambda: [e for e in client.list(EVENT, NS) if e["reason"] == "CustomAllReduceDisabled"],
        what="the CustomAllReduceDisabled event",
    )
    assert events[0]["type"] == "Warning"
    assert events[0]["involvedObject"]["name"] == NAME
    assert "vllm issue 52778" in events[0]["message"]
    assert "kimi-operator.io/vllm-version" in events[0]["message"]
    lws = children(client)["LeaderWorkerSet/k3-tp8-dspark-g0"]
    for role in ("leaderTemplate", "workerTemplate"):
        args = lws["spec"]["leaderWorkerTemplate"][role]["spec"]["containers"][0]["args"]
        assert "--disable-custom-all-reduce" in args


def test_cross_node_tp_on_vllm_0_33_keeps_custom_all_reduce_without_a_warning(
    client: Client,
) -> None:
    create(client, sample())  # the chart's serving image, vLLM 0.33.0 (waits for the status)
    lws = children(client)["LeaderWorkerSet/k3-tp8-dspark-g0"]
    for role in ("leaderTemplate", "workerTemplate"):
        args = lws["spec"]["leaderWorkerTemplate"][role]["spec"]["containers"][0]["args"]
        assert "--disable-custom-all-reduce" not in args
    reasons = {e["reason"] for e in client.list(EVENT, NS)}
    assert "CustomAllReduceDisabled" not in reasons
