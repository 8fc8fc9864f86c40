"""The plan and the status of one reconcile as tables, without any client: an observation in,
writes, deletes and status out (reconcile/decide.py, reconcile/status.py)."""

import copy
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from kimi_operator import caches, drain
from kimi_operator.api.problem import Problem
from kimi_operator.api.spec import TracingSpec
from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults
from kimi_operator.builders.meta import LWS_WORKER_INDEX_LABEL, ROUTABLE_LABEL
from kimi_operator.builders.nodes import CONDITION, CORDONED, Unfit
from kimi_operator.builders.placement import GROUP_LABEL, PREFERRED, kept_off
from kimi_operator.builders.weights import RETAIN_ANNOTATION
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.merge import APPLIED_ANNOTATION, Applied, drift_patch
from kimi_operator.k8s.resources import LEADER_WORKER_SET
from kimi_operator.reconcile import reconcile
from kimi_operator.reconcile.decide import UPSTREAM, Decision, Observed, decide
from kimi_operator.reconcile.status import Outcome, outcome
from kimi_operator.rollout import DRAINING_ANNOTATION, ROLLED_AT_ANNOTATION, is_updated
from kimi_operator.upgrades import INPUTS_ANNOTATION
from tests.support.cluster import condition, sample
from tests.support.corpus import COLLECTOR, JAEGER_UI

NOW = "2026-12-01T12:00:00Z"
UID = "uid-1"
NAME = "k3-tp8-dspark"
HF = {"huggingface": {"repo": "moonshotai/Kimi-K3"}}
COMMIT = "c0ffee"
DEFAULTS = OperatorDefaults()


