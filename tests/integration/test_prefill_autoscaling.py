"""spec.prefill.autoscaling against the embedded API server, the operator reading a stand-in
Prometheus on 127.0.0.1: load adds prefill groups one per scaleUpPeriodSeconds, no load removes
them once scaleDownStabilizationSeconds has passed, a Prometheus that is down keeps the count and
says so; the API server refuses a starting count outside the bounds, naming the field."""

import time
from typing import Any

import pytest

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.upstream import CHILD_KINDS, ROUTING_KINDS
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import EVENT, KIMI_DEPLOYMENT, LEADER_WORKER_SET
from kimi_operator.prefill_scaling import SCALED, UNAVAILABLE
from kimi_operator.rollout import epoch
from kimi_operator.runner import OperatorThread
from tests.integration.conftest import metrics_of, resyncs
from tests.support.cluster import NS, condition, create, sample, status_of, wait_for
from tests.support.groups import kubelet
from tests.support.stand_in_prometheus import StandInPrometheus, prometheus

__all__ = ["prometheus"]  # the fixture

NAME = "k3-pd"
TIMEOUT_S = 60.0
PERIOD_S, WINDOW_S = 2, 6
WITH_ROUTING = [*CHILD_KINDS, *ROUTING_KINDS]


def _document(replicas: int = 1, **autoscaling: Any) -> dict[str, Any]:
    doc = sample()
    doc["metadata"]["name"] = NAME
    scaling = {
        "minReplicas": 1,
        "maxReplicas": 3,
        "target": {"waitingRequestsPerGroup": 4},
        "scaleUpPeriodSeconds": PERIOD_S,
        "scaleDownStabilizationSeconds": WINDOW_S,
    }
    doc["spec"] |= {
        "replicas": 1,
        "routing": {"mode": "InferencePool"},
        "prefill": {"replicas": replicas, "autoscaling": scaling | autoscaling},
    }
    return doc


def _prefill_groups(client: Client) -> list[str]:
    return sorted(
        g["metadata"]["name"]
        for g in client.list(LEADER_WORKER_SET, NS)
        if g["metadata"]["name"].startswith(f"{NAME}-p")
    )


def _resource_version(client: Client) -> str:
    kd = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert kd is not None
    return str(kd["metadata"]["resourceVersion"])


class Changes:
    """Every (desiredReplicas, lastScaleTime) the status was written with, from the API server's
    log of status writes (a poll could miss a step: each lasts one period, ~2 s)."""

    def __init__(self, api: EmbeddedApiServer, client: Client) -> None:
        self.api, self.client = api, client
        self.since = api.status_mark()

    @property
    def seen(self) -> list[tuple[int, str]]:
        states: list[tuple[int, str]] = []
        for name, status in self.api.status_writes(self.since):
            scaler = status.get("prefillAutoscaler") or {}
            if name != f"{NS}/{NAME}" or "desiredReplicas" not in scaler:
                continue
            state = (scaler["desiredReplicas"], scaler.get("lastScaleTime", ""))
            if not states or states[-1] != state:
                states.append(state)
        return states

    def until(self, replicas: int, groups: int) -> dict[str, Any]:
        """The status once it wants `replicas` and `groups` prefill groups exist (a state that
        stays until the load changes)."""

        def probe() -> dict[str, Any] | None:
            status = status_of(self.client, NS, NAME)
            done = (status.get("prefillAutoscaler") or {}).get("desiredReplicas") == replicas
            return status if done and len(_prefill_groups(self.client)) == groups else None

        status: dict[str, Any] = wait_for(probe, TIMEOUT_S, f"{replicas} prefill groups")
        return status


