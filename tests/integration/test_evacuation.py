"""Evacuation on the embedded API server (docs/maintenance.md): the operator, as the chart's
ServiceAccount, watches Node objects made through the API; the sandbox's stand-in for
LeaderWorkerSet's controller and the kubelets (embedded.leaderworkerset) binds each group's pods
with the scheduler model (which honours cordons and taints) and marks the group Ready. A cordon,
a taint and a node condition bring a replacement up first and never leave the deployment without
a serving group; no room for a replacement keeps a cordoned group serving and says so, a critical
condition lets the group go without one; an operator restarted in the middle carries on, making
nothing twice."""

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kimi_operator.builders.meta import LWS_WORKER_INDEX_LABEL
from kimi_operator.embedded.disruption import sync_budgets
from kimi_operator.embedded.drains import evict
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.kubelet import ready_domains, register_nodes
from kimi_operator.embedded.leaderworkerset import play_groups
from kimi_operator.embedded.processes import metric_total
from kimi_operator.embedded.scheduler import LWS_NAME_LABEL, fleet
from kimi_operator.evacuation import EVACUATION_ANNOTATION
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.merge import owned_by
from kimi_operator.k8s.resources import (
    EVENT,
    LEADER_WORKER_SET,
    NODE,
    POD,
)
from kimi_operator.rollout import serving
from kimi_operator.runner import OperatorThread, RunConfig
from tests.integration.conftest import RESYNC_S, metrics_of, resyncs
from tests.support.cluster import NAME, NS, condition, create, sample, status_of, wait_for

TIMEOUT_S = 60.0
G0, G1 = f"{NAME}-g0", f"{NAME}-g1"


