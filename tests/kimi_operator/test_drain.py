"""drain.py, the drain of a group leaving, on a virtual clock: out of routing first, gone once its
leader holds no request or its grace passed, put back when wanted again."""

from typing import Any

import pytest

from kimi_operator import drain, rollout
from kimi_operator.api.validation import check_document
from kimi_operator.builders.disaggregation import routing_sidecar
from kimi_operator.builders.meta import LWS_WORKER_INDEX_LABEL, ROUTABLE_LABEL
from kimi_operator.builders.placement import GROUP_LABEL
from kimi_operator.rollout import DRAINING_ANNOTATION, Group, Strategy
from tests.support.cluster import sample

START = "2026-12-01T12:00:00Z"
LATER = "2026-12-01T12:00:30Z"  # 30 s on
PAST_GRACE = "2026-12-01T12:02:00Z"  # 120 s on: drainSeconds' default
GROUP = "k3-g1"


def kd(drain_seconds: int = 120) -> Any:
    doc = sample("k3-tp8-dspark")
    doc["spec"]["serving"] = {"drainSeconds": drain_seconds}
    report = check_document(doc)
    assert report.deployment is not None
    return report.deployment


def group(*, ready: bool = True, since: str | None = None) -> dict[str, Any]:
    annotations = {} if since is None else {DRAINING_ANNOTATION: since}
    meta = {"name": GROUP, "namespace": "inference", "resourceVersion": "11", "generation": 1}
    return {
        "kind": "LeaderWorkerSet",
        "metadata": meta | {"annotations": annotations},
        "spec": {"replicas": 1},
        "status": {"readyReplicas": 1 if ready else 0, "observedGeneration": 1},
    }


def pod(index: int, routable: str = "true") -> dict[str, Any]:
    labels = {LWS_WORKER_INDEX_LABEL: str(index), GROUP_LABEL: GROUP, ROUTABLE_LABEL: routable}
    return {
        "metadata": {
            "name": f"{GROUP}-0-{index}" if index else f"{GROUP}-0",
            "namespace": "inference",
            "resourceVersion": f"2{index}",
            "labels": labels,
        },
        "spec": {
            "containers": [{"name": "vllm", "ports": [{"name": "http", "containerPort": 8000}]}]
        },
        "status": {"podIP": "10.0.0.7"},
    }


def writes(step: drain.Drains | list[Any]) -> list[tuple[str, str, Any]]:
    found = step.writes if isinstance(step, drain.Drains) else step
    return [(w.resource.kind, w.name, dict(w.body or {})) for w in found]


def test_a_drain_starts_out_of_routing_and_recorded() -> None:
    step = drain.leave(kd(), group(), [pod(0), pod(1)], None, now=START)
    assert not step.go
    # The mark first (conditional on the group as read), then the leader only: the selectors
    # pick leaders; the workers keep their label.
    assert writes(step) == [
        (
            "LeaderWorkerSet",
            GROUP,
            {"metadata": {"annotations": {DRAINING_ANNOTATION: START}, "resourceVersion": "11"}},
        ),
        (
            "Pod",
            f"{GROUP}-0",
            {"metadata": {"labels": {ROUTABLE_LABEL: "false"}, "resourceVersion": "20"}},
        ),
    ]
    assert step.draining == [drain.Draining(GROUP, START, None)]
    assert step.requeue_after_s == drain.POLL_S


def test_a_group_holding_requests_is_kept_until_they_finish() -> None:
    out = [pod(0, "false"), pod(1)]
    holding = drain.leave(kd(), group(since=START), out, 3, now=LATER)
    assert (holding.go, writes(holding)) == (set(), [])
    assert holding.draining == [drain.Draining(GROUP, START, 3)]
    assert "3 requests in flight" in drain.message(kd(), holding.draining)
    assert "12:02:00Z" in drain.message(kd(), holding.draining)  # since + drainSeconds
    done = drain.leave(kd(), group(since=START), out, 0, now=LATER)
    assert (done.go, done.writes, done.draining) == ({GROUP}, [], [])


