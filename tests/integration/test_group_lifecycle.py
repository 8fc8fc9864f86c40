"""A group's life on the embedded API server (docs/group-lifecycle.md): the operator reads the
pods that LeaderWorkerSet's controller and the kubelets would write (the test writes them, as the
stand-in kubelet does), records the group's start-up time, counts its failures with the failing
pod's reason, and stops a crash-looping group after its budget until a person resumes it."""

import datetime
import functools
from typing import Any

import pytest

from kimi_operator.builders.meta import LWS_WORKER_INDEX_LABEL
from kimi_operator.embedded.kubelet import group_ready_status
from kimi_operator.embedded.scheduler import lws_pods
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, LEADER_WORKER_SET, POD
from tests.support.cluster import condition, sample, status_of, wait_for

TIMEOUT_S = 30.0
OOM = {"exitCode": 137, "reason": "OOMKilled"}


def _stamp(seconds_ago: float) -> str:
    moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds_ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _start_pods(client: Client, lws: dict[str, Any], *, ready: bool, failed: bool) -> None:
    """The group's pods as LeaderWorkerSet creates them and the kubelet reports them."""
    namespace = lws["metadata"]["namespace"]
    for index, pod in enumerate(lws_pods(lws)):
        labels = pod.labels | {LWS_WORKER_INDEX_LABEL: str(index)}
        meta = {"name": pod.name, "namespace": namespace, "labels": labels}
        client.create(POD, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod.spec})
        conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": _stamp(600)}]
        if ready:
            conditions.append({"type": "Ready", "status": "True", "lastTransitionTime": _stamp(0)})
        container: dict[str, Any] = {"name": "vllm", "restartCount": 0, "state": {"running": {}}}
        if failed and index == 0:
            container |= {"restartCount": 1, "lastState": {"terminated": OOM}}
        status = {"phase": "Running", "conditions": conditions, "containerStatuses": [container]}
        client.patch(POD, namespace, pod.name, {"status": status}, subresource="status")
    group = {"status": group_ready_status(lws, ready=ready)}
    client.patch(LEADER_WORKER_SET, namespace, lws["metadata"]["name"], group, subresource="status")


def _recreate(client: Client, lws: dict[str, Any]) -> None:
    """LeaderWorkerSet's RecreateGroupOnPodRestart: the group's pods deleted, made anew."""
    for pod in client.list(POD, lws["metadata"]["namespace"]):
        client.delete(POD, pod["metadata"]["namespace"], pod["metadata"]["name"])
    wait_for(lambda: not client.list(POD, lws["metadata"]["namespace"]) or None, TIMEOUT_S)
    _start_pods(client, lws, ready=False, failed=True)


def _group(client: Client, namespace: str, name: str) -> dict[str, Any]:
    groups = status_of(client, namespace, name).get("groups") or [{}]
    found: dict[str, Any] = groups[0]
    return found


def _counted(client: Client, namespace: str, name: str, failures: int) -> bool | None:
    return _group(client, namespace, name).get("restarts", 0) >= failures or None


def _stopped(client: Client, namespace: str, name: str) -> dict[str, Any] | None:
    group = _group(client, namespace, name)
    return group if group.get("stopped") else None


@pytest.mark.usefixtures("operator")
def test_start_up_time_is_recorded_and_a_crash_loop_is_stopped_then_resumed(
    client: Client,
) -> None:
    doc = sample()
    doc["spec"]["serving"] = {"restartBudget": {"failures": 2, "windowMinutes": 60}}
    namespace, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
    client.create(KIMI_DEPLOYMENT, doc)
    lws = wait_for(lambda: next(iter(client.list(LEADER_WORKER_SET, namespace)), None), TIMEOUT_S)
    _start_pods(client, lws, ready=True, failed=False)
    started = wait_for(
        lambda: _group(client, namespace, name).get("startupSeconds"), TIMEOUT_S, "startup"
    )
    assert 590 <= started <= 660  # scheduled 10 minutes before Ready, as the kubelet said
    # Now it crash-loops: OOM-killed, recreated by LeaderWorkerSet, OOM-killed again.
    for failures in (1, 2):
        _recreate(client, lws)
        counted = functools.partial(_counted, client, namespace, name, failures)
        wait_for(counted, TIMEOUT_S, f"failure {failures} counted")
    record = wait_for(lambda: _stopped(client, namespace, name), TIMEOUT_S, "stopped")
    assert record["lastFailure"]["reason"] == "OOMKilled"
    degraded = condition(status_of(client, namespace, name), "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "GroupStopped")
    assert "OOMKilled" in degraded["message"]
    assert "kimi-operator.io/resume" in degraded["message"]

    def replicas() -> int:
        group = client.get(LEADER_WORKER_SET, namespace, lws["metadata"]["name"])
        assert group is not None
        value: int = group["spec"]["replicas"]
        return value

    wait_for(lambda: replicas() == 0 or None, TIMEOUT_S, "the group at 0 replicas")
    annotate = {"metadata": {"annotations": {"kimi-operator.io/resume": "after-the-fix"}}}
    client.patch(KIMI_DEPLOYMENT, namespace, name, annotate)
    wait_for(lambda: replicas() == 1 or None, TIMEOUT_S, "the group resumed")
    wait_for(
        lambda: _group(client, namespace, name).get("stopped") is False or None,
        TIMEOUT_S,
        "the status says resumed",
    )
