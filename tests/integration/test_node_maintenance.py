"""Node maintenance on the embedded API server, at the API: the eviction subresource spends a
PodDisruptionBudget as kube-apiserver's EvictionREST does, the disruption controller's stand-in
keeps the budget's status true, and the scheduler model reads the Node objects (cordons, taints).
The same with the real kubectl: tests/clients/test_node_maintenance.py."""

import datetime
import json
import random
import urllib.error
import urllib.request
from typing import Any

from kimi_operator.api.validation import check_document
from kimi_operator.builders.serving import pod_disruption_budget
from kimi_operator.embedded.disruption import sync_budgets
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.kubelet import register_nodes, start_groups
from kimi_operator.embedded.scheduler import fleet
from kimi_operator.embedded.taints import evict_untolerated
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import LEADER_WORKER_SET, NODE, POD, POD_DISRUPTION_BUDGET
from tests.support.cluster import sample
from tests.support.trays import NS, one_tray_group

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."


def _pod(name: str, *, ready: bool = True, phase: str = "Running") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _run(client: Client, *pods: dict[str, Any]) -> None:
    for pod in pods:
        client.create(POD, pod)
        status = {"status": pod["status"]}
        client.patch(POD, NS, pod["metadata"]["name"], status, subresource="status")


def _budget(client: Client, name: str = "web", **spec: Any) -> None:
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
    }
    client.create(POD_DISRUPTION_BUDGET, body)


def _status(client: Client, name: str = "web") -> dict[str, Any]:
    pdb = client.get(POD_DISRUPTION_BUDGET, NS, name)
    assert pdb is not None
    return dict(pdb.get("status") or {})


