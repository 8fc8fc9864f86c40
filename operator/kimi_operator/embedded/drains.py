"""Node drains under the operator, for tests/integration/reliability (`make test-reliability`) and
benchmarks/reliability.py: deployments Ready on Node objects, then nodes under their groups
cordoned and drained as `kubectl drain` does (each pod of the node evicted through pods/eviction,
a refused eviction, 429, retried until the pod is gone), one node at a time or two at once, and
uncordoned once drained (docs/maintenance.md). Then a rack's maintenance (`run_rack_drain`): two
deployments' groups on one rack, one drain of every node of the rack, the operator SIGKILLed and
restarted in the middle.

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
from kimi_operator.builders.placement import CLIQUE_LABEL
from kimi_operator.embedded.audit import Audit, audit
from kimi_operator.embedded.disruption import sync_budgets
from kimi_operator.embedded.kubelet import ready_domains, register_nodes
from kimi_operator.embedded.leaderworkerset import play_groups
from kimi_operator.embedded.processes import wait
from kimi_operator.embedded.reliability import create_all, deployment, settled
from kimi_operator.embedded.scheduler import LWS_NAME_LABEL, fleet, labels_of
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, LEADER_WORKER_SET, NODE, POD
from kimi_operator.rollout import group_of, serving

NAMESPACE = "drains"  # its own: the controllers played here touch no other scenario's groups
REPLICAS = {"drain-a": 1, "drain-b": 2, "drain-c": 2}
RACK_NAMESPACE = "rack-drain"
RACK_REPLICAS = {"rack-a": 2, "rack-b": 2}


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
    """The controllers of a GPU cluster played over `namespace`, one `step` at a time; after each
    step (from `counting` on) every deployment of `replicas` has its serving groups and its
    groups counted, and each start of a group recorded: a leader pod made, for a new group or
    for one made again (a restart)."""

    def __init__(
        self,
        client: Client,
        seed: int,
        namespace: str = NAMESPACE,
        replicas: Mapping[str, int] = REPLICAS,
    ) -> None:
        self.client, self.rng = client, random.Random(seed)
        self.namespace, self.replicas = namespace, dict(replicas)
        self.counting = False
        self.fewest_serving: dict[str, int] = {}  # deployment -> fewest seen
        self.most_groups: dict[str, int] = {}  # deployment -> most at once
        self.leaders: set[str] = set()  # the uids of every leader pod seen
        self.started: list[str] = []  # from `counting` on: the group of each leader pod made

    def step(self) -> None:
        play_groups(self.client, self.rng, self.namespace)
        ready_domains(self.client, self.namespace)
        sync_budgets(self.client)
        for pod in self.client.list(POD, self.namespace):
            meta = pod["metadata"]
            if meta["labels"].get(LWS_WORKER_INDEX_LABEL) != "0" or meta["uid"] in self.leaders:
                continue
            self.leaders.add(meta["uid"])
            if self.counting:
                self.started.append(meta["labels"][LWS_NAME_LABEL])
        if not self.counting:
            return
        groups = self.client.list(LEADER_WORKER_SET, self.namespace)
        for name in self.replicas:
            mine = [g for g in groups if group_of(name, g["metadata"]["name"])]
            up = sum(serving(g) for g in mine)
            self.fewest_serving[name] = min(self.fewest_serving.get(name, up), up)
            self.most_groups[name] = max(self.most_groups.get(name, 0), len(mine))

    def until(self, probe: Callable[[], Any], what: str, timeout_s: float) -> Any:
        def stepped() -> Any:
            self.step()
            return probe()

        return wait(stepped, timeout_s, what, 0.1, not_yet=(ApiError,))

    def nodes_of(self, group: str, *, leader: bool) -> list[str]:
        """The nodes of the group's leader, or of its workers."""
        return sorted(
            str(p["spec"].get("nodeName"))
            for p in self.client.list(POD, self.namespace)
            if p["metadata"]["labels"].get(LWS_NAME_LABEL) == group
            and (p["metadata"]["labels"].get(LWS_WORKER_INDEX_LABEL) == "0") == leader
        )


def _quiet(client: Client, namespace: str = NAMESPACE) -> Audit | None:
    """The audit once the cluster is as planned, every status says so and no evacuation is
    left in `namespace` (none in a status, every group serving); None before."""
    found = settled(client)
    if found is None:
        return None
    for kd in client.list(KIMI_DEPLOYMENT, namespace):
        if (kd.get("status") or {}).get("evacuations"):
            return None
    if not all(serving(g) for g in client.list(LEADER_WORKER_SET, namespace)):
        return None
    return found


