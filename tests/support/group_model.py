"""The state machine of the group set's model check (#56; docs/architecture.md, "The group set"),
shared by the check itself (tests/kimi_operator/test_group_model.py) and the proof that it finds
each scenario of #56 with the scenario's fix taken out (test_group_model_finds.py): a hypothesis
rule-based machine interleaves what a GB300 fleet gets (cordons, node conditions critical or not,
`kubectl drain` of any set of nodes, a whole rack's included, uncordons, operator restarts with the
Node watch unlisted and the pods unread, template edits, scaling, group crashes) with reconciles by
`reconcile.decide` and `reconcile.status.outcome`, each decision's writes applied to a small
cluster as the API server and an apply do (k8s.merge.drift_patch, a merge patch): nodes of one pod
each (a TP8 group is two trays), LeaderWorkerSets whose pods the scheduler places on schedulable
nodes their node affinity allows, those it prefers first (a node with only a condition included, as
kube-scheduler does), Ready one step later, and a PodDisruptionBudget that refuses to evict a Ready
pod (the operator's, with evacuation).

Invariants, each failing with its own words (the constants below): after every reconcile, the
operator took no serving group away (a drain, a rewrite, a delete) leaving fewer than `replicas -
maxUnavailable` serving, nor, for an evacuation, fewer than `replicas` (a critical condition aside:
its group may go without a replacement) (BUDGET); it dropped no starting replacement while its
group must still leave (DROPPED), deleted no evacuated group whose replacement does not serve
(BOTH_OUT), and made no more groups since the last event than a deployment can need (LOOP). When
the events stop, with room, every drain and rollout completes in bounded steps (DRAIN, ROLLING);
once every node is fit again nothing more is made (one start per evacuated group: MADE_AGAIN), and
the set is exactly `replicas` serving groups, none draining, no evacuation recorded (SETTLED).
Seeds are hypothesis's: a failure prints the steps that replay it.
"""

import copy
import functools
import json
import time
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults
from kimi_operator.builders.meta import LWS_WORKER_INDEX_LABEL
from kimi_operator.builders.nodes import UnfitNodes
from kimi_operator.builders.placement import GROUP_LABEL
from kimi_operator.embedded.patches import merge_patch
from kimi_operator.embedded.scheduler import node_affinity_ok, node_preference
from kimi_operator.evacuation import EVACUATION_ANNOTATION, recorded
from kimi_operator.k8s.merge import Applied, drift_patch
from kimi_operator.reconcile.decide import UPSTREAM, Observed, decide
from kimi_operator.reconcile.status import outcome
from kimi_operator.rollout import TIME_FORMAT, draining_since, epoch, group_ready, serving
from tests.support.cluster import sample

