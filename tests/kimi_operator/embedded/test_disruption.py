"""The disruption controller's stand-in (embedded.disruption), pure: what a budget allows."""

import datetime
from typing import Any

from kimi_operator.embedded.disruption import budget_status
from kimi_operator.embedded.scheduler import LWS_NAME_LABEL

NOW = datetime.datetime(2026, 12, 1, 12, tzinfo=datetime.UTC)
BUDGET = {
    "metadata": {"name": "k3", "generation": 1},
    "spec": {"selector": {"matchLabels": {"app": "k3"}}, "maxUnavailable": 0},
}


def pod(name: str, group: str) -> dict[str, Any]:
    ready = {"type": "Ready", "status": "True"}
    labels = {"app": "k3", LWS_NAME_LABEL: group}
    return {"metadata": {"name": name, "labels": labels}, "status": {"conditions": [ready]}}


def test_every_pod_healthy_allows_no_disruption_under_max_unavailable_zero() -> None:
    pods = [pod("g0-0", "g0"), pod("g0-0-1", "g0"), pod("g1-0", "g1"), pod("g1-0-1", "g1")]
    status = budget_status(BUDGET, pods, lambda _: 2, NOW)
    assert (status["expectedPods"], status["currentHealthy"]) == (4, 4)
    assert status["disruptionsAllowed"] == 0


def test_pods_whose_controller_is_gone_fail_the_sync() -> None:
    """#56's rack drain found it: a group's LeaderWorkerSet deleted (its replacement serves)
    while its pods are still there counted 0 expected pods for them, yet their Ready pods as
    healthy: the budget allowed a serving group's pod to be evicted. The disruption controller
    (getExpectedScale) fails the sync instead, "found no controllers for pod": nothing is
    allowed until those pods are gone."""
    pods = [pod("g0-0", "g0"), pod("g0-0-1", "g0"), pod("g1-0", "g1"), pod("g1-0-1", "g1")]
    scales = {"g1": 2}  # g0's LeaderWorkerSet is gone
    status = budget_status(BUDGET, pods, scales.get, NOW)
    assert status["disruptionsAllowed"] == 0
    (allowed,) = status["conditions"]
    assert (allowed["reason"], allowed["message"]) == (
        "SyncFailed",
        'found no controllers for pod "g0-0"',
    )