def test_no_answer_waits_for_the_grace() -> None:
    out = [pod(0, "false")]
    assert not drain.leave(kd(), group(since=START), out, None, now=LATER).go
    assert drain.leave(kd(), group(since=START), out, None, now=PAST_GRACE).go == {GROUP}
    # Requests still running past the grace: bounded all the same.
    assert drain.leave(kd(), group(since=START), out, 5, now=PAST_GRACE).go == {GROUP}


def test_a_leader_still_in_routing_is_taken_out_before_its_count_counts() -> None:
    """A leader back in routing (made anew by LeaderWorkerSet from its template) answering 0 has
    just been sent nothing: it is taken out first, its count trusted at the next look."""
    step = drain.leave(kd(), group(since=START), [pod(0)], 0, now=LATER)
    assert not step.go
    assert [(kind, name) for kind, name, _ in writes(step)] == [("Pod", f"{GROUP}-0")]


@pytest.mark.parametrize(
    ("spec_grace", "ready", "pods"),
    [
        (0, True, [pod(0)]),  # no drain asked for (vLLM's --shutdown-timeout 0 as well)
        (120, False, [pod(0)]),  # not Ready: in no endpoint, holding nothing
        (120, True, []),  # no leader pod at all
        (120, True, [pod(1)]),  # workers only: nothing serves HTTP
        (120, True, [pod(0) | {"status": {}}]),  # a leader without an IP was sent nothing
    ],
)
def test_nothing_to_drain_goes_at_once(spec_grace: int, ready: bool, pods: list[Any]) -> None:
    step = drain.leave(kd(spec_grace), group(ready=ready), pods, None, now=START)
    assert (step.go, step.writes, step.draining) == ({GROUP}, [], [])


def test_pods_not_read_mark_the_drain_only() -> None:
    """A rollout's drain begins before its pods are read: marked now, leaders out next time."""
    step = drain.leave(kd(), group(), None, None, now=START)
    assert [(kind, name) for kind, name, _ in writes(step)] == [("LeaderWorkerSet", GROUP)]
    assert not step.go


def test_wanted_again_puts_the_leaders_back_before_the_mark_goes() -> None:
    out = [pod(0, "false"), pod(1)]
    assert writes(drain.back(group(since=START), out)) == [
        (
            "Pod",
            f"{GROUP}-0",
            {"metadata": {"labels": {ROUTABLE_LABEL: "true"}, "resourceVersion": "20"}},
        ),
        (
            "LeaderWorkerSet",
            GROUP,
            {"metadata": {"annotations": {DRAINING_ANNOTATION: None}, "resourceVersion": "11"}},
        ),
    ]
    assert drain.back(group(since=START), None) == []  # its pods unknown: not yet
    assert drain.back(group(), out) == []  # not draining


def test_plan_drains_leaving_groups_only_when_pruning_and_puts_back_the_kept() -> None:
    live = {GROUP: group()}
    pods = [pod(0)]
    leaving = drain.plan(
        kd(), live, kept=set(), rewrites=set(), prune=True, pods=pods, counts={}, now=START
    )
    assert leaving.go == set()
    assert [d.name for d in leaving.draining] == [GROUP]
    assert not drain.plan(
        kd(), live, kept=set(), rewrites=set(), prune=False, pods=pods, counts={}, now=START
    ).writes
    marked = {GROUP: group(since=START)}
    kept = drain.plan(
        kd(), marked, kept={GROUP}, rewrites=set(), prune=False, pods=pods, counts={}, now=LATER
    )
    assert [(kind, name) for kind, name, _ in writes(kept)] == [("LeaderWorkerSet", GROUP)]
    rewritten = drain.plan(
        kd(), live, kept={GROUP}, rewrites={GROUP}, prune=False, pods=pods, counts={}, now=START
    )
    assert rewritten.hold == {GROUP}
    assert rewritten.go == set()


