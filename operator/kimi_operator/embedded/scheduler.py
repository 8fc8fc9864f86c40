"""A small model of kube-scheduler for the serving pods, to check where TP groups land.

No kube-scheduler runs on these machines. The model applies the filters that decide a serving
pod's node, as kube-scheduler's NodeResourcesFit and InterPodAffinity plugins do:
- GPUs: a pod fits a node with that many GPUs free;
- required pod affinity: some pod matching each term runs in the candidate's topology domain, except
  that a pod whose terms match no pod anywhere but that matches them itself may go anywhere (how the
  first pod of a group is placed);
- required pod anti-affinity, both ways: no pod matching the incoming pod's terms in the domain,
  and no pod there whose own terms match the incoming pod.
A serving pod fills a tray, so every feasible node scores the same; kube-scheduler then picks one
at random, and so does the model. LeaderWorkerSet's `exclusive-topology` annotation is expanded
as its pod webhook does (`SetExclusiveAffinities` in kubernetes-sigs/lws
pkg/webhooks/pod_webhook.go): a group-key label, affinity to that key and anti-affinity to
every other key in the topology.
"""

import copy
import hashlib
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kimi_operator.builders.placement import CLIQUE_LABEL, EXCLUSIVE_TOPOLOGY

GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
TRAY_GPUS = 4
RACK_TRAYS = 18


@dataclass
class Node:
    name: str
    labels: dict[str, str]
    gpus_free: int = TRAY_GPUS


@dataclass
class Pod:
    name: str
    group: str  # the LeaderWorkerSet it belongs to
    labels: dict[str, str]
    spec: dict[str, Any]

    @property
    def gpus(self) -> int:
        container = self.spec["containers"][0]
        return int(container["resources"]["limits"]["nvidia.com/gpu"])

    def terms(self, kind: str) -> list[dict[str, Any]]:
        terms: list[dict[str, Any]] = self.spec.get("affinity", {}).get(kind, {}).get(REQUIRED, [])
        return terms


def fleet(racks: int) -> list[Node]:
    """GB300 NVL72 racks: 18 trays of 4 GPUs, each rack one NVLink clique."""
    return [
        Node(f"rack{r}-tray{t}", {CLIQUE_LABEL: f"clique-{r}"})
        for r in range(racks)
        for t in range(RACK_TRAYS)
    ]


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) against `labels`."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for requirement in selector.get("matchExpressions", []):
        key, op, values = requirement["key"], requirement["operator"], requirement.get("values")
        present = key in labels
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and present and labels[key] in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def lws_pods(lws: Mapping[str, Any]) -> list[Pod]:
    """The pods a LeaderWorkerSet of one replica creates, after LWS's pod webhook."""
    name = lws["metadata"]["name"]
    template = lws["spec"]["leaderWorkerTemplate"]
    size = template["size"]
    exclusive = lws["metadata"].get("annotations", {}).get(EXCLUSIVE_TOPOLOGY)
    key = hashlib.sha1(f"{lws['metadata']['namespace']}/{name}-0".encode()).hexdigest()
    pods = []
    for index in range(size):
        source = template["leaderTemplate" if index == 0 else "workerTemplate"]
        labels = {**source["metadata"]["labels"], GROUP_KEY_LABEL: key}
        spec = copy.deepcopy(source["spec"])
        if exclusive:
            _exclusive_terms(spec, key, exclusive)
        pods.append(Pod(f"{name}-0-{index}", name, labels, spec))
    return pods


def _exclusive_terms(spec: dict[str, Any], key: str, topology: str) -> None:
    affinity = spec.setdefault("affinity", {})
    same = {"matchExpressions": [{"key": GROUP_KEY_LABEL, "operator": "In", "values": [key]}]}
    others = {
        "matchExpressions": [
            {"key": GROUP_KEY_LABEL, "operator": "Exists"},
            {"key": GROUP_KEY_LABEL, "operator": "NotIn", "values": [key]},
        ]
    }
    for kind, selector in (("podAffinity", same), ("podAntiAffinity", others)):
        terms = affinity.setdefault(kind, {}).setdefault(REQUIRED, [])
        terms.append({"labelSelector": selector, "topologyKey": topology})


