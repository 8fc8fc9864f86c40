"""A stateful model check of the operator's own decision code (#56; docs/architecture.md, "The
group set"): a hypothesis state machine interleaves what a GB300 fleet gets (cordons, node
conditions critical or not, `kubectl drain` of any set of nodes, a whole rack's included,
uncordons, operator restarts with the Node watch unlisted and the pods unread, template edits,
scaling, group crashes) with reconciles by `reconcile.decide` and `reconcile.status.outcome`,
each decision's writes applied to a small cluster: nodes of one pod each (a TP8 group is two
trays), LeaderWorkerSets whose pods the scheduler places on schedulable nodes (a node with only
a condition included, as kube-scheduler does), Ready one step later, and a PodDisruptionBudget
that refuses to evict a Ready pod (the operator's, with evacuation).

Invariants: after every reconcile, the operator took no serving group away (a drain, a
rewrite, a delete) leaving fewer than `replicas - maxUnavailable` serving, nor, for an
evacuation, fewer than `replicas` (a critical condition aside: its group may go without a
replacement); when the events stop, with room, every drain completes in bounded steps, and once
every node is fit again nothing more is made (one start per evacuated group), and the set is
exactly `replicas` serving groups, none draining, no evacuation recorded. Seeds are
hypothesis's: a failure prints the steps that replay it.
`KIMI_MODEL_CHECK=long` (make test-model) runs thousands of interleavings; `make test` a bounded
run."""

import copy
import functools
import json
import os
import time
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults
from kimi_operator.builders.meta import LWS_WORKER_INDEX_LABEL
from kimi_operator.builders.nodes import UnfitNodes
from kimi_operator.builders.placement import GROUP_LABEL
from kimi_operator.evacuation import EVACUATION_ANNOTATION
from kimi_operator.k8s.merge import Applied
from kimi_operator.reconcile.decide import UPSTREAM, Observed, decide
from kimi_operator.reconcile.status import outcome
from kimi_operator.rollout import TIME_FORMAT, draining_since, epoch, serving
from tests.support.cluster import sample

NAME = "k3-tp8-dspark"
NODES = [f"tray-{i}" for i in range(10)]  # room for five groups of two trays
RACK = NODES[:4]
LONG = os.environ.get("KIMI_MODEL_CHECK") == "long"
SETTLE_STEPS = 30
START = epoch("2026-12-01T12:00:00Z") or 0.0
CRASHES = 2
GROUP_SIZE = 2  # the sample's TP8: two trays  # spec.serving.restartBudget.failures is 3


SAMPLE = sample(NAME)


@functools.cache
def _validated(text: str) -> KimiDeployment:
    report = check_document(json.loads(text))
    assert report.deployment is not None, report.problems
    return report.deployment


def validated(doc: dict[str, Any]) -> KimiDeployment:
    """The deployment `doc` describes (validated once per spec and status)."""
    return _validated(json.dumps(doc, sort_keys=True))


