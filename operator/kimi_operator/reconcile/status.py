"""The status of one reconcile, a pure function of what it observed, decided and did (the answers of
its writes are the children as they are now), and the Warning Events to post. Written after the
writes, as Kubernetes' controllers do: it says what the cluster holds once they are made.
"""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kimi_operator import (
    caches,
    drain,
    group_life,
    group_set,
    prefill_scaling,
    rollout,
    routing,
    slo_roles,
    upgrades,
)
from kimi_operator import conditions as cond
from kimi_operator.api.problem import Problem
from kimi_operator.api.status import condition
from kimi_operator.builders import (
    VLLM_VERSION_ANNOTATION,
    OperatorDefaults,
    custom_all_reduce_disabled,
    serving_image,
    uses_compute_domain,
    vllm_version,
)
from kimi_operator.builders.images import ImageChoice
from kimi_operator.builders.meta import leader_selector
from kimi_operator.builders.serving import endpoint
from kimi_operator.builders.tracing import effective
from kimi_operator.controller.retry import retry_delay, temporary
from kimi_operator.k8s.errors import ApiError, KubernetesError, OwnerTerminating
from kimi_operator.k8s.merge import Applied
from kimi_operator.k8s.resources import COMPUTE_DOMAIN, LEADER_WORKER_SET, Resource
from kimi_operator.reconcile.decide import Decision, Observed, routing_missing
from kimi_operator.rollout import Steps


