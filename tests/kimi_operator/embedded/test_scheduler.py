"""The scheduler model says why a pod stays Pending as kube-scheduler does."""

import random

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.builders.placement import kept_off
from kimi_operator.embedded.scheduler import Scheduler, fleet, lws_pods
from tests.support.specs import edited


def test_a_group_without_free_trays_gets_kube_schedulers_message() -> None:
    kd = KimiDeployment.model_validate(edited({"spec.replicas": 2}))
    groups = [c for c in build_children(kd, OperatorDefaults()) if c["kind"] == "LeaderWorkerSet"]
    scheduler = Scheduler(fleet(1)[:6], random.Random(1))  # six trays: one 4-tray group fits
    first, second = (lws_pods(g) for g in groups)
    assert all(scheduler.schedule(p) is not None for p in first)
    leader = second[0]
    assert scheduler.schedule(leader) is not None  # a fifth tray
    assert scheduler.schedule(second[1]) is not None  # the sixth
    assert scheduler.schedule(second[2]) is None
    assert scheduler.unschedulable_message(second[2]) == (
        "0/6 nodes are available: 6 Insufficient nvidia.com/gpu. preemption: 0/6 nodes are "
        "available: 6 No preemption victims found for incoming pod."
    )


def test_free_trays_in_another_clique_fail_the_group_affinity() -> None:
    kd = KimiDeployment.model_validate(edited({}))
    (group,) = [c for c in build_children(kd, OperatorDefaults()) if c["kind"] == "LeaderWorkerSet"]
    nodes = fleet(2)[:2] + fleet(2)[18:20]  # two trays in each of two racks
    scheduler = Scheduler(nodes, random.Random(0))
    pods = lws_pods(group)
    placed = [scheduler.schedule(p) for p in pods]
    assert placed.count(None) == 2
    message = scheduler.unschedulable_message(pods[-1])
    assert message.startswith(
        "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, "
        "2 node(s) didn't match pod affinity rules."
    )


def test_a_group_kept_off_a_node_goes_there_only_without_other_room() -> None:
    """The operator keeps a group made while a node has a failing condition off it by name, a
    preference (builders.placement.kept_off); the model scores preferred node affinity as
    kube-scheduler's NodeAffinity does: elsewhere while there is room, there when there is
    none (a required term would keep the group Pending there for ever once the node heals)."""
    kd = KimiDeployment.model_validate(edited({}))
    (group,) = [c for c in build_children(kd, OperatorDefaults()) if c["kind"] == "LeaderWorkerSet"]
    nodes = fleet(1)[:4]
    avoided = nodes[0]
    away = lws_pods(kept_off(group, [avoided["metadata"]["name"]]))
    for seed in range(8):
        scheduler = Scheduler(nodes, random.Random(seed))
        placed = [scheduler.schedule(p) for p in away[:3]]
        assert avoided not in placed
        assert scheduler.schedule(away[3]) is avoided  # the only room left