def body(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    doc = sample(NAME)
    doc["metadata"] |= {"uid": UID, "generation": 2}
    doc["spec"] |= spec
    if status is not None:
        doc["status"] = status
    return doc


def observed(doc: dict[str, Any], **fields: Any) -> Observed:
    report = check_document(doc)
    assert report.deployment is not None, report.problems
    served = dict.fromkeys(UPSTREAM, True)
    return Observed(doc, report.deployment, served, **fields)


def names(children: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{c['kind']}/{c['metadata']['name']}" for c in children)


def ready(group: dict[str, Any]) -> dict[str, Any]:
    """`group` as a LeaderWorkerSet reports it once its pods are Ready."""
    meta = {**group["metadata"], "generation": 1}
    return {**group, "metadata": meta, "status": {"readyReplicas": 1, "observedGeneration": 1}}


def reconciled(doc: dict[str, Any]) -> dict[str, Any]:
    """A last status, as after a reconcile of `doc` whose groups all got ready."""
    seen = observed(doc)
    decision = decide(seen, DEFAULTS, now=NOW)
    return status_of(seen, decision, [ready(c) for c in decision.apply]).status


def status_of(seen: Observed, decision: Decision, live: list[dict[str, Any]]) -> Outcome:
    return outcome(seen, decision, Applied(live=live), None, now=NOW)


def outdated(live: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The groups of `live` as applied with another template (an image since changed)."""
    out = copy.deepcopy(live)
    for group in out:
        annotations = group["metadata"]["annotations"]
        annotations[APPLIED_ANNOTATION] = "{}"
        if INPUTS_ANNOTATION in annotations:
            inputs = json.loads(annotations[INPUTS_ANNOTATION])
            annotations[INPUTS_ANNOTATION] = json.dumps(inputs | {"image": "registry/old:1"})
    return out


GROUPS = [f"ComputeDomain/{NAME}-g0", f"LeaderWorkerSet/{NAME}-g0"]
REST = [
    f"PodDisruptionBudget/{NAME}",
    f"PodMonitor/{NAME}",
    f"Service/{NAME}",
]


def test_a_first_reconcile_creates_every_child() -> None:
    seen = observed(body(), first=True)
    decision = decide(seen, DEFAULTS, now=NOW)
    assert names(decision.apply) == sorted([*GROUPS, *REST])
    # The namespace's compile-cache claim, created or joined like a weights cache.
    assert [(w.verb, w.resource.kind, w.name) for w in decision.caches] == [
        ("create", "PersistentVolumeClaim", "kimi-compile-cache")
    ]
    assert (decision.held, decision.delete) == ([], [])
    status = status_of(seen, decision, decision.apply).status
    assert (status["replicas"], status["readyReplicas"]) == (1, 0)
    assert condition(status, "Ready")["status"] == "False"
    # The groups it creates are in status.groups already, as groups with no pod yet: the next
    # resync, finding them so, writes no status (operator_scale's quiet minute counted one a
    # deployment, and test_deposed_leader took the standby's for the deposed leader's).
    assert [(g["name"], g["leaderUid"], g["restarts"]) for g in status["groups"]] == [
        (f"{NAME}-g0", "", 0)
    ]


def test_the_compile_cache_claim_is_created_once_and_joined_by_nobody() -> None:
    """Every deployment of a namespace may use it: joining it by reference had them all patch one
    object, and under churn the conflicts never ended (make test-reliability's churn)."""
    seen = observed(body(), first=True)
    (create,) = decide(seen, DEFAULTS, now=NOW).caches
    assert create.body is not None
    meta = create.body["metadata"]
    assert meta["ownerReferences"] == []  # nobody's: kept until a person deletes it
    assert meta["annotations"][RETAIN_ANNOTATION] == "true"
    other = body()
    other["metadata"] |= {"name": "other", "uid": "uid-2"}
    there = observed(other, caches={("PersistentVolumeClaim", create.name): create.body})
    assert decide(there, DEFAULTS, now=NOW).caches == []


def test_a_template_change_rolls_one_group_at_a_time() -> None:
    doc = body(replicas=2)
    first = decide(observed(doc), DEFAULTS, now=NOW)
    live = {
        g["metadata"]["name"]: ready(g)
        for g in outdated(first.apply)
        if g["kind"] == "LeaderWorkerSet"
    }
    # Their pods read, and none: no leader holds a request, nothing to drain (test_drain.py).
    seen = observed(body(reconciled(doc), replicas=2), groups=live, pods=[])
    decision = decide(seen, DEFAULTS, now=NOW)
    written = [c for c in decision.apply if c["kind"] == LEADER_WORKER_SET.kind]
    assert names(written) == [f"LeaderWorkerSet/{NAME}-g0"]  # maxUnavailable 1
    assert names(decision.held) == [f"LeaderWorkerSet/{NAME}-g1"]
    assert decision.steps is not None
    assert decision.steps.rolling
    status = status_of(seen, decision, [*decision.apply, *decision.held]).status
    assert status["updatedReplicas"] == 1
    assert condition(status, "Progressing")["status"] == "True"


def _weights(status: dict[str, Any]) -> dict[str, Any]:
    doc = body(model={"name": "moonshotai/Kimi-K3", "source": HF})
    entry = {
        "role": "model",
        "repo": "moonshotai/Kimi-K3",
        "revision": "main",
        "commit": COMMIT,
        "bytes": 1000,
    }
    doc["status"] = {**status, "weights": [entry]}
    return doc


def test_groups_wait_for_the_weights_and_are_not_pruned_meanwhile() -> None:
    doc = body(reconciled(body()), model={"name": "moonshotai/Kimi-K3", "source": HF})
    (job,) = caches.unresolved(observed(doc).kd, doc["status"])  # never resolved
    running = decide(observed(body(replicas=2)), DEFAULTS, now=NOW).apply  # g1 left to prune
    seen = observed(
        doc,
        prune=True,
        resolving={job: (None, {})},
        children=listed(running),
    )
    decision = decide(seen, DEFAULTS, now=NOW)
    assert not set(GROUPS) & set(names(decision.apply))
    assert [w.name for w in decision.delete] == []
    result = status_of(seen, decision, decision.apply)
    weights = condition(result.status, "WeightsReady")
    assert (weights["status"], weights["reason"]) == ("False", "Resolving")
    assert result.requeue_after_s == 30.0  # a running Job is polled


def with_uid(child: dict[str, Any]) -> dict[str, Any]:
    """`child` as listed: controlled by the deployment, with the API server's uid and version."""
    refs = [{"uid": UID, "controller": True}]
    made = {"uid": f"uid-of-{child['metadata']['name']}", "resourceVersion": "7"}
    return {**child, "metadata": {**child["metadata"], **made, "ownerReferences": refs}}


def listed(children: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """`children` as a prune's lists find them, by kind."""
    out: dict[str, list[dict[str, Any]]] = {}
    for child in children:
        out.setdefault(child["kind"], []).append(with_uid(child))
    return out


def test_a_scale_down_prunes_the_surplus_groups_only() -> None:
    two = decide(observed(body(replicas=2)), DEFAULTS, now=NOW).apply
    found = listed(two)
    other = with_uid(two[0]) | {
        "metadata": {**two[0]["metadata"], "name": "x", "ownerReferences": []}
    }
    found[two[0]["kind"]].append(other)  # not the deployment's: left alone
    scaled = body(reconciled(body(replicas=2)), replicas=1)
    seen = observed(scaled, prune=True, children=found, pods=[])  # no pod left of g1
    decision = decide(seen, DEFAULTS, now=NOW)
    assert sorted(f"{w.resource.kind}/{w.name}" for w in decision.delete) == [
        f"ComputeDomain/{NAME}-g1",
        f"LeaderWorkerSet/{NAME}-g1",
    ]
    assert decision.awaiting == []
    # Its pods still terminating (they claim the domain's channel), or not read: the domain
    # stays, for a later reconcile.
    claim = {"name": "channel", "resourceClaimTemplateName": f"{NAME}-g1-channel"}
    terminating = {"metadata": {"name": f"{NAME}-g1-0"}, "spec": {"resourceClaims": [claim]}}
    for pods in ([terminating], None):
        seen = observed(scaled, prune=True, children=found, pods=pods)
        decision = decide(seen, DEFAULTS, now=NOW)
        deleted = [f"{w.resource.kind}/{w.name}" for w in decision.delete]
        assert deleted == [f"LeaderWorkerSet/{NAME}-g1"], pods
        assert decision.awaiting == [f"{NAME}-g1"]
    assert {w.verb for w in decision.delete} == {"delete"}
    # Each conditional on the object as listed (docs/architecture.md, "Write rules").
    wanted = {"uid": f"uid-of-{NAME}-g1", "resourceVersion": "7"}
    assert all(w.precondition == wanted for w in decision.delete)


def test_no_prune_lists_nothing_to_delete() -> None:
    seen = observed(body(reconciled(body(replicas=2)), replicas=1))
    assert decide(seen, DEFAULTS, now=NOW).delete == []


def test_a_quota_refusal_of_a_cache_stops_the_weights_and_the_groups() -> None:
    doc = _weights(reconciled(body()))
    seen = observed(doc)
    planned = decide(seen, DEFAULTS, now=NOW)
    assert [(w.verb, w.resource.kind) for w in planned.caches] == [
        ("create", "PersistentVolumeClaim"),  # the compile cache
        ("create", "PersistentVolumeClaim"),
        ("create", "Job"),
    ]
    refusal = Problem("QuotaExceeded", 'persistentvolumeclaims "c" is forbidden: exceeded quota')
    decision = decide(seen, DEFAULTS, now=NOW, refused=refusal)
    assert decision.caches == []
    assert not set(GROUPS) & set(names(decision.apply))
    result = status_of(seen, decision, decision.apply)
    weights = condition(result.status, "WeightsReady")
    assert (weights["status"], weights["reason"]) == ("False", "QuotaExceeded")
    assert result.requeue_after_s is None  # a person raises a quota: the resync looks again


def test_downloaded_weights_let_the_groups_be_written() -> None:
    doc = _weights(reconciled(body()))
    seen = observed(doc)
    complete = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    for write in decide(seen, DEFAULTS, now=NOW).caches:
        assert write.body is not None
        found = {**write.body, **(complete if write.resource.kind == "Job" else {})}
        seen.caches[(write.resource.kind, write.name)] = found
    decision = decide(seen, DEFAULTS, now=NOW)
    assert decision.caches == []  # already this deployment's
    assert set(GROUPS) <= set(names(decision.apply))
    weights = condition(status_of(seen, decision, decision.apply).status, "WeightsReady")
    assert (weights["status"], weights["reason"]) == ("True", "Downloaded")


# The deployment's spec and metadata, and the status it gets without reading the cluster.
NO_CLIENT: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    (
        "terminating",
        lambda d: d["metadata"].update(deletionTimestamp=NOW),
        "terminating",
        "Terminating",
    ),
    ("invalid", lambda d: d["spec"].update(gpus=12), "invalid", "SpecInvalid"),
]


@pytest.mark.parametrize(
    ("case", "change", "result", "reason"), NO_CLIENT, ids=[c[0] for c in NO_CLIENT]
)
def test_a_deployment_being_deleted_or_invalid_gets_its_status_only(
    case: str, change: Callable[[dict[str, Any]], None], result: str, reason: str
) -> None:
    doc = body(reconciled(body()))
    change(doc)
    # Nothing listens there: any read or write would raise.
    nowhere = Client(load_configuration("http://127.0.0.1:9"), timeout_s=1.0)
    out = reconcile(doc, nowhere, DEFAULTS, spec_changed=False, now=NOW)
    assert (out.result, out.error, out.applied) == (result, None, Applied())
    assert (
        condition(out.status, "Progressing" if case == "terminating" else "Degraded")["reason"]
        == reason
    )


# --- a group leaving drains first (drain.py; docs/group-lifecycle.md, "Leaving") --------------

LATER = "2026-12-01T12:00:30Z"


def leader_pod(group: str, routable: str = "true") -> dict[str, Any]:
    labels = {LWS_WORKER_INDEX_LABEL: "0", GROUP_LABEL: group, ROUTABLE_LABEL: routable}
    meta = {"name": f"{group}-0", "namespace": "inference", "resourceVersion": "3"}
    return {"metadata": meta | {"labels": labels}, "spec": {}, "status": {"podIP": "10.0.0.9"}}


def marked(group: dict[str, Any]) -> dict[str, Any]:
    annotations = {**group["metadata"]["annotations"], DRAINING_ANNOTATION: NOW}
    return {**group, "metadata": {**group["metadata"], "annotations": annotations}}


def two_ready(mark: bool = False) -> tuple[dict[str, dict[str, Any]], dict[str, list[Any]]]:
    """Two groups, Ready, as listed (g1 marked draining with `mark`), and every child listed."""
    two = decide(observed(body(replicas=2)), DEFAULTS, now=NOW).apply
    found = listed(two)
    found[LEADER_WORKER_SET.kind] = [ready(g) for g in found[LEADER_WORKER_SET.kind]]
    if mark:
        found[LEADER_WORKER_SET.kind][1] = marked(found[LEADER_WORKER_SET.kind][1])
    groups = {g["metadata"]["name"]: g for g in found[LEADER_WORKER_SET.kind]}
    return groups, found


def drain_writes(decision: Decision) -> list[tuple[str, str, Any]]:
    return [(w.resource.kind, w.name, (w.body or {})["metadata"]) for w in decision.drains.writes]


def test_a_scale_down_takes_a_ready_group_out_of_routing_and_keeps_it() -> None:
    groups, found = two_ready()
    seen = observed(
        body(reconciled(body(replicas=2)), replicas=1),
        prune=True,
        children=found,
        groups=groups,
        pods=[leader_pod(f"{NAME}-g0"), leader_pod(f"{NAME}-g1")],
    )
    decision = decide(seen, DEFAULTS, now=NOW)
    assert decision.delete == []  # neither the group nor its ComputeDomain yet
    assert drain_writes(decision) == [
        (
            "LeaderWorkerSet",
            f"{NAME}-g1",
            {"annotations": {DRAINING_ANNOTATION: NOW}, "resourceVersion": "7"},
        ),
        ("Pod", f"{NAME}-g1-0", {"labels": {ROUTABLE_LABEL: "false"}, "resourceVersion": "3"}),
    ]
    result = status_of(seen, decision, [ready(c) for c in decision.apply])
    progressing = condition(result.status, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("True", "Draining")
    assert progressing["message"].startswith(f"{NAME}-g1 out of routing, draining")
    assert condition(result.status, "Ready")["status"] == "True"
    assert result.requeue_after_s == drain.POLL_S
    assert [e.reason for e in result.notices] == ["DrainStarted"]


def test_a_drained_group_is_pruned_with_its_compute_domain() -> None:
    groups, found = two_ready(mark=True)
    doc = body(reconciled(body(replicas=2)), replicas=1)
    pods = [leader_pod(f"{NAME}-g1", "false")]

    def deciding(count: int | None, now: str) -> Decision:
        seen = observed(
            doc,
            prune=True,
            children=found,
            groups=groups,
            pods=pods,
            in_flight={f"{NAME}-g1": count},
        )
        return decide(seen, DEFAULTS, now=now)

    assert deciding(2, LATER).delete == []  # holding requests, within its grace
    for done in (deciding(0, LATER), deciding(2, "2026-12-01T12:02:00Z")):  # finished; grace
        assert sorted(f"{w.resource.kind}/{w.name}" for w in done.delete) == [
            f"ComputeDomain/{NAME}-g1",
            f"LeaderWorkerSet/{NAME}-g1",
        ]
        assert done.drains.writes == []
        assert [reason for reason, _ in done.drains.news] == ["Drained"]


def test_a_group_wanted_again_is_put_back_into_routing() -> None:
    groups, found = two_ready(mark=True)
    seen = observed(
        body(reconciled(body(replicas=2)), replicas=2),
        prune=True,
        children=found,
        groups=groups,
        pods=[leader_pod(f"{NAME}-g1", "false")],
    )
    decision = decide(seen, DEFAULTS, now=LATER)
    assert decision.delete == []
    assert drain_writes(decision) == [
        ("Pod", f"{NAME}-g1-0", {"labels": {ROUTABLE_LABEL: "true"}, "resourceVersion": "3"}),
        (
            "LeaderWorkerSet",
            f"{NAME}-g1",
            {"annotations": {DRAINING_ANNOTATION: None}, "resourceVersion": "7"},
        ),
    ]


def test_a_rollout_drains_a_group_before_writing_its_new_template() -> None:
    doc = body(replicas=2)
    first = decide(observed(doc), DEFAULTS, now=NOW)
    live = {
        g["metadata"]["name"]: with_uid(ready(g))
        for g in outdated(first.apply)
        if g["kind"] == "LeaderWorkerSet"
    }
    pods = [leader_pod(f"{NAME}-g0"), leader_pod(f"{NAME}-g1")]
    seen = observed(body(reconciled(doc), replicas=2), groups=live, pods=pods)
    decision = decide(seen, DEFAULTS, now=NOW)
    assert not [c for c in decision.apply if c["kind"] == LEADER_WORKER_SET.kind]
    assert names(decision.held) == [f"LeaderWorkerSet/{NAME}-g0", f"LeaderWorkerSet/{NAME}-g1"]
    assert [(kind, name) for kind, name, _ in drain_writes(decision)] == [
        ("LeaderWorkerSet", f"{NAME}-g0"),  # one at a time: maxUnavailable 1
        ("Pod", f"{NAME}-g0-0"),
    ]
    assert decision.steps is not None
    assert decision.steps.updated == 0  # held while it drains
    # Drained: its template is written, the mark removed in the same (conditional) patch.
    live[f"{NAME}-g0"] = marked(live[f"{NAME}-g0"])
    pods[0] = leader_pod(f"{NAME}-g0", "false")
    seen = observed(
        body(reconciled(doc), replicas=2), groups=live, pods=pods, in_flight={f"{NAME}-g0": 0}
    )
    decision = decide(seen, DEFAULTS, now=LATER)
    (written,) = [c for c in decision.apply if c["kind"] == LEADER_WORKER_SET.kind]
    assert written["metadata"]["name"] == f"{NAME}-g0"
    assert written["metadata"]["annotations"][DRAINING_ANNOTATION] is None
    # g1 waits: g0 draining counted unavailable, whatever its LeaderWorkerSet says.
    assert names(decision.held) == [f"LeaderWorkerSet/{NAME}-g1"]
    assert decision.drains.writes == []


def lws_names(children: list[dict[str, Any]]) -> list[str]:
    return sorted(c["metadata"]["name"] for c in children if c["kind"] == LEADER_WORKER_SET.kind)


def test_max_surge_gives_the_prefill_role_a_surge_group_too() -> None:
    """A prefill edit with maxSurge 1, maxUnavailable 0: the one prefill group keeps serving
    while `-p1` loads the new template, is rewritten once `-p1` is Ready, and `-p1` goes at the
    end. With no prefill surge group, the deployment had no prefill group for a whole reload."""
    spec: dict[str, Any] = {
        "routing": {"mode": "InferencePool"},
        "prefill": {"replicas": 1},
        "rollout": {"maxSurge": 1, "maxUnavailable": 0},
    }
    edited = spec | {"prefill": {"replicas": 1, "engineArgs": ["--max-num-batched-tokens=16384"]}}
    first = decide(observed(body(**spec)), DEFAULTS, now=NOW).apply
    assert lws_names(first) == [f"{NAME}-g0", f"{NAME}-p0"]  # no surge without a rollout
    live = {
        g["metadata"]["name"]: with_uid(ready(g)) for g in first if g["kind"] == "LeaderWorkerSet"
    }
    old = reconciled(body(**spec))

    # The surge group first; the prefill group serving is held; the decode role is not rolling.
    seen = observed(body(old, **edited), groups=live, pods=[])
    decision = decide(seen, DEFAULTS, now=NOW)
    assert lws_names(decision.apply) == [f"{NAME}-g0", f"{NAME}-p1"]
    assert names(decision.held) == [f"LeaderWorkerSet/{NAME}-p0"]
    assert f"ComputeDomain/{NAME}-p1" in names(decision.apply)
    assert decision.prefill_steps is not None
    assert (decision.prefill_steps.rolling, decision.prefill_steps.spares) == (True, 1)
    assert decision.steps is not None
    assert decision.steps.spares == 0  # no decode surge group: its template did not change
    status = status_of(seen, decision, [*decision.apply, *decision.held]).status
    assert condition(status, "Progressing")["reason"] == "RollingOut"

    # The surge group Ready: the old prefill group is rewritten (one ready group stays: -p1).
    (surge,) = [c for c in decision.apply if lws_names([c]) == [f"{NAME}-p1"]]
    live[f"{NAME}-p1"] = with_uid(ready(surge))
    seen = observed(body(old, **edited), groups=live, pods=[])
    decision = decide(seen, DEFAULTS, now=LATER)
    assert lws_names(decision.apply) == [f"{NAME}-g0", f"{NAME}-p0", f"{NAME}-p1"]
    assert decision.held == []

    # Both updated and Ready: the surge group is pruned, with its ComputeDomain.
    (rewritten,) = [c for c in decision.apply if lws_names([c]) == [f"{NAME}-p0"]]
    live[f"{NAME}-p0"] = with_uid(ready(rewritten))
    children = [*first, surge, *(c for c in decision.apply if c["kind"] == "ComputeDomain")]
    seen = observed(
        body(old, **edited), groups=live, pods=[], prune=True, children=listed(children)
    )
    decision = decide(seen, DEFAULTS, now=LATER)
    assert lws_names(decision.apply) == [f"{NAME}-g0", f"{NAME}-p0"]
    assert sorted(f"{w.resource.kind}/{w.name}" for w in decision.delete) == [
        f"ComputeDomain/{NAME}-p1",
        f"LeaderWorkerSet/{NAME}-p1",
    ]


EARLIER = "2026-12-01T11:00:00Z"


def stopped_status(doc: dict[str, Any], failed_at: str) -> dict[str, Any]:
    """The last status of `doc` with its group g1 stopped by the brake after a failure at
    `failed_at`."""
    status = reconciled(doc)
    failure = {"reason": "OOMKilled", "message": "exited with 137", "at": failed_at}
    status["groups"] = [
        g | {"stopped": True, "lastFailure": failure, "restarts": 3}
        if g["name"] == f"{NAME}-g1"
        else g
        for g in status["groups"]
    ]
    return status


def braked_live(
    applied: list[dict[str, Any]], rolled_at: str, *, template: str = ""
) -> dict[str, dict[str, Any]]:
    """The groups as listed, g1 at 0 replicas (its pods gone, none Ready), each written at
    `rolled_at` (`template`: the applied template, another one than the spec's)."""
    live = {}
    for child in applied:
        if child["kind"] != LEADER_WORKER_SET.kind:
            continue
        group = copy.deepcopy(with_uid(ready(child)))
        group["metadata"]["annotations"][ROLLED_AT_ANNOTATION] = rolled_at
        if template:
            group["metadata"]["annotations"][APPLIED_ANNOTATION] = template
        if group["metadata"]["name"] == f"{NAME}-g1":
            group["spec"] = {**group["spec"], "replicas": 0}
            group["status"] = {"readyReplicas": 0, "observedGeneration": 1}
        live[group["metadata"]["name"]] = group
    return live


def test_a_stopped_group_is_not_ready_and_not_rewritten_while_nothing_changes() -> None:
    """The brake sets g1 to 0 replicas: 0 Ready of 0 wanted is not a Ready group (#48)."""
    doc = body(replicas=2)
    first = decide(observed(doc), DEFAULTS, now=NOW)
    live = braked_live(first.apply, EARLIER)
    seen = observed(body(stopped_status(doc, EARLIER), replicas=2), groups=live, pods=[])
    decision = decide(seen, DEFAULTS, now=LATER)
    groups = {c["metadata"]["name"]: c for c in decision.apply if c["kind"] == "LeaderWorkerSet"}
    g1 = groups[f"{NAME}-g1"]
    assert g1["spec"]["replicas"] == 0
    # Its template is the one it has: no new rolled-at, so no write (it was one a reconcile).
    assert g1["metadata"]["annotations"][ROLLED_AT_ANNOTATION] == EARLIER
    assert decision.steps is not None
    assert not decision.steps.rolling
    status = status_of(seen, decision, list(live.values())).status
    assert (status["replicas"], status["readyReplicas"], status["stoppedGroups"]) == (2, 1, 1)
    assert condition(status, "Ready")["status"] == "False"
    assert condition(status, "Degraded")["reason"] == "GroupStopped"


def test_a_rollout_never_takes_the_last_serving_group_while_another_is_stopped() -> None:
    doc = body(replicas=2)
    first = decide(observed(doc), DEFAULTS, now=NOW)
    live = braked_live(first.apply, EARLIER, template="{}")
    pods = [leader_pod(f"{NAME}-g0")]
    seen = observed(body(stopped_status(doc, EARLIER), replicas=2), groups=live, pods=pods)
    decision = decide(seen, DEFAULTS, now=LATER)
    # g0 serves alone: held, neither drained nor rewritten; g1 (down) gets the new template.
    assert drain_writes(decision) == []
    assert names(decision.held) == [f"LeaderWorkerSet/{NAME}-g0"]
    (g1,) = [c for c in decision.apply if c["kind"] == LEADER_WORKER_SET.kind]
    assert (g1["metadata"]["name"], g1["spec"]["replicas"]) == (f"{NAME}-g1", 0)
    assert decision.steps is not None
    assert decision.steps.rolling


def test_a_group_stopped_before_its_template_was_written_holds_no_image_turn() -> None:
    """Following a new default image: a group stopped on its old template waits for a person,
    not for the image, so the deployment lets the next one move; stopped on the template the
    rollout wrote (a broken default image), it keeps the turn (docs/rollout.md)."""
    default = dataclasses.replace(DEFAULTS, serving_image="registry.example/vllm:new")
    doc = body(replicas=2)
    first = decide(observed(doc), DEFAULTS, now=NOW)
    for failed_at, gate in ((EARLIER, "release"), (LATER, "hold")):
        live = braked_live(first.apply, NOW, template="{}")
        status = stopped_status(doc, failed_at) | {"imageSource": "OperatorDefault"}
        status["image"] = default.serving_image
        seen = observed(body(status, replicas=2), groups=live, pods=[leader_pod(f"{NAME}-g0")])
        decision = decide(seen, default, now=LATER)
        assert decision.steps is not None
        assert decision.steps.rolling
        assert decision.gate == gate, failed_at


def test_a_group_stopped_while_a_rollout_is_stalled_is_still_braked() -> None:
    """A stalled rollout touches no outdated group, but the brake is no template change: a
    group whose budget ran out goes to 0 replicas all the same."""
    doc = body(replicas=2)
    first = decide(observed(doc), DEFAULTS, now=NOW)
    live = braked_live(first.apply, EARLIER, template="{}")
    g1 = live[f"{NAME}-g1"]
    g1["spec"]["replicas"] = 1  # stopped by this reconcile: still at 1 replica, restarting
    g1["metadata"]["annotations"][APPLIED_ANNOTATION] = "{}"
    g0 = live[f"{NAME}-g0"]  # updated long ago and never Ready: the rollout is stalled
    g0["status"] = {"readyReplicas": 0, "observedGeneration": 1}
    current = [c for c in first.apply if c["metadata"]["name"] == f"{NAME}-g0"]
    g0["metadata"]["annotations"][APPLIED_ANNOTATION] = next(
        c["metadata"]["annotations"][APPLIED_ANNOTATION]
        for c in current
        if c["kind"] == LEADER_WORKER_SET.kind
    )
    status = stopped_status(doc, LATER)
    status["conditions"] = [
        c | {"reason": "RollingOut"} if c["type"] == "Progressing" else c
        for c in status["conditions"]
    ]
    seen = observed(body(status, replicas=2), groups=live, pods=[])
    decision = decide(seen, DEFAULTS, now="2026-12-01T14:00:00Z")
    assert decision.steps is not None
    assert decision.steps.stalled == (0,)
    written = {c["metadata"]["name"]: c for c in decision.apply if c["kind"] == "LeaderWorkerSet"}
    assert written[f"{NAME}-g1"]["spec"]["replicas"] == 0


TEMPO_UI = "https://tempo.example/trace/{trace_id}"
INHERITED = TracingSpec.model_validate({"endpoint": COLLECTOR, "uiUrl": TEMPO_UI})


@pytest.mark.parametrize(
    ("own", "default", "wanted"),
    [
        ({"endpoint": COLLECTOR, "uiUrl": JAEGER_UI}, INHERITED, JAEGER_UI),
        ({"endpoint": COLLECTOR}, INHERITED, ""),  # its own tracing, without a link
        (None, INHERITED, TEMPO_UI),
        ({"endpoint": ""}, INHERITED, ""),  # the operator's default turned off
        (None, None, ""),
    ],
)
def test_status_trace_url_is_the_trace_ui_of_the_tracing_it_runs_with(
    own: dict[str, Any] | None, default: TracingSpec | None, wanted: str
) -> None:
    """What `bench --deployment` links the slowest turns with (bench/deployment.py)."""
    doc = body(**({"observability": {"tracing": own}} if own is not None else {}))
    defaults = OperatorDefaults(tracing=default)
    seen = observed(doc, first=True)
    decision = decide(seen, defaults, now=NOW)
    status = outcome(seen, decision, Applied(live=decision.apply), None, now=NOW).status
    assert status["traceUrl"] == wanted


def test_a_group_made_while_a_node_has_a_condition_is_kept_off_that_node() -> None:
    """#56: kube-scheduler keeps pods off cordoned and tainted nodes, never off a node whose only
    problem is a condition. The replacement made for a group on such a node prefers every other
    node (and every node with a condition known then) by name; the group it replaces is not
    rewritten, nor is the replacement once the node is fit again (no restart for it)."""
    doc = body(replicas=1)
    first = decide(observed(doc), DEFAULTS, now=NOW)
    g0 = next(with_uid(ready(c)) for c in first.apply if c["kind"] == LEADER_WORKER_SET.kind)
    pod = leader_pod(f"{NAME}-g0") | {"spec": {"nodeName": "tray-1"}}
    failing = {
        "tray-1": Unfit(CONDITION, "has condition GpuXidWatch"),
        "tray-7": Unfit(CONDITION, "has condition GpuMemWatch"),
        "tray-9": Unfit(CORDONED, ""),  # the scheduler's own to avoid
    }
    live = {f"{NAME}-g0": g0}
    seen = observed(body(reconciled(doc), replicas=1), groups=live, pods=[pod], unfit=failing)
    decision = decide(seen, DEFAULTS, now=NOW)
    written = {c["metadata"]["name"]: c for c in decision.apply if c["kind"] == "LeaderWorkerSet"}
    replacement = written[f"{NAME}-g1"]
    away = {"key": "metadata.name", "operator": "NotIn", "values": ["tray-1", "tray-7"]}
    for role in ("leaderTemplate", "workerTemplate"):
        affinity = replacement["spec"]["leaderWorkerTemplate"][role]["spec"]["affinity"]
        preferred = affinity["nodeAffinity"][PREFERRED]
        assert preferred == [{"weight": 100, "preference": {"matchFields": [away]}}]
        kept = written[f"{NAME}-g0"]["spec"]["leaderWorkerTemplate"][role]["spec"]
        assert "nodeAffinity" not in kept["affinity"]
    assert "spec" not in (drift_patch(g0, written[f"{NAME}-g0"]) or {})  # g0 not rewritten
    # Made as written and Ready; the node fit again: the replacement is not rewritten.
    made = with_uid(ready(replacement))
    live = {f"{NAME}-g0": g0, f"{NAME}-g1": made}
    later = decide(
        observed(body(reconciled(doc), replicas=1), groups=live, pods=[]), DEFAULTS, now=NOW
    )
    (again,) = [c for c in later.apply if c["kind"] == "LeaderWorkerSet"]  # g0 held: draining
    assert again["metadata"]["name"] == f"{NAME}-g1"
    assert is_updated(made, again)
    assert "spec" not in (drift_patch(made, again) or {})


def test_a_spec_with_preferred_node_terms_of_its_own_is_left_as_written() -> None:
    """A longer preferred list would not be covered by the one the operator wants on the next
    reconcile (k8s.merge.covers): the group would be rewritten, restarted. Left alone."""
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    affinity = {"nodeAffinity": {PREFERRED: [{"weight": 1, "preference": term}]}}
    doc = body(replicas=1, scheduling={"affinity": affinity})
    made = decide(observed(doc), DEFAULTS, now=NOW).apply
    (group,) = [c for c in made if c["kind"] == "LeaderWorkerSet"]
    assert kept_off(group, ["a"]) == group
