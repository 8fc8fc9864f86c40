"""A group's life on the embedded API server (docs/group-lifecycle.md): the operator reads the
pods that LeaderWorkerSet's controller and the kubelets would write (the test writes them, as the
stand-in kubelet does), records the group's start-up time, counts its failures with the failing
pod's reason, and stops a crash-looping group after its budget until a person resumes it."""

import datetime
import functools
from typing import Any

from kimi_operator.builders.meta import LWS_WORKER_INDEX_LABEL
from kimi_operator.embedded.kubelet import group_ready_status
from kimi_operator.embedded.scheduler import lws_pods
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, LEADER_WORKER_SET, POD
from kimi_operator.runner import OperatorThread
from tests.integration.conftest import metrics_of, resyncs
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


def test_start_up_time_is_recorded_and_a_crash_loop_is_stopped_then_resumed(
    client: Client, operator: OperatorThread
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
    # Read back from the API server: a stopped group is neither Ready nor serving (#48).
    group = client.get(LEADER_WORKER_SET, namespace, lws["metadata"]["name"])
    assert group is not None
    client.patch(  # what LeaderWorkerSet's controller says of a group at 0 replicas
        LEADER_WORKER_SET,
        namespace,
        group["metadata"]["name"],
        {"status": group_ready_status(group)},
        subresource="status",
    )
    resyncs(metrics_of(operator))
    status = status_of(client, namespace, name)
    assert (status["readyReplicas"], status["stoppedGroups"], status["endpoint"]) == (0, 1, "")
    assert condition(status, "Ready")["status"] == "False"
    annotate = {"metadata": {"annotations": {"kimi-operator.io/resume": "after-the-fix"}}}
    client.patch(KIMI_DEPLOYMENT, namespace, name, annotate)
    wait_for(lambda: replicas() == 1 or None, TIMEOUT_S, "the group resumed")
    wait_for(
        lambda: _group(client, namespace, name).get("stopped") is False or None,
        TIMEOUT_S,
        "the status says resumed",
    )
    status = status_of(client, namespace, name)
    assert status["stoppedGroups"] == 0
    assert condition(status, "Degraded")["reason"] != "GroupStopped"
    assert _group(client, namespace, name)["recentFailures"] == []


def _groups(client: Client, namespace: str, count: int) -> list[dict[str, Any]]:
    """The deployment's LeaderWorkerSets, once there are `count` (none: once all are gone)."""
    found: list[dict[str, Any]] = []

    def listed() -> bool:
        found[:] = client.list(LEADER_WORKER_SET, namespace)
        return len(found) == count

    wait_for(listed, TIMEOUT_S, f"{count} groups")
    return found


def _scaled(client: Client, namespace: str, name: str, replicas: int) -> list[dict[str, Any]]:
    """Scale to `replicas`; LeaderWorkerSet's side played by the test: the pods of the groups
    gone deleted, each new group's pods made and Ready."""
    client.patch(KIMI_DEPLOYMENT, namespace, name, {"spec": {"replicas": replicas}})
    groups = _groups(client, namespace, replicas)
    names = {g["metadata"]["name"] for g in groups}
    for pod in client.list(POD, namespace):
        if pod["metadata"]["labels"].get("kimi-operator.io/tp-group") not in names:
            client.delete(POD, namespace, pod["metadata"]["name"])
    for group in groups:
        _start_pods(client, group, ready=True, failed=False)
    return groups


def _leaders(client: Client, namespace: str) -> dict[str, str]:
    """Each group's leader pod uid, by group."""
    return {
        pod["metadata"]["labels"]["kimi-operator.io/tp-group"]: pod["metadata"]["uid"]
        for pod in client.list(POD, namespace)
        if pod["metadata"]["labels"].get(LWS_WORKER_INDEX_LABEL) == "0"
    }


def _recorded(
    client: Client, namespace: str, name: str, leaders: dict[str, str]
) -> list[dict[str, Any]] | None:
    """status.groups once it records `leaders` (group -> leader uid) started."""
    records: list[dict[str, Any]] = status_of(client, namespace, name).get("groups") or []
    seen = {r["name"]: r.get("leaderUid") for r in records if r.get("startupSeconds")}
    return records if seen == leaders else None


def test_scaled_to_zero_and_back_the_groups_record_no_failure(
    client: Client, operator: OperatorThread
) -> None:
    """Three KEDA-like cycles 2 -> 0 -> 2 within the window, with a budget of 2 failures: while
    at 0 the status the API server keeps names no group, and back at 2 each group is new, not
    recreated (#48: the merge patch kept the gone groups' records, and each new leader was
    counted a failure)."""
    doc = sample()
    doc["spec"] |= {"replicas": 2, "serving": {"restartBudget": {"failures": 2}}}
    namespace, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
    client.create(KIMI_DEPLOYMENT, doc)
    for group in _groups(client, namespace, 2):
        _start_pods(client, group, ready=True, failed=False)
    for _ in range(3):
        _scaled(client, namespace, name, 0)
        resyncs(metrics_of(operator))  # a whole reconcile saw no group
        status = status_of(client, namespace, name)
        assert (status["replicas"], status["readyReplicas"]) == (0, 0)
        assert "groups" not in status
        _scaled(client, namespace, name, 2)
        recorded = functools.partial(
            _recorded, client, namespace, name, _leaders(client, namespace)
        )
        records = wait_for(recorded, TIMEOUT_S, "both new leaders recorded")
        for record in records:
            assert (record["restarts"], record.get("lastFailure")) == (0, None), record
            assert not record.get("stopped")
    # The leaders' records come from their pods; Ready from the LeaderWorkerSets' status,
    # which the test writes after the pods: a reconcile between the two saw a group not ready.
    wait_for(
        lambda: condition(status_of(client, namespace, name), "Ready")["status"] == "True",
        TIMEOUT_S,
        "Ready once both groups' LeaderWorkerSets say so",
    )
