"""Each group's life in status (group_life.py), on a virtual clock: the start-up time from the
leader's pod conditions, failures counted once each with the failing pod's reason, the brake
after the budget within its window, the start-grace, and the resume annotation."""

import datetime
from typing import Any

from kimi_operator import group_life
from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults, build_children
from tests.support.specs import edited

T0 = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
GROUP = "k3-g0"


def at(minutes: float) -> str:
    return (T0 + datetime.timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def deployment(annotations: dict[str, str] | None = None, **budget: int) -> Any:
    doc = edited({"spec.serving.restartBudget": budget} if budget else {})
    if annotations:
        doc["metadata"]["annotations"] = annotations
    report = check_document(doc)
    assert report.deployment is not None, [str(p) for p in report.problems]
    return report.deployment


def lws(generation: int = 1, uid: str = "lws-1") -> dict[str, Any]:
    meta = {"name": GROUP, "generation": generation, "uid": uid}
    return {"kind": "LeaderWorkerSet", "metadata": meta}


def pod(
    uid: str,
    index: int = 0,
    *,
    scheduled: str = "",
    ready: str = "",
    waiting: str = "",
    terminated: dict[str, Any] | None = None,
    disrupted: str = "",
    ended: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod of the group; `disrupted`: the reason of its DisruptionTarget condition (it is
    being deleted); `ended`: its container's current state terminated so (its last run's is
    `terminated`)."""
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}]
    if ready:
        conditions.append({"type": "Ready", "status": "True", "lastTransitionTime": ready})
    if disrupted:
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": disrupted})
    state: dict[str, Any] = {"running": {}}
    if waiting:
        state = {"waiting": {"reason": waiting, "message": f"{waiting} for the image"}}
    if ended is not None:
        state = {"terminated": ended}
    container: dict[str, Any] = {"name": "vllm", "restartCount": 0, "state": state}
    if terminated is not None:
        container |= {"restartCount": 1, "lastState": {"terminated": terminated}}
    labels = {
        "kimi-operator.io/tp-group": GROUP,
        "leaderworkerset.sigs.k8s.io/worker-index": str(index),
    }
    meta = {"name": f"{GROUP}-{uid}-{index}", "uid": f"{uid}-{index}", "labels": labels}
    if disrupted or ended is not None:
        meta["deletionTimestamp"] = scheduled
    return {
        "metadata": meta,
        "status": {"conditions": conditions, "containerStatuses": [container]},
    }


def step(
    kd: Any,
    status: dict[str, Any],
    pods: list[dict[str, Any]] | None,
    now: str,
    *,
    gen: int = 1,
    group: str = "lws-1",
) -> dict[str, Any]:
    records = group_life.records(kd, status, {GROUP: lws(gen, group)}, pods, now=now)
    return {"groups": records}


def test_the_start_up_time_is_leader_scheduled_to_leader_ready_and_kept() -> None:
    kd = deployment()
    status = step(kd, {}, [pod("a", scheduled=at(0)), pod("a", 1, scheduled=at(0))], at(1))
    assert status["groups"][0]["startupSeconds"] is None
    assert group_life.unrecorded(status, {GROUP: lws()})
    status = step(kd, status, [pod("a", scheduled=at(0), ready=at(20.5))], at(21))
    (record,) = status["groups"]
    assert record["startupSeconds"] == 20.5 * 60
    assert not group_life.unrecorded(status, {GROUP: lws()})
    assert step(kd, status, None, at(30))["groups"][0]["startupSeconds"] == 20.5 * 60
    # A Ready group never seen, or whose leader was never seen (Ready between two reads, or
    # recorded when created): its pods are read, for the start-up time still to be recorded.
    assert group_life.unrecorded({}, {GROUP: lws()})
    assert group_life.unrecorded(step(kd, {}, [], at(1)), {GROUP: lws()})
    startups, failures = group_life.news({}, status["groups"])
    assert (startups, failures) == ([20.5 * 60], [])


def test_a_leader_first_seen_before_it_is_scheduled_still_gets_its_start_up_time() -> None:
    """A bug once (the reliability run's "two groups started", 2 of 14 runs on a loaded
    machine): a reconcile read the new leader before the scheduler bound it, recorded it with
    no start, and its start-up time was never recorded (startedAt stayed empty)."""
    kd = deployment()
    status = step(kd, {}, [pod("a")], at(0))  # created, not yet scheduled
    assert status["groups"][0]["startedAt"] == ""
    status = step(kd, status, [pod("a", scheduled=at(1))], at(2))
    assert status["groups"][0]["startedAt"] == at(1)
    status = step(kd, status, [pod("a", scheduled=at(1), ready=at(21))], at(22))
    assert status["groups"][0]["startupSeconds"] == 20 * 60


def test_a_crash_looping_group_is_stopped_after_its_budget_with_the_reason() -> None:
    kd = deployment(failures=3, windowMinutes=60)
    oom = {"exitCode": 137, "reason": "OOMKilled"}
    status: dict[str, Any] = {}
    for i, minute in enumerate((0, 5, 10)):
        # The pod seen failing, then the group recreated by LeaderWorkerSet: one failure.
        status = step(kd, status, [pod(f"p{i}", scheduled=at(minute), terminated=oom)], at(minute))
        status = step(kd, status, [pod(f"p{i + 1}", scheduled=at(minute + 1))], at(minute + 1))
        assert status["groups"][0]["restarts"] == i + 1
    (record,) = status["groups"]
    assert record["stopped"] is True
    assert record["lastFailure"]["reason"] == "OOMKilled"
    children = build_children(kd, OperatorDefaults())
    braked = group_life.braked(children, group_life.stopped(status["groups"]))
    (group,) = [c for c in braked if c["kind"] == "LeaderWorkerSet"]
    assert group["spec"]["replicas"] == 0  # not recreated any more
    problem = group_life.stopped_problem(kd, status["groups"])
    assert problem is not None
    assert problem.reason == "GroupStopped"
    assert "OOMKilled" in problem.message
    assert "kimi-operator.io/resume=" in problem.message


def test_failures_spread_wider_than_the_window_never_stop_it() -> None:
    kd = deployment(failures=3, windowMinutes=60)
    status = step(kd, {}, [pod("p0", scheduled=at(0))], at(0))
    for i, minute in enumerate((40, 80, 120, 160), start=1):
        status = step(kd, status, [pod(f"p{i}", scheduled=at(minute))], at(minute))
    (record,) = status["groups"]
    assert record["restarts"] == 4
    assert record["lastFailure"]["reason"] == "Recreated"
    assert not record.get("stopped")


def test_a_rollout_recreating_the_group_is_no_failure() -> None:
    kd = deployment(failures=1)
    status = step(kd, {}, [pod("p0", scheduled=at(0))], at(0), gen=1)
    status = step(kd, status, [pod("p1", scheduled=at(5))], at(5), gen=2)
    assert status["groups"][0]["restarts"] == 0
    assert not status["groups"][0].get("stopped")


def test_workers_giving_up_while_the_leader_pulls_its_image_are_excused_in_the_grace() -> None:
    kd = deployment(failures=1, startGraceMinutes=30)
    timeout = {"exitCode": 1, "reason": "Error", "message": "timed out waiting for the leader"}
    pulling = pod("p0", scheduled=at(0), waiting="ContainerCreating")
    status = step(kd, {}, [pulling, pod("p0", 1, scheduled=at(0), terminated=timeout)], at(10))
    assert status["groups"][0]["restarts"] == 0
    status = step(kd, status, [pulling, pod("p0", 1, scheduled=at(0), terminated=timeout)], at(31))
    (record,) = status["groups"]
    assert record["restarts"] == 1
    assert record["lastFailure"]["reason"] == "Crashed"
    assert record["stopped"] is True


def test_an_image_that_cannot_be_pulled_and_an_imex_failure_are_named() -> None:
    kd = deployment()
    status = step(kd, {}, [pod("p0", scheduled=at(0), waiting="ImagePullBackOff")], at(1))
    assert status["groups"][0]["lastFailure"]["reason"] == "ImagePull"
    # Seen again: the same failure, not another.
    status = step(kd, status, [pod("p0", scheduled=at(0), waiting="ImagePullBackOff")], at(2))
    assert status["groups"][0]["restarts"] == 1
    imex = {"exitCode": 1, "reason": "Error", "message": "NCCL error: IMEX channel not found"}
    status = step(kd, status, [pod("p0", 1, scheduled=at(0), terminated=imex)], at(3))
    assert status["groups"][0]["lastFailure"]["reason"] == "NcclOrImex"


def test_a_new_resume_value_restarts_a_stopped_group() -> None:
    kd = deployment(failures=1)
    status = step(kd, {}, [pod("p0", scheduled=at(0))], at(0))
    status = step(kd, status, [pod("p1", scheduled=at(1))], at(1))
    assert status["groups"][0]["stopped"] is True
    assert step(kd, status, None, at(2))["groups"][0]["stopped"] is True  # still, unasked
    resumed = deployment({"kimi-operator.io/resume": "1"}, failures=1)
    status = step(resumed, status, None, at(3))
    (record,) = status["groups"]
    assert record["stopped"] is False
    assert record["recentFailures"] == []
    assert record["restarts"] == 1  # the history stays


SIGTERM = {"exitCode": 143, "reason": "Error", "message": "terminated"}


def test_an_evicted_group_recreated_is_recorded_as_such_and_never_counted() -> None:
    """A worker evicted (kubectl drain, a node upgrade, a preemption: its DisruptionTarget
    condition), its container ended by the eviction, then the group recreated: no failure,
    however often (#48)."""
    kd = deployment(failures=1)
    status = step(kd, {}, [pod("p0", scheduled=at(0), ready=at(1))], at(1))
    for i, reason in enumerate(("EvictionByEvictionAPI", "PreemptionByScheduler"), start=1):
        leaving = pod(f"p{i - 1}", 1, scheduled=at(0), disrupted=reason, ended=SIGTERM)
        status = step(kd, status, [pod(f"p{i - 1}", scheduled=at(0)), leaving], at(i * 10))
        # Recreated: the new leader, with the evicted pod still terminating beside it.
        status = step(kd, status, [pod(f"p{i}", scheduled=at(i * 10)), leaving], at(i * 10 + 1))
        (record,) = status["groups"]
        assert (record["restarts"], record.get("stopped", False)) == (0, False)
        assert record["lastDisruption"]["reason"] == reason
    # The evicted pod, still listed, explains no later recreation: a crash is still counted.
    leaving = pod("p1", 1, scheduled=at(0), disrupted="PreemptionByScheduler", ended=SIGTERM)
    status = step(kd, status, [pod("p3", scheduled=at(30)), leaving], at(31))
    (record,) = status["groups"]
    assert (record["restarts"], record["lastFailure"]["reason"]) == (1, "Recreated")
    assert record["stopped"] is True


def test_a_group_made_anew_is_no_failure() -> None:
    """Scaled to zero and back (KEDA), or deleted and made again: a new LeaderWorkerSet's
    leader is a new group's, not a recreation, even where the old record is still there."""
    kd = deployment(failures=1)
    status = step(kd, {}, [pod("p0", scheduled=at(0), ready=at(1))], at(1))
    for i in range(1, 4):
        status = step(kd, status, [pod(f"p{i}", scheduled=at(i))], at(i), group=f"lws-{i + 1}")
        (record,) = status["groups"]
        assert (record["restarts"], record.get("stopped", False)) == (0, False)
        assert record["lastDisruption"]["reason"] == "Created"


def test_a_pod_ended_by_its_deletion_is_no_failure_but_its_earlier_crash_is() -> None:
    """A rollout or a scale-down deletes the pods: their containers end then (SIGTERM, or
    SIGKILL past the grace), which is no crash; a crash before the deletion still is."""
    kd = deployment(failures=3)
    killed = {"exitCode": 137, "reason": "Error"}
    status = step(kd, {}, [pod("p0", scheduled=at(0), ended=killed)], at(1))
    assert status["groups"][0]["restarts"] == 0
    oom = {"exitCode": 137, "reason": "OOMKilled"}
    status = step(kd, status, [pod("p0", scheduled=at(0), terminated=oom, ended=killed)], at(2))
    assert status["groups"][0]["lastFailure"]["reason"] == "OOMKilled"