def _cordon(client: Client, node: str, *, unschedulable: bool) -> None:
    client.patch(NODE, "", node, {"spec": {"unschedulable": unschedulable}})


def drain(
    cluster: Cluster,
    url: str,
    nodes: Sequence[str],
    timeout_s: float,
    report: DrainReport,
    *,
    meanwhile: Callable[[], None] = lambda: None,
) -> list[Drain]:
    """`kubectl drain` of `nodes` at once: each cordoned, then every pod on it evicted, refused
    evictions retried after every step of the cluster, until no pod is left on any; then each
    uncordoned. An eviction granted to a pod whose group serves is recorded in `report`;
    `meanwhile` is called after each round of evictions (what else happens during the drain)."""
    client, started, namespace = cluster.client, time.monotonic(), cluster.namespace
    pods = client.list(POD, namespace)
    drains = [
        Drain(node, sorted({p["metadata"]["labels"][LWS_NAME_LABEL] for p in pods if _on(p, node)}))
        for node in nodes
    ]
    for node in nodes:
        _cordon(client, node, unschedulable=True)

    def drained() -> bool:
        groups = {g["metadata"]["name"]: g for g in client.list(LEADER_WORKER_SET, namespace)}
        pods = client.list(POD, namespace)
        for one in drains:
            left = [p for p in pods if _on(p, one.node)]
            if one.took_s is None and not left:
                one.took_s = round(time.monotonic() - started, 1)
            for pod in left:
                name = pod["metadata"]["name"]
                group = groups.get(pod["metadata"]["labels"][LWS_NAME_LABEL])
                was_serving = group is not None and serving(group)
                code = evict(url, namespace, name)
                if code == 201:
                    one.evicted += 1
                    if was_serving:
                        report.serving_evicted.append(name)
                elif code == 429:
                    one.refused += 1
                elif code != 404:  # gone meanwhile: nothing to evict
                    raise AssertionError(f"the eviction of {name} answered {code}")
        meanwhile()
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
    cluster = Cluster(client, seed)
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
    report.failures, report.last_failures = _failures(client, NAMESPACE)
    cluster.counting = False
    report.fewest_serving, report.most_groups = cluster.fewest_serving, cluster.most_groups
    gone = _deleted(cluster, timeout_s)
    report.duplicates += len(gone.duplicates)
    report.orphans += len(gone.orphans)
    report.wall_s = round(time.monotonic() - began, 1)
    return report


def _failures(client: Client, namespace: str) -> tuple[dict[str, int], list[str]]:
    """Each group's restarts as its deployment's status records them, and the groups with a
    last failure."""
    restarts, failed = {}, []
    for kd in client.list(KIMI_DEPLOYMENT, namespace):
        for record in (kd.get("status") or {}).get("groups") or []:
            restarts[record["name"]] = record.get("restarts", 0)
            if record.get("lastFailure"):
                failed.append(record["name"])
    return restarts, failed


def _deleted(cluster: Cluster, timeout_s: float) -> Audit:
    """The deployments deleted, their groups collected: the audit of what is left."""
    client = cluster.client
    for name in cluster.replicas:
        client.delete(KIMI_DEPLOYMENT, cluster.namespace, name)
    cluster.until(
        lambda: not client.list(LEADER_WORKER_SET, cluster.namespace),
        "the groups collected",
        timeout_s,
    )
    return audit(client)


@dataclass
class RackDrainReport:
    """A rack's maintenance under two deployments, with the operator restarted mid-drain."""

    groups: list[str] = field(default_factory=list)  # the groups on the rack when cordoned
    nodes: int = 0  # the rack's nodes, drained at once
    evicted: int = 0  # evictions granted (201)
    refused: int = 0  # evictions refused by a budget (429), retried
    took_s: float = 0.0  # from the cordon until no pod was left on the rack
    restarted_after_s: float | None = None  # from the cordon until the operator was SIGKILLed
    started_before_restart: int = 0  # groups started by the operator killed
    serving_evicted: list[str] = field(default_factory=list)  # pods of a serving group evicted
    fewest_serving: dict[str, int] = field(default_factory=dict)  # deployment -> fewest seen
    started: list[str] = field(default_factory=list)  # groups started until the uncordon
    started_after_uncordon: list[str] = field(default_factory=list)  # any, made or restarted
    failures: dict[str, int] = field(default_factory=dict)  # group -> restarts recorded
    last_failures: list[str] = field(default_factory=list)  # groups with a lastFailure
    duplicates: int = 0
    orphans: int = 0
    wall_s: float = 0.0


