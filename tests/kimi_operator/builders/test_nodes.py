"""builders/nodes.py: which nodes are unfit under the policy, the watch's memory of them, and the
names the flags and chart values take."""

import pytest

from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.builders.meta import selector_labels
from kimi_operator.builders.nodes import (
    CONDITION,
    CORDONED,
    TAINTED,
    NodePolicy,
    Unfit,
    UnfitNodes,
    check_name,
    unfit,
)
from kimi_operator.builders.serving import pod_disruption_budget
from tests.support.cluster import sample


def node(
    *, cordoned: bool = False, taints: list[dict[str, str]] | None = None, **conditions: str
) -> dict[str, object]:
    return {
        "metadata": {"name": "tray-1"},
        "spec": {"unschedulable": cordoned, "taints": taints or []},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                *({"type": k, "status": v, "message": "XID 79"} for k, v in conditions.items()),
            ]
        },
    }


def test_a_healthy_node_is_fit() -> None:
    assert unfit(node(GpuXidWatch="False"), NodePolicy()) is None


def test_cordon_taint_and_condition() -> None:
    assert unfit(node(cordoned=True), NodePolicy()) == Unfit(CORDONED, "")
    tainted = node(taints=[{"key": "nvidia.com/gpu-xid-error", "effect": "NoExecute"}])
    assert unfit(tainted, NodePolicy()) == Unfit(
        TAINTED, "is tainted nvidia.com/gpu-xid-error:NoExecute"
    )
    failing = unfit(node(GpuPcieWatch="True"), NodePolicy())
    assert failing == Unfit(CONDITION, "has condition GpuPcieWatch: XID 79", critical=True)


def test_a_node_with_a_condition_takes_pods_until_it_is_cordoned_or_tainted() -> None:
    """kube-scheduler ignores conditions: a group kept off such a node may find room only there
    (group_set lets it stay). Cordoned or tainted as well, the node takes no pod: it is left."""
    failing = unfit(node(GpuXidWatch="True"), NodePolicy())
    assert failing is not None
    assert failing.schedulable
    drained = unfit(node(cordoned=True, GpuXidWatch="True"), NodePolicy())
    assert drained is not None
    assert (drained.reason, drained.fenced, drained.schedulable) == (CONDITION, True, False)
    cordoned = unfit(node(cordoned=True), NodePolicy())
    assert cordoned is not None
    assert not cordoned.schedulable


def test_what_the_policy_does_not_name_is_no_reason() -> None:
    soft = node(taints=[{"key": "nvidia.com/gpu-xid-error", "effect": "PreferNoSchedule"}])
    other = node(taints=[{"key": "example.com/other", "effect": "NoSchedule"}])
    assert unfit(soft, NodePolicy()) is None
    assert unfit(other, NodePolicy()) is None
    assert unfit(node(SomeCondition="True"), NodePolicy()) is None
    assert unfit(node(cordoned=True), NodePolicy(cordoned=False)) is None
    assert unfit(node(cordoned=True, GpuPcieWatch="True"), NodePolicy(enabled=False)) is None


def test_a_critical_condition_wins_over_a_cordon() -> None:
    found = unfit(node(cordoned=True, GpuXidWatch="True", GpuNvlinkWatch="True"), NodePolicy())
    assert found is not None
    assert found.critical
    assert "GpuNvlinkWatch" in found.detail


def test_without_a_policy_nothing_is_unfit_from_the_start() -> None:
    assert UnfitNodes(NodePolicy(enabled=False)).now() == {}


def test_the_watch_says_only_what_changed() -> None:
    nodes = UnfitNodes()
    assert not nodes.observe(None, node())  # listed, fit: nothing to do
    assert nodes.now() is None  # not known until the whole list is in (group_set.py)
    assert nodes.listed()
    assert nodes.now() == {}
    assert not nodes.listed()  # a relist: known already
    assert nodes.observe("MODIFIED", node(cordoned=True))
    assert not nodes.observe("MODIFIED", node(cordoned=True))  # a heartbeat: the same
    assert nodes.now() == {"tray-1": Unfit(CORDONED, "")}
    assert nodes.observe("DELETED", node(cordoned=True))
    assert nodes.now() == {}


@pytest.mark.parametrize(
    ("value", "what", "message"),
    [
        ("", "taint key", "must not be empty"),
        ("=true:NoSchedule", "taint key", "is not a taint key"),
        ("nvidia.com/", "taint key", "is not a taint key"),
        ("GPU Xid", "node condition type", "is not a node condition type"),
        ("Ready", "node condition type", "is True on a healthy node"),
    ],
)
def test_bad_names_are_refused(value: str, what: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_name(value, what)


def test_good_names_pass() -> None:
    assert check_name("nvidia.com/gpu-xid-error", "taint key") == "nvidia.com/gpu-xid-error"
    assert check_name("GpuXidWatch", "node condition type") == "GpuXidWatch"


def test_the_disruption_budget_lets_no_serving_pod_go_while_groups_are_evacuated() -> None:
    """A group is 2-4 pods and losing one loses it: with evacuation no Ready pod of the
    deployment may be evicted (a drain waits for the operator), pods not Ready only while the
    others are all healthy (IfHealthyBudget: a probe missed once keeps its group); without,
    rollout.maxUnavailable pods as before."""
    report = check_document(sample("k3-tp16-latency"))
    assert report.deployment is not None
    kd = report.deployment
    on = pod_disruption_budget(kd)["spec"]
    assert on["maxUnavailable"] == 0
    assert on["unhealthyPodEvictionPolicy"] == "IfHealthyBudget"
    assert on["selector"] == {"matchLabels": selector_labels(kd)}  # every pod of every group
    off = pod_disruption_budget(kd, evacuating=False)["spec"]
    assert off == {"selector": on["selector"], "maxUnavailable": kd.spec.rollout.max_unavailable}
    children = build_children(kd, OperatorDefaults(nodes=UnfitNodes(NodePolicy(enabled=False))))
    (budget,) = [c for c in children if c["kind"] == "PodDisruptionBudget"]
    assert budget["spec"] == off