def test_in_flight_from_vllm_metrics() -> None:
    text = "\n".join(
        [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="moonshotai/Kimi-K3"} 2.0',
            'vllm:num_requests_running{engine="1",model_name="moonshotai/Kimi-K3"} 1.0',
            'vllm:num_requests_waiting{engine="0",model_name="moonshotai/Kimi-K3"} 4.0',
            'vllm:num_requests_waiting_by_reason{reason="capacity"} 9.0',
            "vllm:num_preemptions_total 7.0",
        ]
    )
    assert drain.in_flight(text) == 7
    assert drain.in_flight("vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n") == 0
    assert drain.in_flight("process_cpu_seconds_total 1.0\n") is None
    assert drain.in_flight("vllm:num_requests_running{} nan?\n") is None


def test_metrics_url_is_vllms_own_port_on_the_pod_ip() -> None:
    assert drain.metrics_url(pod(0)) == "http://10.0.0.7:8000/metrics"
    decode = pod(0)
    decode["spec"]["containers"][0]["ports"][0]["containerPort"] = 8200  # behind the sidecar
    assert drain.metrics_url(decode) == "http://10.0.0.7:8200/metrics"
    assert drain.metrics_url(pod(0) | {"status": {}}) is None  # no IP yet


def test_a_decode_leader_behind_the_sidecar_waits_its_whole_grace() -> None:
    """A bug once: behind llm-d's routing sidecar, vLLM's counts miss the requests the sidecar
    holds through their remote prefill, and a decode group read 0 was deleted with requests in
    the sidecar. llm-d-router v0.10.0's sidecar exposes no count of its own: unknown, unread."""
    decode = pod(0, "false")
    sidecar = routing_sidecar("ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.10.0", 8000, {})
    decode["spec"]["initContainers"] = [sidecar]
    assert drain.behind_sidecar(decode)
    assert drain.metrics_url(decode) is None  # not read: vLLM's 0 would not mean drained
    assert not drain.leave(kd(), group(since=START), [decode], None, now=LATER).go
    assert drain.leave(kd(), group(since=START), [decode], None, now=PAST_GRACE).go == {GROUP}


def test_a_draining_group_is_unavailable_to_the_rollout() -> None:
    """replicas 2, maxUnavailable 1: g0 draining for its new template takes the one slot; g1
    waits (counted as ready, g0 would have let g1 go too and left no group serving)."""
    draining = Group(updated=False, ready=rollout.serving(group(since=START)))
    steps = rollout.plan(
        2,
        {0: draining, 1: Group(updated=False, ready=True)},
        Strategy(max_unavailable=1),
        now=None,
        was_rolling=True,
    )
    assert steps.hold == frozenset({1})
    assert rollout.serving(group())
    assert not rollout.serving(group(since=START))


def test_pods_from_before_the_label_are_labelled_when_kept() -> None:
    """An operator upgraded onto running groups: the Service selects the label at once, the
    groups get it in their template only when they roll; their leaders are labelled first."""
    old = pod(0)
    del old["metadata"]["labels"][ROUTABLE_LABEL]
    assert writes(drain.back(group(), [old, pod(1)])) == [
        (
            "Pod",
            f"{GROUP}-0",
            {"metadata": {"labels": {ROUTABLE_LABEL: "true"}, "resourceVersion": "20"}},
        )
    ]
    assert drain.back(group(), [pod(0, "false")]) == []  # taken out by a person: left so
    before: dict[str, Any] = {
        "spec": {"leaderWorkerTemplate": {"leaderTemplate": {"metadata": {"labels": {}}}}}
    }
    assert drain.unlabelled(before)
    now = {
        "spec": {
            "leaderWorkerTemplate": {
                "leaderTemplate": {"metadata": {"labels": {ROUTABLE_LABEL: "true"}}}
            }
        }
    }
    assert not drain.unlabelled(now)