def _evict(api: EmbeddedApiServer, pod: str, **options: Any) -> tuple[int, dict[str, Any]]:
    """(HTTP status, Status answer) of an Eviction POSTed as `kubectl drain` does."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": NS},
        **({"deleteOptions": options} if options else {}),
    }
    url = api.url + POD.item(NS, pod) + "/eviction"
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_an_eviction_without_a_budget_deletes_the_pod(
    api: EmbeddedApiServer, client: Client
) -> None:
    held = _pod("held")
    held["metadata"]["finalizers"] = ["example.com/hold"]  # to read what the eviction wrote
    _run(client, _pod("a"), held)
    assert _evict(api, "a") == (201, SUCCESS)
    assert client.get(POD, NS, "a") is None
    assert _evict(api, "held") == (201, SUCCESS)
    terminating = client.get(POD, NS, "held")
    assert terminating is not None
    assert terminating["metadata"]["deletionTimestamp"]
    disrupted = terminating["status"]["conditions"][-1]
    assert (disrupted["type"], disrupted["reason"], disrupted["message"]) == (
        "DisruptionTarget",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )
    assert _evict(api, "gone")[0] == 404


def test_a_budget_is_spent_then_refuses_with_429(api: EmbeddedApiServer, client: Client) -> None:
    _run(client, _pod("a"), _pod("b"), _pod("c"))
    _budget(client, minAvailable=2)
    assert sync_budgets(client, T0) == [f"{NS}/web"]
    status = _status(client)
    assert {k: status[k] for k in ("expectedPods", "currentHealthy", "desiredHealthy")} == {
        "expectedPods": 3,
        "currentHealthy": 3,
        "desiredHealthy": 2,
    }
    assert status["disruptionsAllowed"] == 1
    (allowed,) = status["conditions"]
    assert (allowed["type"], allowed["status"], allowed["reason"]) == (
        "DisruptionAllowed",
        "True",
        "SufficientPods",
    )

    assert _evict(api, "a") == (201, SUCCESS)
    assert client.get(POD, NS, "a") is None
    status = _status(client)
    assert status["disruptionsAllowed"] == 0
    assert list(status["disruptedPods"]) == ["a"]
    assert status["conditions"][0]["reason"] == "InsufficientPods"

    code, body = _evict(api, "b")
    assert (code, body["reason"], body["message"]) == (429, "TooManyRequests", VIOLATES)
    assert body["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget web needs 2 healthy pods and has 3 currently",
        }
    ]
    assert client.get(POD, NS, "b") is not None

    # The controller sees the pod gone: its entry dropped, two healthy of two desired.
    sync_budgets(client, T0)
    status = _status(client)
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (2, 0)
    assert "disruptedPods" not in status


def test_a_budget_not_observed_at_its_generation_refuses(
    api: EmbeddedApiServer, client: Client
) -> None:
    _run(client, _pod("a"))
    _budget(client, maxUnavailable=1)
    code, body = _evict(api, "a")
    assert (code, body["details"]["retryAfterSeconds"]) == (429, 10)
    (cause,) = body["details"]["causes"]
    assert cause["message"] == "The disruption budget web is still being processed by the server."


def test_unready_and_pending_pods_are_evicted_as_upstream_says(
    api: EmbeddedApiServer, client: Client
) -> None:
    """A pod not Ready goes without spending a healthy budget; a Pending one skips budgets."""
    _run(
        client,
        _pod("a"),
        _pod("b"),
        _pod("sick", ready=False),
        _pod("new", ready=False, phase="Pending"),
    )
    _budget(client, minAvailable=2)
    sync_budgets(client, T0)
    assert _status(client)["disruptionsAllowed"] == 0
    assert _evict(api, "sick") == (201, SUCCESS)
    assert _evict(api, "new") == (201, SUCCESS)
    assert _evict(api, "a")[0] == 429
    assert {p["metadata"]["name"] for p in client.list(POD, NS)} == {"a", "b"}
    # Once the application is short of healthy pods, an unready one is held too.
    _run(client, _pod("sick", ready=False))
    client.delete(POD, NS, "b")
    sync_budgets(client, T0)
    assert _evict(api, "sick")[0] == 429
    # Unless the budget says AlwaysAllow.
    client.patch(
        POD_DISRUPTION_BUDGET, NS, "web", {"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}}
    )
    sync_budgets(client, T0)
    assert _evict(api, "sick") == (201, SUCCESS)


def test_the_operators_budget_keeps_a_leader_whose_probe_missed_once(
    api: EmbeddedApiServer, client: Client
) -> None:
    """#56: with evacuation on, the deployment's budget refuses to evict a serving group's
    leader whose readiness probe failed once while kubectl drain retries (it serves again a
    second later); only once every pod is healthy may a pod not Ready go."""
    budget = pod_disruption_budget(_deployment(), evacuating=True)
    budget["metadata"] = {"name": "web", "namespace": NS}
    budget["spec"]["selector"] = {"matchLabels": {"app": "web"}}
    client.create(POD_DISRUPTION_BUDGET, budget)
    _run(client, _pod("g0-leader", ready=False), _pod("g0-worker"), _pod("g1-leader"))
    sync_budgets(client, T0)
    assert _evict(api, "g0-leader")[0] == 429
    assert client.get(POD, NS, "g0-leader") is not None
    # As the budget was before (#56's finding): the flap let the drain take the group.
    client.patch(
        POD_DISRUPTION_BUDGET, NS, "web", {"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}}
    )
    sync_budgets(client, T0)
    assert _evict(api, "g0-leader") == (201, SUCCESS)


def _deployment() -> Any:
    report = check_document(sample())
    assert report.deployment is not None
    return report.deployment


def test_two_budgets_over_a_pod_are_a_500(api: EmbeddedApiServer, client: Client) -> None:
    _run(client, _pod("a"))
    _budget(client, "one", minAvailable=0)
    _budget(client, "two", minAvailable=0)
    sync_budgets(client, T0)
    code, body = _evict(api, "a")
    assert (code, body["message"]) == (
        500,
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does "
        "not support.",
    )
    assert client.get(POD, NS, "a") is not None


def test_an_eviction_keeps_the_delete_preconditions(api: EmbeddedApiServer, client: Client) -> None:
    _run(client, _pod("a"))
    assert _evict(api, "a", preconditions={"uid": "not-its-uid"})[0] == 409
    assert client.get(POD, NS, "a") is not None


def test_a_disrupted_pod_is_forgotten_after_the_deletion_timeout(client: Client) -> None:
    """An eviction granted whose pod is still there after two minutes counts as healthy again."""
    _run(client, _pod("a"), _pod("b"))
    _budget(client, maxUnavailable="50%")
    # The pods' controller: what the budget's percentage is of.
    assert sync_budgets(client, T0) == [f"{NS}/web"]
    reason = _status(client)["conditions"][0]
    assert (reason["reason"], reason["message"]) == (
        "SyncFailed",
        'found no controller ref for pod "a"',
    )
    spec = {"minAvailable": 1, "maxUnavailable": None}
    client.patch(POD_DISRUPTION_BUDGET, NS, "web", {"spec": spec})
    sync_budgets(client, T0)
    status = _status(client)
    assert (status["desiredHealthy"], status["disruptionsAllowed"]) == (1, 1)
    now = datetime.datetime.now(datetime.UTC)
    disrupted = {"disruptedPods": {"a": now.strftime("%Y-%m-%dT%H:%M:%SZ")}}
    client.patch(POD_DISRUPTION_BUDGET, NS, "web", {"status": disrupted}, subresource="status")
    sync_budgets(client, now)
    assert _status(client)["currentHealthy"] == 1
    sync_budgets(client, now + datetime.timedelta(minutes=2, seconds=1))
    assert _status(client)["currentHealthy"] == 2


def test_the_scheduler_model_reads_cordons_and_taints(client: Client) -> None:
    """Four trays: one cordoned, one tainted NoSchedule; a group of four pods finds two."""
    trays = fleet(1)[:4]
    register_nodes(client, trays)
    client.patch(NODE, "", "rack0-tray0", {"spec": {"unschedulable": True}})
    taint = {"key": "nvidia.com/gpu-health", "value": "xid", "effect": "NoSchedule"}
    client.patch(NODE, "", "rack0-tray1", {"spec": {"taints": [taint]}})
    lws = one_tray_group("g0", size=4)
    client.create(LEADER_WORKER_SET, lws)
    pending = start_groups(client, NS, random.Random(0))
    assert pending == ["g0-0-2", "g0-0-3"]
    bound = {p["spec"].get("nodeName") for p in client.list(POD, NS)} - {None}
    assert bound == {"rack0-tray2", "rack0-tray3"}
    waiting = client.get(POD, NS, "g0-0-3")
    assert waiting is not None
    (scheduled,) = waiting["status"]["conditions"]
    assert scheduled["message"] == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu-health: xid}, "
        "1 node(s) were unschedulable, 2 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are "
        "available: 2 No preemption victims found for incoming pod, 2 Preemption is not helpful "
        "for scheduling."
    )


def test_a_no_execute_taint_deletes_the_pods_that_do_not_tolerate_it(client: Client) -> None:
    register_nodes(client, fleet(1)[:1])
    held, tolerant, plain = _pod("held"), _pod("tolerant"), _pod("plain")
    held["metadata"]["finalizers"] = ["example.com/hold"]  # to read what was written
    taint = {"key": "nvidia.com/gpu-health", "value": "xid-79", "effect": "NoExecute"}
    tolerant["spec"]["tolerations"] = [{"key": taint["key"], "operator": "Exists"}]
    for pod in (held, tolerant, plain):
        pod["spec"]["nodeName"] = "rack0-tray0"
    _run(client, held, tolerant, plain)
    assert evict_untolerated(client) == []
    client.patch(NODE, "", "rack0-tray0", {"spec": {"taints": [taint]}})
    assert evict_untolerated(client) == [f"{NS}/held", f"{NS}/plain"]
    assert {p["metadata"]["name"] for p in client.list(POD, NS)} == {"held", "tolerant"}
    terminating = client.get(POD, NS, "held")
    assert terminating is not None
    target = terminating["status"]["conditions"][-1]
    assert (target["type"], target["reason"]) == ("DisruptionTarget", "DeletionByTaintManager")
    assert evict_untolerated(client) == []  # terminating: not deleted twice