@dataclass
class Scheduler:
    nodes: list[Node]
    rng: random.Random
    placed: list[tuple[Pod, Node]] = field(default_factory=list)

    def _near(self, node: Node, key: str) -> Iterator[Pod]:
        """Pods running in `node`'s domain of topology `key`."""
        if key not in node.labels:
            return
        for pod, where in self.placed:
            if where.labels.get(key) == node.labels[key]:
                yield pod

    def _affinity_ok(self, pod: Pod, node: Node) -> bool:
        for term in pod.terms("podAffinity"):
            key, selector = term["topologyKey"], term["labelSelector"]
            if key not in node.labels:
                return False
            if any(selects(selector, other.labels) for other in self._near(node, key)):
                continue
            anywhere = any(selects(selector, other.labels) for other, _ in self.placed)
            if anywhere or not selects(selector, pod.labels):
                return False
        return True

    def _anti_affinity_ok(self, pod: Pod, node: Node) -> bool:
        for term in pod.terms("podAntiAffinity"):
            near = self._near(node, term["topologyKey"])
            if any(selects(term["labelSelector"], other.labels) for other in near):
                return False
        for other, where in self.placed:
            for term in other.terms("podAntiAffinity"):
                key = term["topologyKey"]
                same = key in node.labels and where.labels.get(key) == node.labels[key]
                if same and selects(term["labelSelector"], pod.labels):
                    return False
        return True

    def unschedulable_message(self, pod: Pod) -> str:
        """Why no node takes `pod`, worded as kube-scheduler's FailedScheduling message (the
        PodScheduled condition's): each node counted under the first filter it fails."""
        gpus = sum(1 for n in self.nodes if n.gpus_free < pod.gpus)
        affinity = sum(
            1 for n in self.nodes if n.gpus_free >= pod.gpus and not self._affinity_ok(pod, n)
        )
        anti = len(self.nodes) - gpus - affinity
        reasons = [
            f"{count} {why}"
            for count, why in (
                (gpus, "Insufficient nvidia.com/gpu"),
                (affinity, "node(s) didn't match pod affinity rules"),
                (anti, "node(s) didn't match pod anti-affinity rules"),
            )
            if count
        ]
        return (
            f"0/{len(self.nodes)} nodes are available: {', '.join(reasons)}. preemption: "
            f"0/{len(self.nodes)} nodes are available: {len(self.nodes)} No preemption victims "
            "found for incoming pod."
        )

    def schedule(self, pod: Pod) -> Node | None:
        """Bind `pod` to a random feasible node; None: it stays Pending."""
        feasible = [
            n
            for n in self.nodes
            if n.gpus_free >= pod.gpus
            and self._affinity_ok(pod, n)
            and self._anti_affinity_ok(pod, n)
        ]
        if not feasible:
            return None
        node = self.rng.choice(feasible)
        node.gpus_free -= pod.gpus
        self.placed.append((pod, node))
        return node


@dataclass(frozen=True)
class Placement:
    groups: int
    placed: int  # groups with every pod bound
    waiting: int  # groups with a pod left Pending
    racks_used: int  # cliques running any pod
    straddling: int  # groups with pods in more than one clique


def place(groups: Sequence[Mapping[str, Any]], racks: int, seed: int) -> Placement:
    """Schedule the pods of LeaderWorkerSets `groups`, in order, on a fleet of `racks` racks."""
    scheduler = Scheduler(fleet(racks), random.Random(seed))
    cliques: dict[str, set[str]] = {}
    waiting = 0
    for lws in groups:
        bound = [scheduler.schedule(pod) for pod in lws_pods(lws)]
        waiting += any(node is None for node in bound)
        cliques[lws["metadata"]["name"]] = {
            node.labels[CLIQUE_LABEL] for node in bound if node is not None
        }
    used = {where.labels[CLIQUE_LABEL] for _, where in scheduler.placed}
    return Placement(
        groups=len(groups),
        placed=len(groups) - waiting,
        waiting=waiting,
        racks_used=len(used),
        straddling=sum(1 for found in cliques.values() if len(found) > 1),
    )


def perfect_racks(trays_per_group: Sequence[int]) -> int:
    """The fewest racks that hold groups of these tray counts (2 or 4 trays each): with sizes
    2 and 4 in racks of 18, k racks suffice exactly when at most 4k groups have 4 trays and
    the trays add up to at most 18k."""
    fours = sum(1 for t in trays_per_group if t == 4)
    total = sum(trays_per_group)
    if any(t not in (2, 4) for t in trays_per_group):
        raise ValueError(f"groups of 2 or 4 trays only (got {sorted(set(trays_per_group))})")
    racks = 0
    while fours > 4 * racks or total > RACK_TRAYS * racks:
        racks += 1
    return racks
