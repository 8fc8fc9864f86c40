"""Scaling through the scale subresource, as `kubectl scale`, an HPA and KEDA do; the autoscaler
child; groups that wait for nodes (InsufficientCapacity). Against the embedded API server."""

import json
import random
import urllib.error
import urllib.request
from typing import Any

import pytest

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.kubelet import mark_ready, register_nodes, start_groups
from kimi_operator.embedded.scheduler import fleet
from kimi_operator.embedded.upstream import CHILD_KINDS
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import (
    COMPUTE_DOMAIN,
    HORIZONTAL_POD_AUTOSCALER,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    SCALED_OBJECT,
)
from kimi_operator.runner import OperatorThread
from tests.integration.conftest import metrics_of, resyncs
from tests.support.cluster import condition, sample, status_of, wait_for

NS, NAME = "inference", "k3-tp16-latency"
SCALE = KIMI_DEPLOYMENT.item(NS, NAME) + "/scale"
AUTOSCALING = {"minReplicas": 1, "maxReplicas": 4, "target": {"waitingRequestsPerGroup": 8}}
WITH_KEDA = [*CHILD_KINDS, "ScaledObject"]
pytestmark = pytest.mark.usefixtures("operator")


def send(api: EmbeddedApiServer, method: str, body: Any = None, *, merge: bool = False) -> Any:
    """A request to the scale subresource, as the cluster admin; an HTTP error's code and body."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/merge-patch+json" if merge else "application/json"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(api.url + SCALE, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        return {"code": error.code, **json.loads(error.read())}


def scale_to(api: EmbeddedApiServer, replicas: int) -> Any:
    """What an autoscaler does (the HPA's and KEDA's scale client): read the scale, write it back
    with the replicas it wants, and on a 409 (the operator wrote the status in between: the same
    resourceVersion) read it again and retry; the scale written."""
    for _ in range(10):
        scale = send(api, "GET")
        written = send(api, "PUT", {**scale, "spec": {"replicas": replicas}})
        if written.get("code") != 409:
            assert written["spec"]["replicas"] == replicas, written
            return written
    raise AssertionError(f"scale to {replicas}: 10 conflicts in a row")


def groups(client: Client) -> list[str]:
    return sorted(g["metadata"]["name"] for g in client.list(LEADER_WORKER_SET, NS))


def create(client: Client, **spec: Any) -> None:
    doc = sample(NAME)
    doc["spec"] |= spec
    client.create(KIMI_DEPLOYMENT, doc)
    wait_for(lambda: status_of(client, NS, NAME).get("observedGeneration"), what="first status")


def wait_groups(client: Client, count: int) -> dict[str, Any]:
    """Wait until `count` groups exist, are ready and the status says so; that status."""
    names = [f"{NAME}-g{i}" for i in range(count)]
    wait_for(lambda: groups(client) == names or None, what=f"{count} groups")
    mark_ready(client, NS)
    status: dict[str, Any] = wait_for(
        lambda: ((s := status_of(client, NS, NAME)).get("readyReplicas") == count and s) or None,
        what=f"{count} groups ready",
    )
    return status


def test_kubectl_scale_through_the_subresource(api: EmbeddedApiServer, client: Client) -> None:
    create(client)
    wait_groups(client, 1)
    scale = send(api, "GET")
    selector = (
        f"app.kubernetes.io/name=kimi-k3,app.kubernetes.io/instance={NAME},"
        "leaderworkerset.sigs.k8s.io/worker-index=0"
    )
    assert (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
    assert scale["spec"] == {"replicas": 1}
    assert scale["status"] == {"replicas": 1, "selector": selector}
    # kubectl scale kimi/k3-tp16-latency --replicas 2: a merge patch of the Scale.
    scaled = send(api, "PATCH", {"spec": {"replicas": 2}}, merge=True)
    assert scaled["spec"] == {"replicas": 2}
    kd = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert kd is not None
    assert (kd["spec"]["replicas"], kd["metadata"]["generation"]) == (2, 2)
    status = wait_groups(client, 2)
    assert (status["replicas"], status["gpus"], status["selector"]) == (2, 32, selector)
    assert condition(status, "Ready")["status"] == "True"
    # The CRD's schema holds on the subresource too; a stale resourceVersion conflicts.
    too_many = send(api, "PATCH", {"spec": {"replicas": 65}}, merge=True)
    assert too_many["code"] == 422
    assert "spec.replicas" in too_many["message"]
    negative = send(api, "PATCH", {"spec": {"replicas": -1}}, merge=True)
    assert negative["code"] == 422
    stale = send(api, "PUT", {**scale, "spec": {"replicas": 3}})
    assert stale["code"] == 409
    assert send(api, "GET")["spec"] == {"replicas": 2}


def test_an_hpa_scales_up_and_down_and_the_operator_follows(
    api: EmbeddedApiServer, client: Client, operator: OperatorThread
) -> None:
    """What the HPA controller does each sync: GET the Scale, PUT it with new replicas."""
    create(client, replicas=1, autoscaling=AUTOSCALING)
    status = wait_groups(client, 1)
    hpa = client.get(HORIZONTAL_POD_AUTOSCALER, NS, NAME)
    assert hpa is not None
    assert hpa["spec"]["maxReplicas"] == 4
    assert status["autoscaler"] == f"HorizontalPodAutoscaler/{NAME}"
    degraded = condition(status, "Degraded")
    assert degraded["reason"] == "ScaledObjectNotInstalled"
    assert "prometheus-adapter" in degraded["message"]
    for replicas in (2, 3, 1):
        scale_to(api, replicas)
        wait_groups(client, replicas)
    # The operator never writes spec.replicas back: it stays what the autoscaler wrote over
    # resyncs.
    resyncs(metrics_of(operator), 3)
    kd = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert kd is not None
    assert kd["spec"]["replicas"] == 1
    assert groups(client) == [f"{NAME}-g0"]


@pytest.mark.parametrize("installed", [WITH_KEDA], indirect=True)
def test_keda_gets_a_scaled_object_and_keda_scales_the_same_way(
    api: EmbeddedApiServer, client: Client
) -> None:
    create(client, replicas=2, autoscaling=AUTOSCALING)
    status = wait_groups(client, 2)
    assert status["autoscaler"] == f"ScaledObject/{NAME}"
    assert condition(status, "Degraded")["status"] == "False"
    scaled = client.get(SCALED_OBJECT, NS, NAME)
    assert scaled is not None
    assert scaled["spec"]["scaleTargetRef"] == {
        "apiVersion": "kimi-operator.io/v1alpha1",
        "kind": "KimiDeployment",
        "name": NAME,
    }
    assert client.get(HORIZONTAL_POD_AUTOSCALER, NS, NAME) is None
    scale_to(api, 3)
    wait_groups(client, 3)
    # Autoscaling turned off: the autoscaler child is pruned, the replicas stay.
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"autoscaling": None}})
    wait_for(lambda: client.get(SCALED_OBJECT, NS, NAME) is None or None, what="pruned")
    wait_for(lambda: status_of(client, NS, NAME).get("observedGeneration") == 3 or None)
    assert status_of(client, NS, NAME)["autoscaler"] == ""
    assert groups(client) == [f"{NAME}-g{i}" for i in range(3)]


def test_a_group_without_nodes_says_insufficient_capacity(
    api: EmbeddedApiServer, client: Client, operator: OperatorThread
) -> None:
    """Five free trays: the first 16-GPU group takes four, the second finds one."""
    register_nodes(client, fleet(1)[:5])
    create(client, replicas=1, autoscaling=AUTOSCALING)
    wait_for(lambda: groups(client) or None, what="the first group")
    assert start_groups(client, NS, random.Random(0)) == []
    wait_for(lambda: status_of(client, NS, NAME).get("readyReplicas") == 1 or None, what="ready")
    scale_to(api, 2)  # the autoscaler adds a group
    wait_for(lambda: len(groups(client)) == 2 or None, what="the second group")
    pending = start_groups(client, NS, random.Random(0))
    assert pending == [f"{NAME}-g1-0-{i}" for i in range(1, 4)]

    expected = (
        f"1 of 2 TP groups ready; pod {NAME}-g1-0-1 (and 2 more pods) cannot be scheduled: "
        "0/5 nodes are available: 5 Insufficient nvidia.com/gpu. preemption: 0/5 nodes are "
        "available: 5 No preemption victims found for incoming pod."
    )

    def capacity() -> dict[str, Any] | None:
        """Progressing once a resync saw every pod of the new group (they are created one by
        one, and a reconcile may list them half-way)."""
        progressing = condition(status_of(client, NS, NAME), "Progressing")
        return progressing if progressing["message"] == expected else None

    progressing = wait_for(capacity, 15, "InsufficientCapacity")
    assert (progressing["status"], progressing["reason"]) == ("True", "InsufficientCapacity")
    # What the autoscaler reads stays put over resyncs: the groups that exist, one selector.
    seen = []
    for _ in range(4):
        seen.append(send(api, "GET")["status"])
        resyncs(metrics_of(operator), 1)
    assert all(s == seen[0] for s in seen)
    assert seen[0]["replicas"] == 2
    assert condition(status_of(client, NS, NAME), "Progressing")["reason"] == "InsufficientCapacity"


def test_the_scale_subresource_only_where_a_crd_declares_it(
    api: EmbeddedApiServer, client: Client
) -> None:
    create(client, replicas=1)
    domain = wait_for(lambda: client.list(COMPUTE_DOMAIN, NS) or None, what="a ComputeDomain")
    path = COMPUTE_DOMAIN.item(NS, domain[0]["metadata"]["name"]) + "/scale"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(api.url + path, timeout=10)
    assert refused.value.code == 404
    # A JSON patch of the Scale, as well as a merge patch.
    body = json.dumps([{"op": "replace", "path": "/spec/replicas", "value": 2}]).encode()
    headers = {"Content-Type": "application/json-patch+json", "Accept": "application/json"}
    request = urllib.request.Request(api.url + SCALE, data=body, method="PATCH", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read())["spec"] == {"replicas": 2}
    wait_groups(client, 2)
