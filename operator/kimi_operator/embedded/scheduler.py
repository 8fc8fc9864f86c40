"""A small model of kube-scheduler for the serving pods, to check where TP groups land.

No kube-scheduler runs on these machines. The model reads Node objects (the sandbox's are in the
API: embedded.kubelet builds a Scheduler from them and the bound pods at each pass) and applies
the filters that decide a serving pod's node, in kube-scheduler's order, each node failing at the
first (NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit, InterPodAffinity):
- a cordoned node (`spec.unschedulable`) takes no pod that does not tolerate the
  `node.kubernetes.io/unschedulable:NoSchedule` taint;
- a node's `NoSchedule` and `NoExecute` taints each need a toleration of the pod;
- the pod's `nodeSelector` and required node affinity (NodeAffinity): every label of the one,
  and some term of the other, its `matchExpressions` on the node's labels and `matchFields` on
  its name (`Gt` and `Lt` are not modelled);
- GPUs: a pod fits a node with that many of its allocatable GPUs free;
- required pod affinity: some pod matching each term runs in the candidate's topology domain, except
  that a pod whose terms match no pod anywhere but that matches them itself may go anywhere (how the
  first pod of a group is placed);
- required pod anti-affinity, both ways: no pod matching the incoming pod's terms in the domain,
  and no pod there whose own terms match the incoming pod.
A serving pod fills a tray, so every feasible node scores the same but for the pod's preferred
node affinity (NodeAffinity's score: the weights of the terms a node matches); kube-scheduler
then picks one of the best at random, and so does the model. Why a pod stays Pending is worded
as kube-scheduler's FailedScheduling message, preemption's part included. LeaderWorkerSet's
`exclusive-topology` annotation is expanded as its pod webhook does (`SetExclusiveAffinities` in
kubernetes-sigs/lws pkg/webhooks/pod_webhook.go): a group-key label, affinity to that key and
anti-affinity to every other key in the topology.
"""

import copy
import hashlib
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kimi_operator.builders.placement import CLIQUE_LABEL, EXCLUSIVE_TOPOLOGY, PREFERRED, REQUIRED

GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
# The labels LeaderWorkerSet's pod webhook gives each pod of a group.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
GPU = "nvidia.com/gpu"
TRAY_GPUS = 4
RACK_TRAYS = 18
# The taint a cordoned node's pods must tolerate (NodeUnschedulable), the effects that keep a
# pod off a node (TaintToleration), and the reasons of each filter, as kube-scheduler words them.
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
REPELLING = frozenset({"NoSchedule", "NoExecute"})
CORDONED = "node(s) were unschedulable"
NO_GPUS = f"Insufficient {GPU}"
AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
# What preemption says of each node: past the filters that preemption cannot help
# (UnschedulableAndUnresolvable), or with no lower-priority pod to evict.
UNRESOLVABLE = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"

Node = dict[str, Any]  # a Node object as the API holds it


def node_object(name: str, labels: Mapping[str, str]) -> Node:
    """A GB300 tray as its kubelet and the NVIDIA device plugin register it: Ready, 4 GPUs."""
    gpus = {GPU: str(TRAY_GPUS)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {},
        "status": {
            "capacity": gpus,
            "allocatable": dict(gpus),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "nodeInfo": {"kubeletVersion": "v1.36.0"},
        },
    }


def fleet(racks: int) -> list[Node]:
    """GB300 NVL72 racks: 18 trays of 4 GPUs, each rack one NVLink clique."""
    return [
        node_object(f"rack{r}-tray{t}", {CLIQUE_LABEL: f"clique-{r}"})
        for r in range(racks)
        for t in range(RACK_TRAYS)
    ]


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = obj["metadata"].get("labels") or {}
    return labels


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Toleration.ToleratesTaint: the effect (empty: any), the key (empty: any), then the
    value (`Equal`, the default) or nothing more (`Exists`)."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return operator == "Exists"


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    return any(_tolerates(toleration, taint) for toleration in tolerations)


def untolerated(
    tolerations: Sequence[Mapping[str, Any]], node: Node, effects: frozenset[str] = REPELLING
) -> dict[str, Any] | None:
    """The node's first taint of `effects` the tolerations do not tolerate."""
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in effects and not tolerates(tolerations, taint):
            return dict(taint)
    return None


@dataclass
class Pod:
    name: str
    group: str  # the LeaderWorkerSet it belongs to
    labels: dict[str, str]
    spec: dict[str, Any]

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> "Pod":
        """A Pod object as the model sees it."""
        labels = labels_of(obj)
        return cls(obj["metadata"]["name"], labels.get(LWS_NAME_LABEL, ""), labels, obj["spec"])

    @property
    def gpus(self) -> int:
        return sum(
            int(((c.get("resources") or {}).get("limits") or {}).get(GPU, 0))
            for c in self.spec.get("containers", [])
        )

    @property
    def tolerations(self) -> list[dict[str, Any]]:
        return list(self.spec.get("tolerations") or [])

    def terms(self, kind: str) -> list[dict[str, Any]]:
        terms: list[dict[str, Any]] = self.spec.get("affinity", {}).get(kind, {}).get(REQUIRED, [])
        return terms


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