class Fleet(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tick = 0
        self.spec: dict[str, Any] = {"replicas": 2, "decode": {"maxNumSeqs": 8}}
        self.status: dict[str, Any] = {}
        self.groups: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}  # by name
        self.cordoned: set[str] = set()
        self.conditions: dict[str, str] = {}  # node -> condition type
        self.draining: set[str] = set()  # nodes a kubectl drain empties
        self.unknown = False  # the operator restarted: its next reconcile knows nothing yet
        self.made: list[str] = []  # every LeaderWorkerSet created, in order
        self.uid = 0
        self.crashes = 0
        for _ in range(6):
            self.step()

    # The cluster.

    def now(self) -> str:
        return time.strftime(TIME_FORMAT, time.gmtime(START + self.tick))

    def body(self) -> dict[str, Any]:
        doc = copy.deepcopy(SAMPLE)
        doc["metadata"] |= {"uid": "uid-kd", "generation": 2}
        doc["spec"] |= copy.deepcopy(self.spec)
        doc["spec"]["serving"] = {**doc["spec"].get("serving", {}), "drainSeconds": 0}
        if self.status:
            doc["status"] = self.status
        return doc

    def schedule(self) -> None:
        """Each group's pods: made with its spec (again when it changes, or one went: the
        group is recreated), bound to free schedulable nodes (all or none: a group is placed
        whole), Ready a step after they are bound."""
        taken = {p["spec"].get("nodeName") for p in self.pods.values()} - {None}
        for name, group in sorted(self.groups.items()):
            mine = [p for p in self.pods.values() if p["metadata"]["labels"][GROUP_LABEL] == name]
            generation = group["metadata"]["generation"]
            size = (
                int(group["spec"]["leaderWorkerTemplate"]["size"])
                if group["spec"].get("replicas", 1)
                else 0
            )
            if len(mine) != size or any(p["generation"] != generation for p in mine):
                for pod in mine:
                    taken.discard(pod["spec"].get("nodeName"))
                    del self.pods[pod["metadata"]["name"]]
                mine = [self.pod(name, worker, generation) for worker in range(size)]
                self.pods |= {p["metadata"]["name"]: p for p in mine}
            if all(p["spec"].get("nodeName") for p in mine):
                continue
            free = [n for n in NODES if n not in taken and n not in self.cordoned]
            if len(free) >= len(mine):
                for pod, node in zip(mine, free, strict=False):
                    pod["spec"]["nodeName"] = node
                    pod["status"]["conditions"] = []
                    taken.add(node)

    def pod(self, group: str, worker: int, generation: int) -> dict[str, Any]:
        self.uid += 1
        labels = {GROUP_LABEL: group, LWS_WORKER_INDEX_LABEL: str(worker)}
        waiting = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        return {
            "metadata": {
                "name": f"{group}-0-{worker}",
                "uid": f"p{self.uid}",
                "labels": labels,
                "namespace": "inference",
                "resourceVersion": "1",
            },
            "spec": {},
            "status": {"podIP": "10.0.0.1", "conditions": [waiting]},
            "generation": generation,
            "ready": False,
        }

    def step(self) -> None:
        """The cluster moves: pods placed become Ready, drains evict, then a reconcile."""
        self.tick += 30
        for name in [n for n, p in self.pods.items() if p["metadata"].get("deletionTimestamp")]:
            del self.pods[name]  # evicted: gone once a reconcile could see them go
        for pod in self.pods.values():
            pod["ready"] = bool(pod["spec"].get("nodeName"))
        for name, group in self.groups.items():
            mine = [p for p in self.pods.values() if p["metadata"]["labels"][GROUP_LABEL] == name]
            ready = bool(mine) and all(p["ready"] for p in mine)
            group["status"] = {
                "readyReplicas": 1 if ready else 0,
                "observedGeneration": group["metadata"]["generation"],
            }
        self.evict()
        self.schedule()
        self.reconcile()
        self.schedule()

    def evict(self) -> None:
        """kubectl drain: every pod on a draining node evicted, but the Ready ones (the budget:
        maxUnavailable 0): marked as Kubernetes marks them (DisruptionTarget), gone next step,
        and their group recreated by LeaderWorkerSet."""
        disrupted = {"type": "DisruptionTarget", "status": "True"}
        for pod in self.pods.values():
            if pod["spec"].get("nodeName") in self.draining and not pod["ready"]:
                pod["metadata"]["deletionTimestamp"] = self.now()
                pod["status"]["conditions"].append({**disrupted, "reason": "EvictionByEvictionAPI"})

    def crash(self, group: str) -> None:
        for name in [
            n for n, p in self.pods.items() if p["metadata"]["labels"][GROUP_LABEL] == group
        ]:
            del self.pods[name]
        if group in self.groups:
            self.groups[group]["status"] = {"readyReplicas": 0, "observedGeneration": 0}

    def reconcile(self) -> None:
        doc = self.body()
        deployment = validated(doc)
        unfit = UnfitNodes()
        if not self.unknown:
            unfit.listed()
            for node in NODES:
                conditions = (
                    [{"type": self.conditions[node], "status": "True"}]
                    if node in self.conditions
                    else []
                )
                unfit.observe(
                    None,
                    {
                        "metadata": {"name": node},
                        "spec": {"unschedulable": node in self.cordoned},
                        "status": {"conditions": conditions},
                    },
                )
        groups = {n: copy.deepcopy(g) for n, g in self.groups.items()}
        seen = Observed(
            doc,
            deployment,
            dict.fromkeys(UPSTREAM, True),
            first=not self.status,
            prune=True,
            children={"LeaderWorkerSet": list(groups.values())},
            groups=groups,
            pods=None if self.unknown else [copy.deepcopy(p) for p in self.pods.values()],
            unfit=unfit.now(),
            in_flight={},
        )
        self.unknown = False
        defaults = OperatorDefaults()
        decision = decide(seen, defaults, now=self.now())
        before = {n for n, g in self.groups.items() if serving(g)}
        for write in decision.drains.writes:
            if write.resource.kind == "LeaderWorkerSet" and write.name in self.groups:
                assert write.body is not None
                annotations = self.groups[write.name]["metadata"].setdefault("annotations", {})
                for key, value in write.body["metadata"]["annotations"].items():
                    if value is None:
                        annotations.pop(key, None)
                    else:
                        annotations[key] = value
        for child in decision.apply:
            if child["kind"] == "LeaderWorkerSet":
                self.write(child)
        for write in decision.delete:
            if write.resource.kind == "LeaderWorkerSet":
                self.groups.pop(write.name, None)
                self.crash(write.name)
        after = {n for n, g in self.groups.items() if serving(g)}
        leaving = set(decision.group_set.leaving) & before
        assert decision.steps is not None
        self.check_budget(before, after, leaving=leaving, rolling=decision.steps.rolling)
        live = [copy.deepcopy(g) for g in self.groups.values()]
        self.status = outcome(seen, decision, Applied(live=live), None, now=self.now()).status

    def write(self, child: dict[str, Any]) -> None:
        name = child["metadata"]["name"]
        meta = {k: v for k, v in child["metadata"].items()}
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if v is not None}
        found = self.groups.get(name)
        if found is None:
            self.uid += 1
            self.made.append(name)
            meta |= {
                "uid": f"g{self.uid}",
                "generation": 1,
                "resourceVersion": "1",
                "annotations": annotations,
            }
            self.groups[name] = {**child, "metadata": meta, "status": {}}
            return
        old = found["metadata"]
        kept = {k: v for k, v in old.get("annotations", {}).items()}
        for key, value in (child["metadata"].get("annotations") or {}).items():
            if value is None:
                kept.pop(key, None)
            else:
                kept[key] = value
        generation = old["generation"] + (found["spec"] != child["spec"])
        found["metadata"] = {**old, "annotations": kept, "generation": generation}
        found["spec"] = child["spec"]

    def check_budget(
        self, before: set[str], after: set[str], *, leaving: set[str], rolling: bool
    ) -> None:
        """The groups serving after the operator's writes: no fewer than the budget leaves
        (`replicas - maxUnavailable`, the sample's maxUnavailable 1), and an evacuation takes
        away only the group its replacement serves for (capped at `replicas`)."""
        replicas = self.spec["replicas"]
        if not before - after or any(c == "GpuPcieWatch" for c in self.conditions.values()):
            return  # nothing taken, or a critical node's group may go without a replacement
        floor = min(len(before), replicas - 1)
        if leaving and not rolling:
            floor = min(len(before) - len(leaving), replicas)
        assert len(after) >= floor, (before, after, leaving)

    # The events.

    @rule(nodes=st.sets(st.sampled_from(NODES), min_size=1, max_size=4))
    def cordon(self, nodes: set[str]) -> None:
        self.cordoned |= nodes
        self.step()

    @rule()
    def drain_the_rack(self) -> None:
        self.cordoned |= set(RACK)
        self.draining |= set(RACK)
        self.step()

    @rule(nodes=st.sets(st.sampled_from(NODES), min_size=1, max_size=3))
    def kubectl_drain(self, nodes: set[str]) -> None:
        self.cordoned |= nodes
        self.draining |= nodes
        self.step()

    @rule(node=st.sampled_from(NODES))
    def uncordon(self, node: str) -> None:
        self.cordoned.discard(node)
        self.draining.discard(node)
        self.step()

    @rule(node=st.sampled_from(NODES), kind=st.sampled_from(["GpuXidWatch", "GpuPcieWatch"]))
    def condition(self, node: str, kind: str) -> None:
        self.conditions[node] = kind
        self.step()

    @rule(node=st.sampled_from(NODES))
    def condition_cleared(self, node: str) -> None:
        self.conditions.pop(node, None)
        self.step()

    @rule()
    def operator_restarted(self) -> None:
        self.unknown = True
        self.step()

    @rule()
    def template_edited(self) -> None:
        seqs = self.spec["decode"]["maxNumSeqs"]
        self.spec["decode"] = {"maxNumSeqs": 16 if seqs == 8 else 8}
        self.step()

    @rule(replicas=st.integers(1, 3))
    def scaled(self, replicas: int) -> None:
        self.spec["replicas"] = replicas
        self.step()

    @precondition(lambda self: bool(self.groups) and self.crashes < CRASHES)
    @rule(data=st.data())
    def group_crashed(self, data: st.DataObject) -> None:
        """A group's pod fails and LeaderWorkerSet recreates the group (fewer than the restart
        budget's failures: the brake, which stops a group for a person, is not what settles)."""
        self.crashes += 1
        self.crash(data.draw(st.sampled_from(sorted(self.groups))))
        self.step()

    @rule()
    def time_passes(self) -> None:
        self.step()

    # What must hold.

    def teardown(self) -> None:
        """The events stopped: drains complete while the nodes stay unfit (with room), then,
        every node fit again, nothing more is made."""
        world = self
        world.conditions = {n: c for n, c in world.conditions.items() if c != "GpuPcieWatch"}
        for _ in range(SETTLE_STEPS):
            world.step()
        replicas = world.spec["replicas"]
        room = len(set(NODES) - world.cordoned) >= GROUP_SIZE * (replicas + 1)
        left = [p for p in world.pods.values() if p["spec"].get("nodeName") in world.draining]
        assert not (room and left), (
            f"drain never completed: {[p['metadata']['name'] for p in left]}"
        )
        world.cordoned.clear()
        world.draining.clear()
        world.conditions.clear()
        for _ in range(4):
            world.step()
        made = len(world.made)
        for _ in range(SETTLE_STEPS // 2):
            world.step()
        assert len(world.made) == made, f"made again once fit: {world.made[made:]}"
        groups = world.groups
        assert len(groups) == replicas, sorted(groups)
        assert all(serving(g) for g in groups.values()), sorted(groups)
        assert not any(draining_since(g) for g in groups.values())
        marked = [
            n
            for n, g in groups.items()
            if EVACUATION_ANNOTATION in g["metadata"].get("annotations", {})
        ]
        assert not marked, marked


Fleet.TestCase.settings = settings(
    max_examples=1000 if LONG else 15,
    stateful_step_count=25 if LONG else 10,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=not LONG,
)
test_the_group_set_under_interleaved_events = Fleet.TestCase