@dataclass
class Outcome:
    status: dict[str, Any]
    events: list[Problem] = field(default_factory=list)  # Warning Events to post
    applied: Applied = field(default_factory=Applied)
    error: KubernetesError | None = None  # the apply's failure, retried by the controller
    result: str = "reconciled"  # reconciled | invalid | error | terminating: for metrics
    # Reconcile again after this many seconds even if nothing is watched to change (a deadline).
    requeue_after_s: float | None = None
    # For the operator's metrics: groups' start-up times recorded now (seconds, fraction of the
    # budget), failures counted now (their reasons).
    startups: list[tuple[float, float]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    evacuations: list[str] = field(default_factory=list)  # evacuations begun now: their reasons
    # Normal Events: drains and evacuations begun and ended, the prefill autoscaler's changes.
    notices: list[Problem] = field(default_factory=list)
    # The plan dropped a child this reconcile may not have listed (the prefill autoscaler took a
    # group away): reconcile again at once, pruning, rather than at the next resync.
    prune_again: bool = False
    # A child kept for what still needs it (a ComputeDomain whose pods terminate): the next
    # reconcile, within `requeue_after_s`, prunes again.
    prune_later: bool = False


def terminating(old: Mapping[str, Any], generation: int | None, *, now: str) -> Outcome:
    """A deployment being deleted: its status only, Progressing `Terminating`, no Event. No
    failure of its own, whether the reconcile saw the deletion first or a write found it."""
    conditions = cond.terminating_conditions(old)
    status = cond.render(old, conditions, generation=generation, now=now)
    return Outcome(status, result="terminating")


def outcome(
    observed: Observed,
    decision: Decision,
    applied: Applied,
    error: KubernetesError | None,
    *,
    now: str,
    failures: int = 0,
    spec_changed: bool = False,
) -> Outcome:
    """`decision`: the one acted on (decide.stopped's when the reconcile stopped before the
    weights were known); `applied`: what the writes did; `error`: the read or write that failed.
    `failures`: temporary failures in a row before this reconcile (the backoff the status
    reports)."""
    kd, old, spec = observed.kd, observed.old, observed.kd.spec
    if isinstance(error, OwnerTerminating):  # deleted since it was read: not Degraded by that
        generation = observed.body.get("metadata", {}).get("generation")
        return dataclasses.replace(terminating(old, generation, now=now), error=error)
    plan, weights, steps, image = decision.plan, decision.weights, decision.steps, decision.image
    served = observed.served
    retrying: Problem | None = None
    failed: list[Problem] = []
    if isinstance(error, ApiError) and temporary(error):  # retried soon: the status says so
        retrying = cond.api_failure(error.code, str(error), retry_delay(error, failures))
    elif error is not None:
        failed.append(Problem("ApplyFailed", str(error)))
    blockers = [*plan.blockers, *failed, *weights.failed]
    defaults = plan.defaults
    every_group = [o for o in applied.live if o["kind"] == LEADER_WORKER_SET.kind]
    groups, prefill = _by_role(kd.metadata.name, every_group)
    domains = [o for o in applied.live if o["kind"] == COMPUTE_DOMAIN.kind]
    # A group draining is out of routing: unavailable, as the rollout counts it.
    ready = sum(1 for g in groups if rollout.serving(g))
    prefill_ready = sum(1 for g in prefill if rollout.serving(g))
    all_ready = ready + prefill_ready
    waits = not observed.first and all_ready < len(every_group) and retrying is None
    mode = spec.compute_domain
    prefill_wanted = spec.prefill.replicas if spec.prefill is not None else 0
    seen = cond.Observation(
        groups_wanted=spec.replicas,
        groups_present=len(groups),
        groups_ready=ready,
        prefill_wanted=prefill_wanted,
        prefill_present=len(prefill),
        prefill_ready=prefill_ready,
        endpoint=observed.gateway_endpoint or endpoint(kd),
        unschedulable=observed.unschedulable if waits else "",
        warnings=observed.warnings,
        blockers=blockers,
        weights_pending=weights.waiting,
        degradations=plan.degradations,
        compute_domain=(
            "Disabled"
            if mode == "Disabled"
            else ("InUse" if served[COMPUTE_DOMAIN] else "NotInstalled")
        ),
        domains_wanted=spec.replicas + prefill_wanted if uses_compute_domain(kd, defaults) else 0,
        domains_ready=sum(1 for d in domains if (d.get("status") or {}).get("status") == "Ready"),
        compute_domain_install=COMPUTE_DOMAIN.install,
        groups_updated=steps.updated if steps else 0,
        prefill_updated=decision.prefill_steps.updated if decision.prefill_steps else 0,
        rolling=bool(steps and steps.rolling),
        stalled=_stalled(observed, steps, decision.prefill_steps),
        waiting=_waiting(image),
        weights=weights.condition(),
        routing=_routing_ready(observed, applied, error, served),
        draining=drain.message(kd, decision.drains.draining),
        evacuating="; ".join(decision.group_set.progress),
        older_template=upgrades.message(kd, decision.older),
    )
    conditions = cond.valid_conditions(seen)
    tracing = effective(kd, defaults.tracing)  # its trace UI's link: bench's, from the status
    if retrying is not None:  # counts and endpoint as last observed too
        conditions = cond.retrying_conditions(old, conditions, retrying)
    status = cond.render(
        old,
        conditions,
        generation=observed.body.get("metadata", {}).get("generation"),
        now=now,
        counts=None if retrying else (len(groups), ready),
        prefill_counts=None if retrying else (len(prefill), prefill_ready),
        endpoint=None if retrying else (seen.endpoint if ready else ""),
        trace_url=tracing.ui_url if tracing else "",
        # After a failed apply, what the groups run is as last observed.
        rollout=None if error or not (image and steps) else _rollout(image, steps, decision.older),
        # Kept as they were after an error without a resolution: the caches were maybe not
        # released yet, and the next reconcile must know to.
        weights=(
            [w.model_dump() for w in weights.resolved.values()]
            if weights.resolved or error is None
            else None
        ),
        scale=cond.ScaleStatus(
            selector=leader_selector(kd),
            gpus=spec.gpus * (spec.replicas + prefill_wanted),
            autoscaler=plan.autoscaler,
        ),
        groups=None if error else decision.groups,
        evacuations=None if error else group_set.status(decision.group_set),
    )
    events = cond.newly_bad(old, status)
    startups, counted = group_life.news(old, status.get("groups") or [])
    if spec_changed:
        events += _spec_warnings(observed, defaults)
    return Outcome(
        status,
        events,
        applied,
        error,
        result="error" if error else "reconciled",
        requeue_after_s=_requeue_after(steps if not error else None, weights, decision),
        startups=[(s, s / (spec.serving.startup_timeout_minutes * 60)) for s in startups],
        failures=counted,
        evacuations=[] if error else decision.group_set.started,
        notices=[]
        if error
        else [Problem(*news) for news in [*decision.group_set.news, *decision.drains.news]],
        prune_later=bool(decision.awaiting) and error is None,
    )


def _spec_warnings(observed: Observed, defaults: OperatorDefaults) -> list[Problem]:
    """The Warning Events a spec gets once, when it is new: beyond the fast path, and the custom
    all-reduce turned off for images before vLLM 0.33.0 (docs/custom-all-reduce.md)."""
    kd = observed.kd
    events = [Problem("FastPathExceeded", w) for w in observed.warnings]
    if custom_all_reduce_disabled(kd, defaults):
        version = vllm_version(kd, defaults) or f"not declared ({VLLM_VERSION_ANNOTATION})"
        events.append(
            Problem(
                "CustomAllReduceDisabled",
                f"tensor parallelism across {kd.spec.nodes_per_group} nodes with image "
                f"{serving_image(kd, defaults)}, vLLM version {version}: before vLLM 0.33.0 "
                "the custom all-reduce opened CUDA IPC handles across nodes (vllm issue "
                "52778), so --disable-custom-all-reduce was added",
            )
        )
    return events


def _requeue_after(
    steps: Steps | None, weights: caches.Weights, decision: Decision
) -> float | None:
    """The soonest a rollout's deadline, a running weights Job (whose progress is watched
    nowhere), a group draining (its requests are watched nowhere either) or a ComputeDomain
    kept for its terminating pods (not watched) needs a look."""
    deadlines = [
        steps.requeue_after_s if steps else None,
        decision.drains.requeue_after_s,
        decision.await_poll_s,
    ]
    if weights.waiting and not weights.failed:
        deadlines.append(caches.POLL_S)
    return min((d for d in deadlines if d is not None), default=None)


def _routing_ready(
    observed: Observed,
    applied: Applied,
    error: KubernetesError | None,
    served: Mapping[Resource, bool],
) -> tuple[cond.Status, str, str]:
    """RoutingReady, kept as it was after a failed apply that may have left a pool unpruned (so
    that the next reconcile still lists the routing kinds: decide.had_routing)."""
    previous = condition(observed.old, "RoutingReady")
    if error is not None and previous:
        kept: cond.Status = previous.get("status", "Unknown")
        return kept, previous.get("reason", ""), previous.get("message", "")
    kd = observed.kd
    return routing.routing_condition(kd, applied.live, routing_missing(kd, served))


def _by_role(
    deployment: str, groups: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The groups of spec.replicas, and the prefill groups (`-p<i>`)."""
    decode: list[dict[str, Any]] = []
    prefill: list[dict[str, Any]] = []
    for group in groups:
        found = rollout.group_of(deployment, group["metadata"]["name"])
        (prefill if found is not None and found[0] == "p" else decode).append(group)
    return decode, prefill


def _stalled(observed: Observed, steps: Steps | None, prefill: Steps | None) -> str:
    kd = observed.kd
    by_role = [(steps, "aggregated"), (prefill, "prefill")]
    stalled = [(s, role) for s, role in by_role if s is not None and s.stalled]
    if not stalled:
        return ""
    names = ", ".join(s.names[i] for s, _ in stalled for i in s.stalled)
    held = sum(len(s.hold) for s, _ in stalled)
    deadline = kd.spec.rollout.progress_deadline_seconds
    return (
        f"{names} not Ready within spec.rollout.progressDeadlineSeconds ({deadline} s): the "
        f"rollout stopped; the {held} groups not yet updated keep serving"
    )


def _waiting(image: ImageChoice | None) -> str:
    if image is None or not image.waiting_for:
        return ""
    return (
        f"the operator's default image {image.pending} waits for {image.waiting_for} to finish "
        f"moving to it (one deployment at a time); running {image.image}"
    )


def _rollout(image: ImageChoice, steps: Steps, older: Mapping[str, str]) -> dict[str, Any]:
    """The status fields of the rollout and the image."""
    return {
        "updatedReplicas": steps.updated,
        "olderTemplateGroups": [{"name": n, "template": t} for n, t in sorted(older.items())],
        "image": image.image,
        "imageSource": image.source,
        "pendingImage": image.pending,
    }


def _polled(
    result: Outcome, key: str, memory: dict[str, Any] | None, notices: list[Problem], fewer: bool
) -> Outcome:
    """`result` with an operator autoscaler's memory at status `key` (dropped with None), its
    changes as Normal Events, a look again within its polling interval, and a pruning one at
    once after it took a group away."""
    status = dict(result.status)
    status.pop(key, None)
    if memory is None:
        return dataclasses.replace(result, status=status)
    status[key] = memory
    polls = [d for d in (result.requeue_after_s, prefill_scaling.POLL_S) if d is not None]
    return dataclasses.replace(
        result,
        status=status,
        notices=[*result.notices, *notices],
        requeue_after_s=min(polls),
        prune_again=result.prune_again or fewer,
    )


def scaled_outcome(result: Outcome, scaled: prefill_scaling.Scaled) -> Outcome:
    """`result` with the prefill autoscaler's evaluation (prefill_scaling.py) in
    status.prefillAutoscaler (dropped with spec.prefill.autoscaling's target)."""
    return _polled(result, "prefillAutoscaler", scaled.status, scaled.notices, scaled.fewer)


def slo_outcome(result: Outcome, scaled: slo_roles.SloScaled) -> Outcome:
    """`result` with the SLO scaler's evaluation (slo_roles.py) in status.sloAutoscaler
    (dropped without an slo), and status.autoscaler naming the operator with
    spec.autoscaling.slo."""
    polled = _polled(result, "sloAutoscaler", scaled.status, scaled.notices, scaled.fewer)
    if "decode" in slo_roles.roles(scaled.kd):
        polled.status["autoscaler"] = slo_roles.AUTOSCALER
    return polled