@pytest.mark.parametrize("installed", [WITH_ROUTING], indirect=True)
def test_load_adds_prefill_groups_quiet_removes_them_and_silence_keeps_them(
    api: EmbeddedApiServer,
    client: Client,
    prometheus: StandInPrometheus,
    scaling_operator: OperatorThread,
) -> None:
    changes = Changes(api, client)
    with kubelet(api, NS):
        create(client, _document())
        status = changes.until(1, 1)
        assert status["prefillReplicas"] == 1
        query = (
            'sum(kimi:prefill_num_requests_waiting:sum{namespace="inference", deployment="k3-pd"})'
        )
        assert query in prometheus.queries

        # 40 waiting at 4 per group: 10 wanted, 3 at most, added one per period.
        prometheus.value = 40
        status = changes.until(3, 3)
        assert [count for count, _ in changes.seen] == [1, 2, 3]
        (_, at_2), (_, at_3) = changes.seen[1:]
        assert (epoch(at_3) or 0) - (epoch(at_2) or 0) >= PERIOD_S
        wait_for(lambda: status_of(client, NS, NAME).get("prefillReadyReplicas") == 3, TIMEOUT_S)
        assert status["replicas"] == 1  # the decode groups are not the prefill autoscaler's
        # Steady load, the same decision at every poll: the status is not written again.
        written = _resource_version(client)
        resyncs(metrics_of(scaling_operator), count=3)
        assert _resource_version(client) == written

        # No load: a group goes only once no recommendation within the window asks for 3.
        prometheus.value = 0
        changes.until(1, 1)
        assert [count for count, _ in changes.seen] == [1, 2, 3, 2, 1]
        (_, up), (_, down), (_, last) = changes.seen[2:]
        assert (epoch(down) or 0) - (epoch(up) or 0) >= WINDOW_S
        assert (epoch(last) or 0) - (epoch(down) or 0) >= PERIOD_S

        # 8 waiting: 2 groups; then Prometheus goes down: 2 kept, and said.
        prometheus.value = 8
        changes.until(2, 2)
        prometheus.stop()

        def said() -> dict[str, Any] | None:
            status = status_of(client, NS, NAME)
            return status if condition(status, "Degraded")["reason"] == UNAVAILABLE else None

        status = wait_for(said, TIMEOUT_S, "Degraded says Prometheus does not answer")
        assert "keeping 2 prefill groups" in condition(status, "Degraded")["message"]
        since = epoch(condition(status, "Degraded")["lastTransitionTime"]) or 0

        def window_passed() -> bool:
            """A whole window since the silence began, by the operator's clock (this machine's;
            lastTransitionTime is in whole seconds)."""
            return time.time() - since >= WINDOW_S + 1

        wait_for(window_passed, TIMEOUT_S, "a stabilization window without an answer")
        resyncs(metrics_of(scaling_operator), count=2)  # evaluated after it
        status = status_of(client, NS, NAME)
        assert status["prefillAutoscaler"]["desiredReplicas"] == 2
        assert _prefill_groups(client) == [f"{NAME}-p0", f"{NAME}-p1"]
        assert condition(status, "Ready")["status"] == "True"

    events = client.list(EVENT, NS)
    scaled = sorted(e["message"].split(":")[0] for e in events if e["reason"] == SCALED)
    assert scaled == sorted(
        f"prefill groups {a} -> {b}" for a, b in ((1, 2), (2, 3), (3, 2), (2, 1), (1, 2))
    )
    assert all(e["type"] == "Normal" for e in events if e["reason"] == SCALED)
    assert [e["type"] for e in events if e["reason"] == UNAVAILABLE] == ["Warning"]


@pytest.mark.parametrize("installed", [WITH_ROUTING], indirect=True)
@pytest.mark.usefixtures("prometheus")
def test_removing_the_autoscaling_removes_its_status(
    api: EmbeddedApiServer, client: Client, scaling_operator: OperatorThread
) -> None:
    """The status as the API server keeps it: status.prefillAutoscaler gone with
    spec.prefill.autoscaling, and no status written again at each resync (#48: the merge patch
    left it, and every reconcile found the status changed)."""
    with kubelet(api, NS):
        create(client, _document())
        Changes(api, client).until(1, 1)
        client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"prefill": {"autoscaling": None}}})
        wait_for(
            lambda: status_of(client, NS, NAME).get("observedGeneration") == 2,
            TIMEOUT_S,
            "the edit reconciled",
        )
        resyncs(metrics_of(scaling_operator))
        assert "prefillAutoscaler" not in status_of(client, NS, NAME)
        written = _resource_version(client)
        resyncs(metrics_of(scaling_operator), count=3)
        assert _resource_version(client) == written


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (_document(replicas=4), "spec.prefill.replicas"),
        (_document(minReplicas=0), "spec.prefill.autoscaling.minReplicas"),
        (_document(target={}), "spec.prefill.autoscaling.target"),
    ],
)
def test_the_api_server_refuses_naming_the_field(
    client: Client, doc: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiError, match="HTTP 422") as refused:
        create(client, doc)
    assert f"{field}: " in str(refused.value)
