"""Node drains under the operator, for tests/integration/reliability (`make test-reliability`) and
benchmarks/reliability.py: deployments Ready on Node objects, then nodes under their groups
cordoned and drained as `kubectl drain` does (each pod of the node evicted through pods/eviction,
a refused eviction, 429, retried until the pod is gone), one node at a time or two at once, and
uncordoned once drained (docs/maintenance.md).

The cluster's controllers are played between the scenario's steps as the sandbox plays them: the
LeaderWorkerSet controller and kubelets (embedded.leaderworkerset: pods owned by their group,
placed by the scheduler model off cordoned nodes), the DRA driver (embedded.kubelet) and the
disruption controller (embedded.disruption). After every step the serving groups of each
deployment are counted: never fewer than one (the replacement serves before a group leaves)
and never more than `spec.replicas + 1` (one surge group). Each round ends once the
evacuations are over and the cluster is exactly as planned (embedded.audit); at the end no
failure may be recorded, the deployments are deleted, and no child may be left.
"""

import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kimi_operator.builders.meta import LWS_WORKER_INDEX_LABEL
from kimi_operator.embedded.audit import Audit, audit
from kimi_operator.embedded.disruption import sync_budgets
from kimi_operator.embedded.kubelet import ready_domains, register_nodes
from kimi_operator.embedded.leaderworkerset import play_groups
from kimi_operator.embedded.processes import wait
from kimi_operator.embedded.reliability import create_all, deployment, settled
from kimi_operator.embedded.scheduler import LWS_NAME_LABEL, fleet
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, LEADER_WORKER_SET, NODE, POD
from kimi_operator.rollout import group_of, serving

NAMESPACE = "drains"  # its own: the controllers played here touch no other scenario's groups
REPLICAS = {"drain-a": 1, "drain-b": 2, "drain-c": 2}


def evict(url: str, namespace: str, pod: str) -> int:
    """The HTTP status of an Eviction of `pod` POSTed as `kubectl drain` does (without
    --disable-eviction) to the API server at `url`."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod}}
    path = POD.item(namespace, pod) + "/eviction"
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url + path, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


@dataclass
class Drain:
    """One node's `kubectl drain`."""

    node: str
    groups: list[str]  # the groups with a pod on it when cordoned
    evicted: int = 0  # evictions granted (201)
    refused: int = 0  # evictions refused by a budget (429), retried
    took_s: float | None = None  # from the cordon until no pod was left on it


@dataclass
class DrainReport:
    rounds: list[list[Drain]] = field(default_factory=list)
    serving_evicted: list[str] = field(default_factory=list)  # pods of a serving group evicted
    fewest_serving: dict[str, int] = field(default_factory=dict)  # deployment -> fewest seen
    most_groups: dict[str, int] = field(default_factory=dict)  # deployment -> most at once
    failures: dict[str, int] = field(default_factory=dict)  # group -> restarts recorded
    last_failures: list[str] = field(default_factory=list)  # groups with a lastFailure
    duplicates: int = 0
    orphans: int = 0
    wall_s: float = 0.0

    @property
    def drains(self) -> list[Drain]:
        return [drain for round_ in self.rounds for drain in round_]


class Cluster:
    """The controllers of a GPU cluster played over NAMESPACE, one `step` at a time; after each
    step every deployment's groups are counted into `report` (from `counting` on)."""

    def __init__(self, client: Client, report: DrainReport, seed: int) -> None:
        self.client, self.report, self.rng = client, report, random.Random(seed)
        self.counting = False

    def step(self) -> None:
        play_groups(self.client, self.rng, NAMESPACE)
        ready_domains(self.client, NAMESPACE)
        sync_budgets(self.client)
        if self.counting:
            groups = self.client.list(LEADER_WORKER_SET, NAMESPACE)
            for name in REPLICAS:
                mine = [g for g in groups if group_of(name, g["metadata"]["name"])]
                up = sum(serving(g) for g in mine)
                report = self.report
                report.fewest_serving[name] = min(report.fewest_serving.get(name, up), up)
                report.most_groups[name] = max(report.most_groups.get(name, 0), len(mine))

    def until(self, probe: Callable[[], Any], what: str, timeout_s: float) -> Any:
        def stepped() -> Any:
            self.step()
            return probe()

        return wait(stepped, timeout_s, what, 0.1, not_yet=(ApiError,))

    def nodes_of(self, group: str, *, leader: bool) -> list[str]:
        """The nodes of the group's leader, or of its workers."""
        return sorted(
            str(p["spec"].get("nodeName"))
            for p in self.client.list(POD, NAMESPACE)
            if p["metadata"]["labels"].get(LWS_NAME_LABEL) == group
            and (p["metadata"]["labels"].get(LWS_WORKER_INDEX_LABEL) == "0") == leader
        )


def _quiet(client: Client) -> Audit | None:
    """The audit once the cluster is as planned, every status says so and no evacuation is
    left (none in a status, every group serving); None before."""
    found = settled(client)
    if found is None:
        return None
    for kd in client.list(KIMI_DEPLOYMENT, NAMESPACE):
        if (kd.get("status") or {}).get("evacuations"):
            return None
    if not all(serving(g) for g in client.list(LEADER_WORKER_SET, NAMESPACE)):
        return None
    return found