class Trays:
    """The cluster's controllers over NS, one `step` at a time: LeaderWorkerSet's controller and
    the kubelets (embedded.leaderworkerset: pods bound by the scheduler model, which honours
    cordons and taints), the ComputeDomain driver and the disruption controller; the embedded
    API server's garbage collector deletes a group's pods with it. Records every group's uids
    and the fewest groups serving seen after any step."""

    def __init__(self, client: Client, nodes: list[dict[str, Any]]) -> None:
        self.client, self.rng = client, random.Random(7)
        register_nodes(client, nodes)
        self.uids: dict[str, set[str]] = {}
        self.fewest_serving: int | None = None

    def step(self) -> None:
        play_groups(self.client, self.rng, NS)
        ready_domains(self.client, NS)
        sync_budgets(self.client)  # the disruption controller
        groups = self.client.list(LEADER_WORKER_SET, NS)
        for group in groups:
            self.uids.setdefault(group["metadata"]["name"], set()).add(group["metadata"]["uid"])
        now = [g for g in groups if serving(g)]
        if self.fewest_serving is None or len(now) < self.fewest_serving:
            self.fewest_serving = len(now)

    def until(self, probe: Callable[[], Any], what: str) -> Any:
        def stepped() -> Any:
            self.step()
            return probe()

        return wait_for(stepped, TIMEOUT_S, what=what)

    def leader_node(self, group: str) -> str:
        (leader,) = [
            p
            for p in self.client.list(POD, NS)
            if p["metadata"]["labels"].get(LWS_NAME_LABEL) == group
            and p["metadata"]["labels"].get(LWS_WORKER_INDEX_LABEL) == "0"
        ]
        return str(leader["spec"]["nodeName"])

    def pods_on(self, node: str) -> list[str]:
        pods = self.client.list(POD, NS)
        return [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") == node]

    def nodes_of(self, group: str) -> set[str]:
        return {
            str(p["spec"].get("nodeName", ""))
            for p in self.client.list(POD, NS)
            if p["metadata"]["labels"].get(LWS_NAME_LABEL) == group
        }


def _operator(api: EmbeddedApiServer, token: str) -> OperatorThread:
    return OperatorThread(
        RunConfig(server=api.url, token=token, resync_interval_s=RESYNC_S, workers=4)
    )


@pytest.fixture
def running(api: EmbeddedApiServer, token: str) -> Iterator[OperatorThread]:
    with _operator(api, token) as op:
        yield op


def _serving(trays: Trays, client: Client) -> None:
    """A one-group deployment, Ready on the trays."""
    doc = sample()
    doc["spec"]["replicas"] = 1
    create(client, doc)
    trays.until(lambda: status_of(client, NS, NAME).get("readyReplicas") == 1 or None, "Ready")
    trays.fewest_serving = None  # counted from here


def _group(client: Client, name: str) -> dict[str, Any] | None:
    return client.get(LEADER_WORKER_SET, NS, name)


def _events(client: Client, reason: str) -> list[dict[str, Any]]:
    return [e for e in client.list(EVENT, NS) if e.get("reason") == reason]


def _cordon(client: Client, node: str) -> None:
    client.patch(NODE, "", node, {"spec": {"unschedulable": True}})


def _taint(client: Client, node: str) -> None:
    taint = {"key": "nvidia.com/gpu-xid-error", "value": "true", "effect": "NoSchedule"}
    client.patch(NODE, "", node, {"spec": {"taints": [taint]}})


def _uncordon(client: Client, node: str) -> None:
    client.patch(NODE, "", node, {"spec": {"unschedulable": False}})


def _untaint(client: Client, node: str) -> None:
    client.patch(NODE, "", node, {"spec": {"taints": []}})


def _condition(kind: str, status: str = "True") -> Callable[[Client, str], None]:
    def set_it(client: Client, node: str) -> None:
        found = client.get(NODE, "", node)
        assert found is not None
        others = [c for c in found["status"]["conditions"] if c["type"] != kind]
        conditions = [*others, {"type": kind, "status": status}]
        client.patch(NODE, "", node, {"status": {"conditions": conditions}}, subresource="status")

    return set_it


def _evacuated(
    client: Client,
    trays: Trays,
    node: str,
    make_fit: Callable[[Client, str], None],
    metrics: Callable[[], str],
) -> None:
    """The evacuation ended: the group gone from the node, its replacement serving in its place,
    the evacuation still in the status while the node is unfit; once the node is fit, nothing
    restarts and nothing is made: the replacement is a member like any other, its record
    removed."""
    trays.until(
        lambda: (
            (
                _group(client, G0) is None
                and (g := _group(client, G1)) is not None
                and serving(g)
                and not trays.pods_on(node)
            )
            or None
        ),
        "the group gone from the node, its replacement serving in its place",
    )
    trays.step()
    assert _group(client, G0) is None  # still: the node is unfit
    (kept,) = status_of(client, NS, NAME)["evacuations"]
    assert (kept["name"], kept["replacement"]) == (G0, G1)
    make_fit(client, node)

    def settled() -> dict[str, Any] | None:
        group = _group(client, G1)
        marked = group is None or EVACUATION_ANNOTATION in group["metadata"]["annotations"]
        return None if marked or "evacuations" in status_of(client, NS, NAME) else group

    replacement = trays.until(settled, "the replacement's record removed once the node is fit")
    resyncs(metrics, 2)
    trays.step()
    assert _group(client, G0) is None  # not made again
    assert trays.uids[G1] == {replacement["metadata"]["uid"]}
    assert serving(replacement)


@pytest.mark.parametrize(
    ("make_unfit", "make_fit", "reason"),
    [
        (_cordon, _uncordon, "Cordoned"),
        (_taint, _untaint, "Tainted"),
        (_condition("GpuXidWatch"), _condition("GpuXidWatch", "False"), "NodeCondition"),
    ],
)
def test_an_unfit_node_is_left_replacement_first(
    client: Client,
    running: OperatorThread,
    make_unfit: Callable[[Client, str], None],
    make_fit: Callable[[Client, str], None],
    reason: str,
) -> None:
    trays = Trays(client, fleet(2))
    _serving(trays, client)
    first = _group(client, G0)
    assert first is not None
    node = trays.leader_node(G0)
    make_unfit(client, node)
    replacement = wait_for(lambda: _group(client, G1), TIMEOUT_S, what="the replacement")
    assert G0 in (replacement["metadata"]["annotations"][EVACUATION_ANNOTATION])
    # Not yet Ready: the group it replaces still serves, named in the status (written after
    # the replacement is made).
    status = wait_for(
        lambda: s if (s := status_of(client, NS, NAME)).get("evacuations") else None,
        TIMEOUT_S,
        what="the evacuation in the status",
    )
    before = _group(client, G0)
    assert before is not None
    assert serving(before)
    (evacuation,) = status["evacuations"]
    assert (evacuation["name"], evacuation["node"], evacuation["reason"]) == (G0, node, reason)
    assert evacuation["replacement"] == G1
    assert condition(status, "Progressing")["reason"] == "Evacuating"
    _evacuated(client, trays, node, make_fit, metrics_of(running))
    assert trays.fewest_serving == 1  # never fewer than one group serving
    assert len(trays.uids[G1]) == 1  # each made once, no more
    assert len(trays.uids[G0]) == 1  # one start in all: the replacement's
    final = wait_for(
        lambda: None if "evacuations" in (s := status_of(client, NS, NAME)) else s,
        TIMEOUT_S,
        what="the evacuation gone from the status",
    )
    assert condition(final, "Ready")["status"] == "True"
    assert all(g.get("restarts", 0) == 0 for g in final["groups"])  # no failure recorded
    metrics = metrics_of(running)()
    assert metric_total(metrics, "kimi_operator_evacuations_total", reason=reason) == 1
    assert _events(client, "EvacuationStarted")
    assert _events(client, "Evacuated")


def test_no_room_keeps_a_cordoned_group_serving_and_says_so(
    client: Client, running: OperatorThread
) -> None:
    trays = Trays(client, fleet(1)[:3])  # room for one group of two trays, not two
    _serving(trays, client)
    node = trays.leader_node(G0)
    _cordon(client, node)

    def no_room() -> dict[str, Any] | None:
        found = condition(status_of(client, NS, NAME), "Degraded")
        return found if found.get("reason") == "NoRoomForReplacement" else None

    degraded = trays.until(no_room, "NoRoomForReplacement")
    assert f"node {node} is cordoned" in degraded["message"]
    assert "cannot be scheduled" in degraded["message"]
    assert "kubectl drain --disable-eviction" in degraded["message"]
    first = _group(client, G0)
    resyncs(metrics_of(running), 3)
    trays.step()
    after = _group(client, G0)
    assert first is not None
    assert after is not None
    assert serving(after)
    assert after["metadata"]["uid"] == first["metadata"]["uid"]  # kept serving: not drained
    assert _events(client, "NoRoomForReplacement")
    # Uncordoned: nothing to leave any more; the replacement waiting for room goes.
    client.patch(NODE, "", node, {"spec": {"unschedulable": False}})
    trays.until(lambda: _group(client, G1) is None or None, "the replacement gone")
    assert trays.fewest_serving == 1
    wait_for(
        lambda: condition(status_of(client, NS, NAME), "Degraded")["status"] == "False" or None,
        TIMEOUT_S,
        what="Degraded cleared",
    )


@pytest.mark.usefixtures("running")
def test_a_critical_condition_without_room_lets_the_group_go(client: Client) -> None:
    trays = Trays(client, fleet(1)[:2])  # exactly one group's trays
    _serving(trays, client)
    first = _group(client, G0)
    assert first is not None
    _condition("GpuPcieWatch")(client, trays.leader_node(G0))
    trays.until(
        lambda: (
            (g := _group(client, G0)) is None
            or g["metadata"]["uid"] != first["metadata"]["uid"]
            or None
        ),
        "the failing group deleted without a replacement",
    )
    replacement = _group(client, G1)
    assert replacement is None or not serving(replacement)  # it never served


def test_an_operator_restarted_mid_evacuation_carries_on(
    api: EmbeddedApiServer, client: Client, token: str
) -> None:
    trays = Trays(client, fleet(2))
    with _operator(api, token) as first:
        _serving(trays, client)
        node = trays.leader_node(G0)
        _cordon(client, node)
        replacement = wait_for(lambda: _group(client, G1), TIMEOUT_S, what="the replacement")
        resyncs(metrics_of(first), 2)
    trays.step()  # the replacement's pods start while no operator runs
    with _operator(api, token) as second:
        _evacuated(client, trays, node, _uncordon, metrics_of(second))
        assert trays.fewest_serving == 1
        # The replacement made once (the one the first operator made), the group never again.
        assert trays.uids[G1] == {replacement["metadata"]["uid"]}
        assert len(trays.uids[G0]) == 1
        metrics = metrics_of(second)()
        assert metric_total(metrics, "kimi_operator_evacuations_total", reason="Cordoned") == 0
    assert sorted(trays.uids) == [G0, G1]  # nothing else made


def _drain(api: EmbeddedApiServer, client: Client, trays: Trays, nodes: set[str]) -> int:
    """`kubectl drain` of `nodes` (cordoned): evict every pod on them, retrying each refused
    one, until none is left; no pod of a serving group is evicted. The evictions refused."""
    refused = 0

    def drained() -> bool | None:
        nonlocal refused
        trays.step()
        on_nodes = [p for p in client.list(POD, NS) if p["spec"].get("nodeName") in nodes]
        for pod in on_nodes:
            code = evict(api.url, NS, pod["metadata"]["name"])
            assert code in (201, 429, 404), code
            labels = pod["metadata"]["labels"]
            group = _group(client, labels[LWS_NAME_LABEL])
            if code == 429:
                refused += 1
            elif group is not None and owned_by(pod, group["metadata"]["uid"]):
                assert not serving(group), "a pod of a serving group was evicted"
        return not on_nodes or None

    wait_for(drained, TIMEOUT_S, what=f"nodes {sorted(nodes)} drained")
    return refused


def test_a_plain_drain_waits_for_the_replacement_then_completes(
    api: EmbeddedApiServer, client: Client, running: OperatorThread
) -> None:
    """`kubectl drain`: cordon, then evict every pod of the node, retrying each refused one,
    until none is left. The PodDisruptionBudget refuses the serving group's pods (429) until the
    operator has replaced the group and deleted it; then the node is empty."""
    trays = Trays(client, fleet(2))
    _serving(trays, client)
    node = trays.leader_node(G0)
    _cordon(client, node)
    refused = _drain(api, client, trays, {node})
    assert refused > 0  # the budget held the serving group's pods for a while
    assert trays.fewest_serving == 1  # and the deployment never went without a group serving
    _evacuated(client, trays, node, _uncordon, metrics_of(running))
    final = status_of(client, NS, NAME)
    assert all(g.get("restarts", 0) == 0 for g in final["groups"])  # no failure recorded


def test_a_rack_drained_at_once_replaces_every_group_once(
    api: EmbeddedApiServer, client: Client, token: str
) -> None:
    """#56: one `kubectl drain` of both leaders' nodes of a two-group deployment (cordoned
    together, as a rack's maintenance does), the operator restarted in the middle: the drain
    completes, two groups serve throughout, each group is replaced once (two starts in all), no
    failure is recorded, and nothing restarts once the nodes are uncordoned."""
    trays = Trays(client, fleet(3))
    with _operator(api, token) as first:
        doc = sample()
        doc["spec"]["replicas"] = 2
        create(client, doc)
        trays.until(lambda: status_of(client, NS, NAME).get("readyReplicas") == 2 or None, "Ready")
        trays.fewest_serving = None
        nodes = {trays.leader_node(G0), trays.leader_node(G1)}
        for node in nodes:
            _cordon(client, node)
        trays.until(lambda: status_of(client, NS, NAME).get("evacuations") or None, "begun")
        resyncs(metrics_of(first), 1)
    with _operator(api, token) as second:
        refused = _drain(api, client, trays, nodes)
        assert refused > 0
        made = set(trays.uids) - {G0, G1}
        assert len(made) == 2, made  # one start per evacuated group
        assert trays.fewest_serving == 2
        for node in nodes:
            _uncordon(client, node)
        wait_for(
            lambda: "evacuations" not in status_of(client, NS, NAME) or None,
            TIMEOUT_S,
            what="the evacuations over",
        )
        resyncs(metrics_of(second), 2)
        trays.step()
    groups = {g["metadata"]["name"]: g for g in client.list(LEADER_WORKER_SET, NS)}
    assert set(groups) == made
    assert all(serving(g) and trays.uids[n] == {g["metadata"]["uid"]} for n, g in groups.items())
    final = status_of(client, NS, NAME)
    assert all(g.get("restarts", 0) == 0 for g in final["groups"])  # no failure recorded