NAME = "k3-tp8-dspark"
NODES = [f"tray-{i}" for i in range(10)]  # room for five groups of two trays
RACK = NODES[:4]
SETTLE_STEPS = 30
START = epoch("2026-12-01T12:00:00Z") or 0.0
CRASHES = 2  # spec.serving.restartBudget.failures is 3
GROUP_SIZE = 2  # the sample's TP8: two trays
STEP_S = 30  # the virtual clock's step
# A leaving group drains two steps (its leader's requests unknown: the grace runs out), so that
# events land in the middle of a drain.
DRAIN_SECONDS = 2 * STEP_S
MOST_REPLICAS = 3  # what `scaled` asks for at most
# Groups a deployment can need made after its last event: a replacement for each member, and
# the members themselves after a scale-up; more is a loop.
NEEDED = 2 * MOST_REPLICAS
# What each invariant says when it fails (test_group_model_finds.py matches them).
BUDGET = "serving groups below the budget"
DROPPED = "a starting replacement dropped while its group must still leave"
BOTH_OUT = "an evacuated group deleted while its replacement does not serve"
LOOP = "groups made in a loop"
DRAIN = "drain never completed"
ROLLING = "rollout never completed"
MADE_AGAIN = "made again once fit"
SETTLED = "not settled on replicas serving groups"


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
        self.since_event = 0  # of them, made since the last event (not time passing)
        self.rolling = False  # what the last reconcile's rollout said
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
        doc["spec"]["serving"] = {**doc["spec"].get("serving", {}), "drainSeconds": DRAIN_SECONDS}
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
            template = group["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
            nodes = [{"metadata": {"name": n, "labels": {}}} for n in NODES]
            free = [
                n["metadata"]["name"]
                for n in sorted(nodes, key=lambda n: -node_preference(template, n))
                if n["metadata"]["name"] not in taken | self.cordoned
                and node_affinity_ok(template, n)
            ]
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
        self.tick += STEP_S
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
                found = self.groups[write.name]["metadata"]
                found["annotations"] = merge_patch(
                    found.get("annotations", {}), write.body["metadata"]["annotations"]
                )
        for child in decision.apply:
            if child["kind"] == "LeaderWorkerSet":
                self.write(child)
        deleted = {}
        for write in decision.delete:
            if write.resource.kind == "LeaderWorkerSet" and write.name in self.groups:
                deleted[write.name] = self.groups.pop(write.name)
                self.crash(write.name)
        after = {n for n, g in self.groups.items() if serving(g)}
        leaving = set(decision.group_set.leaving) & before
        assert decision.steps is not None
        self.rolling = decision.steps.rolling
        self.check_budget(before, after, leaving=leaving, rolling=decision.steps.rolling)
        self.check_deleted(deleted, decision.group_set.leaving, before)
        assert self.since_event <= NEEDED, f"{LOOP}: {self.made[-self.since_event :]}"
        live = [copy.deepcopy(g) for g in self.groups.values()]
        self.status = outcome(seen, decision, Applied(live=live), None, now=self.now()).status

    def write(self, child: dict[str, Any]) -> None:
        """An apply (k8s/apply.py): create what is missing, else merge-patch what drifted
        (k8s.merge.drift_patch); the generation moves when the spec changes."""
        name = child["metadata"]["name"]
        found = self.groups.get(name)
        if found is None:
            self.uid += 1
            self.made.append(name)
            self.since_event += 1
            meta = dict(child["metadata"])
            annotations = {
                k: v for k, v in (meta.get("annotations") or {}).items() if v is not None
            }
            meta |= {
                "uid": f"g{self.uid}",
                "generation": 1,
                "resourceVersion": "1",
                "annotations": annotations,
            }
            self.groups[name] = {**child, "metadata": meta, "status": {}}
            return
        patch = drift_patch(found, child)
        if patch is None:
            return
        old = found["metadata"]
        annotations = merge_patch(old.get("annotations", {}), patch["metadata"]["annotations"])
        spec = merge_patch(found["spec"], patch.get("spec", {}))
        generation = old["generation"] + (spec != found["spec"])
        found["metadata"] = {**old, "annotations": annotations, "generation": generation}
        found["spec"] = spec

    def on_unfit(self, group: str) -> bool:
        """Whether a pod of `group` runs on a node that is cordoned or has a condition."""
        return any(
            p["metadata"]["labels"][GROUP_LABEL] == group
            and p["spec"].get("nodeName") in self.cordoned | set(self.conditions)
            for p in self.pods.values()
        )

    def check_budget(
        self, before: set[str], after: set[str], *, leaving: set[str], rolling: bool
    ) -> None:
        """The groups serving after the operator's writes: an evacuation takes away only the
        group its replacement serves for (an exchange: `leaving` is not counted), and no more
        than the budget leaves: `replicas - maxUnavailable` (the sample's maxUnavailable 1)
        while a rollout lasts or nothing is evacuated, `replicas` during an evacuation."""
        replicas = self.spec["replicas"]
        if not before - after or self.critical():
            return  # nothing taken, or a critical node's group may go without a replacement
        floor = min(len(before) - len(leaving), replicas - (rolling or not leaving))
        assert len(after) >= floor, f"{BUDGET}: {sorted(before)} -> {sorted(after)}"

    def critical(self) -> bool:
        return any(c == "GpuPcieWatch" for c in self.conditions.values())

    def check_deleted(
        self, deleted: dict[str, dict[str, Any]], leaving: dict[str, Any], served: set[str]
    ) -> None:
        """Make before break, both ways: a replacement deleted that has not served, while the
        group it stands in for is still on an unfit node and not leaving (draining), is a start
        thrown away (and made again); an evacuated group deleted is one whose replacement
        served in its place as the reconcile read it (`served`: a rollout may then take the
        replacement within its own budget), unless its evacuation was for a critical condition
        (the group goes without one when there is no room)."""
        for name, group in deleted.items():
            record = recorded(group)
            stays = None if record is None else self.groups.get(record.group)
            if record is not None and stays is not None and not group_ready(group):
                assert draining_since(stays) or not self.on_unfit(record.group), (
                    f"{DROPPED}: {name}, for {record.group}"
                )
            if name in leaving and not leaving[name][1].critical:
                replacement = leaving[name][0]
                assert replacement in served, f"{BOTH_OUT}: {name}, for {replacement}"

    def event(self) -> None:
        """Something happened (not time passing): what follows may make groups anew."""
        self.since_event = 0

    # The events.

    @rule(nodes=st.sets(st.sampled_from(NODES), min_size=1, max_size=4))
    def cordon(self, nodes: set[str]) -> None:
        self.cordoned |= nodes
        self.event()
        self.step()

    @rule()
    def drain_the_rack(self) -> None:
        self.cordoned |= set(RACK)
        self.draining |= set(RACK)
        self.event()
        self.step()

    @rule(nodes=st.sets(st.sampled_from(NODES), min_size=1, max_size=3))
    def kubectl_drain(self, nodes: set[str]) -> None:
        self.cordoned |= nodes
        self.draining |= nodes
        self.event()
        self.step()

    @rule(node=st.sampled_from(NODES))
    def uncordon(self, node: str) -> None:
        self.cordoned.discard(node)
        self.draining.discard(node)
        self.event()
        self.step()

    @rule(node=st.sampled_from(NODES), kind=st.sampled_from(["GpuXidWatch", "GpuPcieWatch"]))
    def condition(self, node: str, kind: str) -> None:
        self.conditions[node] = kind
        self.event()
        self.step()

    @rule(node=st.sampled_from(NODES))
    def condition_cleared(self, node: str) -> None:
        self.conditions.pop(node, None)
        self.event()
        self.step()

    @rule()
    def operator_restarted(self) -> None:
        self.unknown = True
        self.event()
        self.step()

    @rule()
    def template_edited(self) -> None:
        seqs = self.spec["decode"]["maxNumSeqs"]
        self.spec["decode"] = {"maxNumSeqs": 16 if seqs == 8 else 8}
        self.event()
        self.step()

    @rule(replicas=st.integers(1, 3))
    def scaled(self, replicas: int) -> None:
        self.spec["replicas"] = replicas
        self.event()
        self.step()

    @precondition(lambda self: bool(self.groups) and self.crashes < CRASHES)
    @rule(data=st.data())
    def group_crashed(self, data: st.DataObject) -> None:
        """A group's pod fails and LeaderWorkerSet recreates the group (fewer than the restart
        budget's failures: the brake, which stops a group for a person, is not what settles)."""
        self.crash_group(data.draw(st.sampled_from(sorted(self.groups))))

    def crash_group(self, group: str) -> None:
        self.crashes += 1
        self.crash(group)
        self.event()
        self.step()

    @rule()
    def time_passes(self) -> None:
        self.step()

    # What must hold.

    def teardown(self) -> None:
        """The events stopped: drains and the rollout complete while the nodes stay unfit (with
        room: free trays neither cordoned nor failing for one group more than asked for), then,
        every node fit again, nothing more is made (not even a step later: `kubectl uncordon`
        restarts nothing) and the set settles."""
        self.event()
        self.conditions = {n: c for n, c in self.conditions.items() if c != "GpuPcieWatch"}
        for _ in range(SETTLE_STEPS):
            self.step()
        replicas = self.spec["replicas"]
        free = set(NODES) - self.cordoned - set(self.conditions)
        room = len(free) >= GROUP_SIZE * (replicas + 1)
        left = [
            p["metadata"]["name"]
            for p in self.pods.values()
            if p["spec"].get("nodeName") in self.draining
        ]
        assert not (room and left), f"{DRAIN}: {left}"
        assert not (room and self.rolling), ROLLING
        self.event()
        self.cordoned.clear()
        self.draining.clear()
        self.conditions.clear()
        made = len(self.made)
        for _ in range(SETTLE_STEPS // 2):
            self.step()
        assert len(self.made) == made, f"{MADE_AGAIN}: {self.made[made:]}"
        groups = self.groups
        marked = [
            n
            for n, g in groups.items()
            if EVACUATION_ANNOTATION in g["metadata"].get("annotations", {})
        ]
        assert len(groups) == replicas, f"{SETTLED}: {sorted(groups)}"
        assert not marked, f"{SETTLED}: {marked} still recorded as replacements"
        assert all(serving(g) for g in groups.values()), f"{SETTLED}: {sorted(groups)}"


def played(steps: Callable[[Fleet], None]) -> None:
    """The machine through `steps` (its rules, called in order), then its teardown: an
    interleaving replayed as hypothesis printed it, or a scenario's."""
    machine = Fleet()
    steps(machine)
    machine.teardown()