def _matches(term: Mapping[str, Any], node: Node) -> bool:
    """A node selector term (an empty one matches no node) against `node`."""
    fields = {"metadata.name": node["metadata"]["name"]}
    return bool(
        (term.get("matchExpressions") or term.get("matchFields"))
        and selects({"matchExpressions": term.get("matchExpressions", [])}, labels_of(node))
        and selects({"matchExpressions": term.get("matchFields", [])}, fields)
    )


def _node_affinity(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    return found


def node_affinity_ok(spec: Mapping[str, Any], node: Node) -> bool:
    """The NodeAffinity filter: the pod's nodeSelector, and some required node affinity term,
    match `node`."""
    labels = labels_of(node)
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = _node_affinity(spec).get(REQUIRED)
    return not required or any(_matches(t, node) for t in required.get("nodeSelectorTerms", []))


def node_preference(spec: Mapping[str, Any], node: Node) -> int:
    """NodeAffinity's score: the weights of the preferred node affinity terms `node` matches."""
    terms = _node_affinity(spec).get(PREFERRED) or []
    return sum(int(t["weight"]) for t in terms if _matches(t["preference"], node))


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
        labels = {
            **source["metadata"]["labels"],
            GROUP_KEY_LABEL: key,
            LWS_NAME_LABEL: name,
            LWS_GROUP_INDEX_LABEL: "0",
            LWS_WORKER_INDEX_LABEL: str(index),
        }
        spec = copy.deepcopy(source["spec"])
        if exclusive:
            _exclusive_terms(spec, key, exclusive)
        # LWS's names: the leader is its StatefulSet's pod 0, the workers their own set's.
        pod_name = f"{name}-0" if index == 0 else f"{name}-0-{index}"
        pods.append(Pod(pod_name, name, labels, spec))
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
    """The model over `nodes` (Node objects) with the pods `placed` on them (pod, node name)."""

    nodes: list[Node]
    rng: random.Random
    placed: list[tuple[Pod, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._by_name = {node["metadata"]["name"]: node for node in self.nodes}
        self._free = {
            name: int(((node.get("status") or {}).get("allocatable") or {}).get(GPU, 0))
            for name, node in self._by_name.items()
        }
        for pod, where in self.placed:
            self._free[where] -= pod.gpus

    def label(self, node_name: str, key: str) -> str | None:
        return labels_of(self._by_name[node_name]).get(key)

    def _near(self, node: Node, key: str) -> Iterator[Pod]:
        """Pods running in `node`'s domain of topology `key`."""
        domain = labels_of(node).get(key)
        if domain is None:
            return
        for pod, where in self.placed:
            if self.label(where, key) == domain:
                yield pod

    def _affinity_ok(self, pod: Pod, node: Node) -> bool:
        for term in pod.terms("podAffinity"):
            key, selector = term["topologyKey"], term["labelSelector"]
            if key not in labels_of(node):
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
                domain = labels_of(node).get(term["topologyKey"])
                same = domain is not None and self.label(where, term["topologyKey"]) == domain
                if same and selects(term["labelSelector"], pod.labels):
                    return False
        return True

    def _failure(self, pod: Pod, node: Node) -> str | None:
        """The reason of the first filter `node` fails for `pod`; None: it fits."""
        if (node.get("spec") or {}).get("unschedulable") and not tolerates(
            pod.tolerations, UNSCHEDULABLE_TAINT
        ):
            return CORDONED
        taint = untolerated(pod.tolerations, node)
        if taint is not None:
            return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
        if not node_affinity_ok(pod.spec, node):
            return NODE_AFFINITY
        if self._free[node["metadata"]["name"]] < pod.gpus:
            return NO_GPUS
        if not self._affinity_ok(pod, node):
            return AFFINITY
        if not self._anti_affinity_ok(pod, node):
            return ANTI_AFFINITY
        return None

    def unschedulable_message(self, pod: Pod) -> str:
        """Why no node takes `pod`, worded as kube-scheduler's FailedScheduling message (the
        PodScheduled condition's, FitError's): each node counted under the first filter it
        fails, the counts sorted as text; then preemption's, which cannot help past the
        cordon, the taints and pod affinity."""
        failures = [self._failure(pod, node) or "" for node in self.nodes]
        resolvable = {NO_GPUS, ANTI_AFFINITY}
        preemption = [NO_VICTIMS if why in resolvable else UNRESOLVABLE for why in failures]
        total = len(self.nodes)
        return (
            f"0/{total} nodes are available: {_histogram(failures)}. preemption: "
            f"0/{total} nodes are available: {_histogram(preemption)}."
        )

    def schedule(self, pod: Pod) -> Node | None:
        """Bind `pod` to a random feasible node of the best preference; None: it stays
        Pending."""
        feasible = [n for n in self.nodes if self._failure(pod, n) is None]
        if not feasible:
            return None
        best = max(node_preference(pod.spec, n) for n in feasible)
        node = self.rng.choice([n for n in feasible if node_preference(pod.spec, n) == best])
        self._free[node["metadata"]["name"]] -= pod.gpus
        self.placed.append((pod, node["metadata"]["name"]))
        return node


def _histogram(reasons: Sequence[str]) -> str:
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    return ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items()))


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
            labels_of(node)[CLIQUE_LABEL] for node in bound if node is not None
        }
    used = {scheduler.label(where, CLIQUE_LABEL) for _, where in scheduler.placed}
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