def _cordon(client: Client, node: str, *, unschedulable: bool) -> None:
    client.patch(NODE, "", node, {"spec": {"unschedulable": unschedulable}})


def drain(
    cluster: Cluster, url: str, nodes: Sequence[str], timeout_s: float, report: DrainReport
) -> list[Drain]:
    """`kubectl drain` of `nodes` at once: each cordoned, then every pod on it evicted, refused
    evictions retried after every step of the cluster, until no pod is left on any; then each
    uncordoned. An eviction granted to a pod whose group serves is recorded in `report`."""
    client, started = cluster.client, time.monotonic()
    pods = client.list(POD, NAMESPACE)
    drains = [
        Drain(node, sorted({p["metadata"]["labels"][LWS_NAME_LABEL] for p in pods if _on(p, node)}))
        for node in nodes
    ]
    for node in nodes:
        _cordon(client, node, unschedulable=True)

    def drained() -> bool:
        groups = {g["metadata"]["name"]: g for g in client.list(LEADER_WORKER_SET, NAMESPACE)}
        pods = client.list(POD, NAMESPACE)
        for one in drains:
            left = [p for p in pods if _on(p, one.node)]
            if one.took_s is None and not left:
                one.took_s = round(time.monotonic() - started, 1)
            for pod in left:
                name = pod["metadata"]["name"]
                group = groups.get(pod["metadata"]["labels"][LWS_NAME_LABEL])
                was_serving = group is not None and serving(group)
                code = evict(url, NAMESPACE, name)
                if code == 201:
                    one.evicted += 1
                    if was_serving:
                        report.serving_evicted.append(name)
                elif code == 429:
                    one.refused += 1
                elif code != 404:  # gone meanwhile: nothing to evict
                    raise AssertionError(f"the eviction of {name} answered {code}")
        return all(one.took_s is not None for one in drains)

    cluster.until(drained, f"{', '.join(nodes)} drained", timeout_s)
    for node in nodes:
        _cordon(client, node, unschedulable=False)
    return drains


def _on(pod: Mapping[str, Any], node: str) -> bool:
    return bool(pod["spec"].get("nodeName") == node)


def run_drains(
    client: Client, url: str, *, timeout_s: float, seed: int = 0, racks: int = 2
) -> DrainReport:
    """Three deployments (REPLICAS) Ready on `racks` racks of Node objects; then three rounds of
    drains, each followed by its uncordons and the evacuations' end: the leader's node of
    drain-a's only group; a worker's node of drain-b-g0 and the leader's node of drain-c-g1 at
    once; the leader's node of drain-a-g1, the first round's replacement (a member since, and
    evacuated as any: its replacement takes drain-a-g0's name again, free once that node was
    uncordoned). Then the failures recorded, and the deployments deleted."""
    report, began = DrainReport(), time.monotonic()
    cluster = Cluster(client, report, seed)
    register_nodes(client, fleet(racks))
    docs = (deployment(name, NAMESPACE, replicas=n) for name, n in REPLICAS.items())
    create_all(client, docs)
    cluster.until(lambda: _quiet(client), "the deployments Ready", timeout_s)
    cluster.counting = True
    rounds: list[Callable[[], list[str]]] = [
        lambda: cluster.nodes_of("drain-a-g0", leader=True),
        lambda: [
            cluster.nodes_of("drain-b-g0", leader=False)[0],
            *cluster.nodes_of("drain-c-g1", leader=True),
        ],
        lambda: cluster.nodes_of("drain-a-g1", leader=True),  # the first round's replacement
    ]
    for nodes in rounds:
        report.rounds.append(drain(cluster, url, nodes(), timeout_s, report))
        found: Audit = cluster.until(lambda: _quiet(client), "the evacuations over", timeout_s)
        report.duplicates += len(found.duplicates)
        report.orphans += len(found.orphans)
    for kd in client.list(KIMI_DEPLOYMENT, NAMESPACE):
        for record in (kd.get("status") or {}).get("groups") or []:
            report.failures[record["name"]] = record.get("restarts", 0)
            if record.get("lastFailure"):
                report.last_failures.append(record["name"])
    cluster.counting = False
    for name in REPLICAS:
        client.delete(KIMI_DEPLOYMENT, NAMESPACE, name)
    cluster.until(
        lambda: not client.list(LEADER_WORKER_SET, NAMESPACE), "the groups collected", timeout_s
    )
    gone = audit(client)
    report.duplicates += len(gone.duplicates)
    report.orphans += len(gone.orphans)
    report.wall_s = round(time.monotonic() - began, 1)
    return report


def summary(report: DrainReport) -> str:
    """The figures, a line."""
    drains = report.drains
    took = [d.took_s or 0.0 for d in drains]
    return (
        f"{len(drains)} nodes drained in {len(report.rounds)} rounds (longest {max(took):.1f} s), "
        f"evictions granted {sum(d.evicted for d in drains)} / refused "
        f"{sum(d.refused for d in drains)}, pods of a serving group evicted "
        f"{len(report.serving_evicted)}, fewest serving groups {report.fewest_serving}, most "
        f"groups {report.most_groups}, failures {sum(report.failures.values())}, duplicates "
        f"{report.duplicates}, orphans {report.orphans}, {report.wall_s:.0f} s"
    )