def run_rack_drain(
    client: Client,
    url: str,
    *,
    restart: Callable[[], None],
    timeout_s: float,
    settle_s: float,
    seed: int = 0,
) -> RackDrainReport:
    """Two deployments (RACK_REPLICAS) Ready on one rack (the other cordoned meanwhile, then
    fit again: room for the replacements); then one `kubectl drain` of every node of that rack,
    `restart` (SIGKILL, start again) called once the first replacement has started, and every
    node uncordoned once none has a pod left. Then the evacuations' end, `settle_s` of the
    cluster and the operator's resyncs, in which nothing may start, and the deployments
    deleted."""
    report, began = RackDrainReport(), time.monotonic()
    cluster = Cluster(client, seed, RACK_NAMESPACE, RACK_REPLICAS)
    nodes = fleet(2)
    have = {n["metadata"]["name"] for n in client.list(NODE)}
    register_nodes(client, [n for n in nodes if n["metadata"]["name"] not in have])
    rack = [n["metadata"]["name"] for n in nodes if labels_of(n)[CLIQUE_LABEL] == "clique-0"]
    spare = [n["metadata"]["name"] for n in nodes if n["metadata"]["name"] not in rack]
    for node in spare:
        _cordon(client, node, unschedulable=True)
    create_all(
        client, (deployment(n, RACK_NAMESPACE, replicas=r) for n, r in RACK_REPLICAS.items())
    )
    quiet = lambda: _quiet(client, RACK_NAMESPACE)  # noqa: E731
    cluster.until(quiet, "the deployments Ready on one rack", timeout_s)
    for node in spare:
        _cordon(client, node, unschedulable=False)
    cluster.until(quiet, "the other rack fit", timeout_s)
    on_rack = [p for p in client.list(POD, RACK_NAMESPACE) if p["spec"].get("nodeName") in rack]
    report.groups = sorted({p["metadata"]["labels"][LWS_NAME_LABEL] for p in on_rack})
    cluster.counting = True
    cordoned = time.monotonic()

    def meanwhile() -> None:
        if report.restarted_after_s is None and cluster.started:
            report.restarted_after_s = round(time.monotonic() - cordoned, 1)
            report.started_before_restart = len(cluster.started)
            restart()

    evictions = DrainReport()
    drains = drain(cluster, url, rack, timeout_s, evictions, meanwhile=meanwhile)
    report.nodes, report.serving_evicted = len(drains), evictions.serving_evicted
    report.evicted = sum(d.evicted for d in drains)
    report.refused = sum(d.refused for d in drains)
    report.took_s = max(d.took_s or 0.0 for d in drains)
    found: Audit = cluster.until(quiet, "the evacuations over", timeout_s)
    report.started = list(cluster.started)
    settled_at = time.monotonic()
    while time.monotonic() - settled_at < settle_s:
        cluster.step()
        time.sleep(0.1)
    report.started_after_uncordon = cluster.started[len(report.started) :]
    report.failures, report.last_failures = _failures(client, RACK_NAMESPACE)
    cluster.counting = False
    report.fewest_serving = cluster.fewest_serving
    gone = _deleted(cluster, timeout_s)
    report.duplicates = len(found.duplicates) + len(gone.duplicates)
    report.orphans = len(found.orphans) + len(gone.orphans)
    report.wall_s = round(time.monotonic() - began, 1)
    return report


def rack_summary(report: RackDrainReport) -> str:
    """The rack drain's figures, a line."""
    restarted = "never" if report.restarted_after_s is None else f"{report.restarted_after_s} s"
    return (
        f"{report.nodes} nodes under {len(report.groups)} groups of {len(RACK_REPLICAS)} "
        f"deployments drained in {report.took_s:.1f} s (operator SIGKILLed and restarted after "
        f"{restarted}, {report.started_before_restart} groups started), evictions granted "
        f"{report.evicted} / refused {report.refused}, pods of a serving group evicted "
        f"{len(report.serving_evicted)}, fewest serving groups {report.fewest_serving}, groups "
        f"started {len(report.started)} (after uncordon {len(report.started_after_uncordon)}), "
        f"failures {sum(report.failures.values())}, duplicates {report.duplicates}, orphans "
        f"{report.orphans}, {report.wall_s:.0f} s"
    )


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
