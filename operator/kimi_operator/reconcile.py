"""One reconcile of one KimiDeployment: validate → build → apply → status.

The controller (controller/loop.py) calls `reconcile` and writes what it returns. Building the
children is pure; the API calls (listing and discovering what exists, applying, deleting what is
no longer wanted) are not. `k8s`'s errors end them; the controller decides whether to retry.
"""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kimi_operator import caches, rollout, routing
from kimi_operator import conditions as cond
from kimi_operator.api.problem import INVALID, Problem
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.api.status import ROLLING_REASONS, progressing_reason
from kimi_operator.api.validation import UnreadableDocument, check_document
from kimi_operator.builders import (
    VLLM_VERSION_ANNOTATION,
    OperatorDefaults,
    Resolved,
    build_children,
    custom_all_reduce_disabled,
    needs_compute_domain,
    serving_image,
    uses_compute_domain,
    vllm_version,
)
from kimi_operator.builders.autoscaling import target_metric
from kimi_operator.builders.images import ImageChoice, choose
from kimi_operator.builders.meta import (
    MANAGER,
    group_name,
    leader_selector,
    selector_labels,
    selector_string,
)
from kimi_operator.builders.serving import endpoint
from kimi_operator.builders.weights import hf_sources
from kimi_operator.controller.retry import retry_delay, temporary
from kimi_operator.k8s.apply import (
    Applied,
    apply_child,
    owned_by,
    owner_is_current,
    with_owner,
)
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError, KubernetesError
from kimi_operator.k8s.resources import (
    CHILD_RESOURCES,
    COMPUTE_DOMAIN,
    EXTERNAL_METRICS,
    GATEWAY,
    HORIZONTAL_POD_AUTOSCALER,
    HTTP_ROUTE,
    INFERENCE_POOL,
    JOB,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    POD,
    POD_MONITOR,
    ROUTING_RESOURCES,
    SCALED_OBJECT,
    Resource,
)
from kimi_operator.rollout import Steps

# The upstream APIs whose presence changes the plan (each looked up, cached, per reconcile).
UPSTREAM = (
    LEADER_WORKER_SET,
    COMPUTE_DOMAIN,
    POD_MONITOR,
    SCALED_OBJECT,
    INFERENCE_POOL,
    HTTP_ROUTE,
)
AUTOSCALERS = (SCALED_OBJECT.kind, HORIZONTAL_POD_AUTOSCALER.kind)


@dataclass
class Outcome:
    status: dict[str, Any]
    events: list[Problem] = field(default_factory=list)  # Warning Events to post
    applied: Applied = field(default_factory=Applied)
    error: KubernetesError | None = None  # the apply's failure, retried by the controller
    result: str = "reconciled"  # reconciled | invalid | error | terminating: for metrics
    # Reconcile again after this many seconds even if nothing is watched to change (a deadline).
    requeue_after_s: float | None = None


def _missing(resource: Resource) -> Problem:
    return Problem(
        f"{resource.kind}NotInstalled",
        f"the {resource.kind} API ({resource.api_version}, CRD {resource.crd_name}) is not "
        f"installed in this cluster: {resource.install}",
    )


def external_metric(kd: KimiDeployment) -> Resource | None:
    """The external metric an HPA of `kd` reads (None without spec.autoscaling)."""
    if kd.spec.autoscaling is None:
        return None
    metric, _ = target_metric(kd.spec.autoscaling.target)
    return Resource(EXTERNAL_METRICS, "v1beta1", metric.external, "ExternalMetric")


def served_apis(client: Client, kd: KimiDeployment) -> dict[Resource, bool]:
    served = {r: client.served(r) for r in UPSTREAM}
    metric = external_metric(kd)
    if metric is not None and not served[SCALED_OBJECT]:
        served[metric] = client.served(metric)
    return served


def routing_missing(kd: KimiDeployment, served: Mapping[Resource, bool]) -> list[Problem]:
    """The routing APIs `kd` needs and the cluster lacks: the Service keeps serving."""
    return [
        Problem(missing.reason, f"{missing.message}; the Service keeps serving meanwhile")
        for missing in (_missing(r) for r in routing.routing_apis(kd) if not served.get(r, False))
    ]


def _autoscaler_missing(kd: KimiDeployment, served: Mapping[Resource, bool]) -> Problem | None:
    """Why neither KEDA nor an HPA can scale `kd`, if so: the HPA made without KEDA reads an
    external metric that only prometheus-adapter (with the chart's rules) serves."""
    metric = external_metric(kd)
    if metric is None or served.get(SCALED_OBJECT, False) or served.get(metric, False):
        return None
    missing = _missing(SCALED_OBJECT)
    return Problem(
        missing.reason,
        f"{missing.message}; the HorizontalPodAutoscaler made instead reads the external metric "
        f"{metric.plural}, which no external metrics API ({EXTERNAL_METRICS}/v1beta1) serves: "
        "install prometheus-adapter with the kimi-operator chart's rules "
        "(autoscaling.prometheusAdapter.enabled); spec.replicas stays as it is until then",
    )


def _document(body: Mapping[str, Any]) -> dict[str, Any]:
    """The object as a dict, which `check_document` requires of any Mapping."""
    return {key: body[key] for key in body}


def terminating(body: Mapping[str, Any]) -> bool:
    """Whether the deployment is being deleted: it gets its status only, no child is created,
    patched, adopted or pruned (the garbage collector carries out the deletion's propagation
    policy: docs/architecture.md, "Terminating deployments")."""
    return bool((body.get("metadata") or {}).get("deletionTimestamp"))


def reconcile(
    body: Mapping[str, Any],
    client: Client,
    defaults: OperatorDefaults,
    *,
    spec_changed: bool,
    now: str,
    failures: int = 0,
    prune: bool = True,
) -> Outcome:
    """`failures`: temporary failures in a row before this reconcile (they set the backoff that
    the status reports). `prune`: also delete the children the plan no longer has (the
    controller says when there can be any)."""
    old = dict(body.get("status") or {})
    generation = body.get("metadata", {}).get("generation")
    if terminating(body):
        conditions = cond.terminating_conditions(old)
        status = cond.render(old, conditions, generation=generation, now=now)
        return Outcome(status, result="terminating")
    try:
        report = check_document(_document(body))
        problems = report.problems
    except UnreadableDocument as error:
        report, problems = None, [Problem(INVALID, str(error))]
    if report is None or report.deployment is None:
        conditions = cond.invalid_conditions(old, problems)
        status = cond.render(old, conditions, generation=generation, now=now)
        events = cond.newly_bad(old, status)
        if spec_changed and not events:  # still invalid after an edit: say it again
            events = [Problem(INVALID, "; ".join(p.message for p in problems))]
        return Outcome(status, events, result="invalid")
    return _reconcile_valid(
        report.deployment,
        body,
        client,
        defaults=defaults,
        warnings=report.warnings,
        spec_changed=spec_changed,
        now=now,
        failures=failures,
        prune=prune,
    )


@dataclass
class Plan:
    """The children to apply, given which upstream APIs the cluster serves, and why some are not."""

    defaults: OperatorDefaults
    children: list[dict[str, Any]]
    skip: set[str]  # kinds neither applied nor pruned
    blockers: list[Problem]
    degradations: list[Problem]

    @property
    def autoscaler(self) -> str:
        """`Kind/name` of the autoscaler child, "" for none."""
        found = (c for c in self.children if c["kind"] in AUTOSCALERS)
        return next((f"{c['kind']}/{c['metadata']['name']}" for c in found), "")


def plan_children(
    kd: KimiDeployment,
    defaults: OperatorDefaults,
    served: Mapping[Resource, bool],
    spares: int = 0,
    *,
    weights: Resolved | None = None,
    weights_ready: bool = True,
) -> Plan:
    """What a reconcile applies: also what a check of the cluster expects (embedded.audit).
    `spares`: surge groups a rollout may keep (rollout.decide drops those it does not).
    `weights`: how the Hugging Face sources were resolved (builders.build_children); until
    `weights_ready`, groups and domains are neither created nor pruned (a running group keeps
    serving the commit it has while a new one downloads)."""
    spec = kd.spec
    defaults = dataclasses.replace(
        defaults,
        compute_domain_available=served[COMPUTE_DOMAIN],
        keda_available=served.get(SCALED_OBJECT, False),
        inference_pool_available=served.get(INFERENCE_POOL, False),
    )
    blockers, degradations = [], routing_missing(kd, served)
    skip = {r.kind for r, ok in served.items() if not ok}
    if not weights_ready:
        skip |= {LEADER_WORKER_SET.kind, COMPUTE_DOMAIN.kind}
    no_autoscaler = _autoscaler_missing(kd, served)
    if no_autoscaler is not None:
        degradations.append(no_autoscaler)
    if not served[LEADER_WORKER_SET]:
        blockers.append(_missing(LEADER_WORKER_SET))
    if spec.monitoring.pod_monitor and not served[POD_MONITOR]:
        blockers.append(_missing(POD_MONITOR))
    # Required, or Auto where the group cannot run without one: pods without the IMEX channel
    # would load the weights and then fail (or claim a template nobody makes).
    domain_needed = spec.compute_domain == "Required" or (
        spec.compute_domain == "Auto" and needs_compute_domain(kd)
    )
    if not served[COMPUTE_DOMAIN] and domain_needed:
        missing = _missing(COMPUTE_DOMAIN)
        if spec.compute_domain == "Auto":
            missing = Problem(
                missing.reason,
                f"{missing.message}; a latency_specialized TP group across "
                f"{spec.nodes_per_group} nodes needs its IMEX channel (no pods are created "
                "until it is served; decode.backend auto runs without one)",
            )
        blockers.append(missing)
        skip.add(LEADER_WORKER_SET.kind)
    elif not served[COMPUTE_DOMAIN] and spec.compute_domain == "Auto":
        degradations.append(
            Problem(
                "ComputeDomainNotInstalled",
                "deployed without a ComputeDomain (no multi-node NVLink) because the "
                f"ComputeDomain API is not installed: {COMPUTE_DOMAIN.install}",
            )
        )
    built = build_children(kd, defaults, spares, weights=weights)
    children = [c for c in built if c["kind"] not in skip]
    return Plan(defaults, children, skip, blockers, degradations)


def _reconcile_valid(
    kd: KimiDeployment,
    body: Mapping[str, Any],
    client: Client,
    *,
    defaults: OperatorDefaults,
    warnings: list[str],
    spec_changed: bool,
    now: str,
    failures: int,
    prune: bool,
) -> Outcome:
    spec, old = kd.spec, dict(body.get("status") or {})
    served = served_apis(client, kd)
    outcome = Outcome(status={})
    retrying: Problem | None = None
    uid = body["metadata"]["uid"]
    first = not old  # never reconciled: its children most likely do not exist yet
    # Nothing to scale down before the first status, unless the spec was edited before it.
    prune = prune and not (first and body.get("metadata", {}).get("generation") == 1)
    weights = caches.Weights(caches.recorded(kd, old), ready=not any(hf_sources(kd)))
    plan = _planned(kd, defaults, served, weights)
    image: ImageChoice | None = None
    steps: Steps | None = None
    try:
        weights, shared = caches.apply_caches(client, kd, body, defaults, outcome.applied, now=now)
        plan = _planned(kd, defaults, served, weights)
        skip_groups = first or LEADER_WORKER_SET.kind in plan.skip
        live = {} if skip_groups else _live_groups(client, kd, uid)
        image = _image(kd, uid, old, live, client=client, defaults=defaults)
        if image.image != serving_image(kd, defaults):
            chosen = dataclasses.replace(defaults, serving_image=image.image)
            plan = _planned(kd, chosen, served, weights)
        decision = rollout.decide(
            kd,
            [with_owner(c, body) for c in plan.children],
            live,
            now=now,
            was_rolling=not skip_groups and progressing_reason(old) in ROLLING_REASONS,
        )
        steps, plan.children = decision.steps, decision.planned
        _take_turn(defaults, kd, uid, image, steps)
        for desired in decision.write:
            apply_child(
                client,
                desired,
                uid,
                outcome.applied,
                likely_missing=first,
                owner_current=lambda: owner_is_current(client, body),
            )
        outcome.applied.live += decision.held
        if prune:
            _let_go(
                client, kd, uid, plan, old=old, weights=weights, shared=shared, into=outcome.applied
            )
    except KubernetesError as error:
        outcome.error, outcome.result = error, "error"
        if isinstance(error, ApiError) and temporary(error):  # retried soon: the status says so
            retrying = cond.api_failure(error.code, str(error), retry_delay(error, failures))
        else:
            plan.blockers.append(Problem("ApplyFailed", str(error)))

    defaults, blockers = plan.defaults, [*plan.blockers, *weights.failed]
    groups = [o for o in outcome.applied.live if o["kind"] == LEADER_WORKER_SET.kind]
    domains = [o for o in outcome.applied.live if o["kind"] == COMPUTE_DOMAIN.kind]
    ready = sum(1 for g in groups if rollout.group_ready(g))
    waits = not first and ready < len(groups) and retrying is None
    unschedulable = _waiting_for_nodes(client, kd) if waits else ""
    mode = spec.compute_domain
    seen = cond.Observation(
        groups_wanted=spec.replicas,
        groups_present=len(groups),
        groups_ready=ready,
        endpoint=_gateway_endpoint(client, kd) or endpoint(kd),
        unschedulable=unschedulable,
        warnings=warnings,
        blockers=blockers,
        weights_pending=weights.waiting,
        degradations=plan.degradations,
        compute_domain=(
            "Disabled"
            if mode == "Disabled"
            else ("InUse" if served[COMPUTE_DOMAIN] else "NotInstalled")
        ),
        domains_wanted=spec.replicas if uses_compute_domain(kd, defaults) else 0,
        domains_ready=sum(1 for d in domains if (d.get("status") or {}).get("status") == "Ready"),
        compute_domain_install=COMPUTE_DOMAIN.install,
        groups_updated=steps.updated if steps else 0,
        rolling=bool(steps and steps.rolling),
        stalled=_stalled(kd, steps),
        waiting=_waiting(image),
        weights=weights.condition(),
        routing=_routing_ready(kd, old, outcome, served),
    )
    conditions = cond.valid_conditions(seen)
    if retrying is not None:  # counts and endpoint as last observed too
        conditions = cond.retrying_conditions(old, conditions, retrying)
    outcome.status = cond.render(
        old,
        conditions,
        generation=body.get("metadata", {}).get("generation"),
        now=now,
        counts=None if retrying else (len(groups), ready),
        endpoint=None if retrying else (seen.endpoint if ready else ""),
        # After a failed apply, what the groups run is as last observed.
        rollout=None if outcome.error or not (image and steps) else _rollout(image, steps),
        # Kept as they were after an error without a resolution: the caches were maybe not
        # released yet, and the next reconcile must know to.
        weights=(
            [w.model_dump() for w in weights.resolved.values()]
            if weights.resolved or outcome.error is None
            else None
        ),
        scale=cond.ScaleStatus(
            selector=leader_selector(kd),
            gpus=spec.gpus * spec.replicas,
            autoscaler=plan.autoscaler,
        ),
    )
    outcome.requeue_after_s = _requeue_after(steps if not outcome.error else None, weights)
    outcome.events = cond.newly_bad(old, outcome.status)
    if spec_changed:
        outcome.events += _spec_warnings(kd, defaults, warnings)
    return outcome


def _spec_warnings(
    kd: KimiDeployment, defaults: OperatorDefaults, warnings: list[str]
) -> list[Problem]:
    """The Warning Events a spec gets once, when it is new: beyond the fast path, and the custom
    all-reduce turned off for images before vLLM 0.33.0 (docs/custom-all-reduce.md)."""
    events = [Problem("FastPathExceeded", w) for w in warnings]
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


def _planned(
    kd: KimiDeployment,
    defaults: OperatorDefaults,
    served: Mapping[Resource, bool],
    weights: caches.Weights,
) -> Plan:
    """The plan with the rollout's spare groups and the weights as found."""
    return plan_children(
        kd,
        defaults,
        served,
        spares=kd.spec.rollout.max_surge,
        weights=weights.resolved,
        weights_ready=weights.ready,
    )


def _requeue_after(steps: Steps | None, weights: caches.Weights) -> float | None:
    """The soonest a rollout's deadline or a running weights Job (whose progress is watched
    nowhere) needs a look."""
    deadlines = [steps.requeue_after_s if steps else None]
    if weights.waiting and not weights.failed:
        deadlines.append(caches.POLL_S)
    return min((d for d in deadlines if d is not None), default=None)


def _let_go(
    client: Client,
    kd: KimiDeployment,
    uid: str,
    plan: Plan,
    *,
    old: Mapping[str, Any],
    weights: caches.Weights,
    shared: list[dict[str, Any]],
    into: Applied,
) -> None:
    """Prune what the plan no longer has; once the caches in use are ready, release the others.
    Weights Jobs and caches are looked for only where there can be some: most deployments (PVC
    sources) never had any, and every list costs the API server."""
    weighted = bool(shared) or _had_weights(old)
    routed = kd.spec.routing.mode == "InferencePool" or _had_routing(old)
    _prune(client, kd, uid=uid, plan=plan, into=into, jobs=weighted, routed=routed)
    if weighted and weights.ready:
        keep = {(o["kind"], o["metadata"]["name"]) for o in shared}
        caches.release_unused(client, kd.metadata.namespace, uid, keep, into)


def _had_weights(status: Mapping[str, Any]) -> bool:
    """Whether the last status saw a Hugging Face source: resolve Jobs or caches may be left."""
    seen = _condition(status, "WeightsReady")
    return bool(status.get("weights")) or seen.get("reason", "ClaimGiven") != "ClaimGiven"


def _routing_ready(
    kd: KimiDeployment, old: Mapping[str, Any], outcome: Outcome, served: Mapping[Resource, bool]
) -> tuple[cond.Status, str, str]:
    """RoutingReady, kept as it was after a failed apply that may have left a pool unpruned (so
    that the next reconcile still lists the routing kinds: `_had_routing`)."""
    previous = _condition(old, "RoutingReady")
    if outcome.error is not None and previous:
        kept: cond.Status = previous.get("status", "Unknown")
        return kept, previous.get("reason", ""), previous.get("message", "")
    return routing.routing_condition(kd, outcome.applied.live, routing_missing(kd, served))


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """The condition `kind` of a status, {} if it has none."""
    conditions = status.get("conditions") or []
    found: Mapping[str, Any] = next((c for c in conditions if c.get("type") == kind), {})
    return found


def _had_routing(status: Mapping[str, Any]) -> bool:
    """Whether the last status saw anything but mode Service (or predates RoutingReady): a pool
    and endpoint picker may be left to prune. Else their seven kinds are not listed."""
    return _condition(status, "RoutingReady").get("reason") != "Service"


def _waiting_for_nodes(client: Client, kd: KimiDeployment) -> str:
    """Why a group's pods wait for nodes, as the scheduler said on them; "" if none does (or the
    pods could not be listed now: pods are not watched, the next resync looks again)."""
    selector = selector_string(selector_labels(kd))
    try:
        return cond.unschedulable(client.list(POD, kd.metadata.namespace, label_selector=selector))
    except ApiError as error:
        if temporary(error):
            return ""
        raise


def _gateway_endpoint(client: Client, kd: KimiDeployment) -> str:
    """The API's URL through spec.routing.gatewayRef's Gateway; "" without one, or while the
    Gateway has no address or cannot be read (the Service's URL is given then)."""
    ref = kd.spec.routing.gateway_ref
    if kd.spec.routing.mode != "InferencePool" or ref is None:
        return ""
    try:
        gateway = client.get(GATEWAY, routing.gateway_namespace(kd, ref), ref.name)
    except ApiError as error:
        if temporary(error) or error.code == 403:
            return ""
        raise
    return routing.gateway_endpoint(gateway, ref.section_name)


def _selector(kd: KimiDeployment) -> str:
    """The label selector of every child of this deployment."""
    return selector_string({**selector_labels(kd), "app.kubernetes.io/managed-by": MANAGER})


def _live_groups(client: Client, kd: KimiDeployment, uid: str) -> dict[str, dict[str, Any]]:
    """The deployment's LeaderWorkerSets by name: what a rollout decides from."""
    found = client.list(LEADER_WORKER_SET, kd.metadata.namespace, label_selector=_selector(kd))
    return {
        g["metadata"]["name"]: {**g, "kind": LEADER_WORKER_SET.kind}
        for g in found
        if owned_by(g, uid)
    }


def _image(
    kd: KimiDeployment,
    uid: str,
    old: Mapping[str, Any],
    live: Mapping[str, Mapping[str, Any]],
    *,
    client: Client,
    defaults: OperatorDefaults,
) -> ImageChoice:
    """The serving image to roll to (builders.images.choose), asking for the operator-wide turn
    when a new default image is due."""
    namespace, name = kd.metadata.namespace, kd.metadata.name
    running = next((rollout.leader_image(g) for g in live.values()), "")

    def ask_turn() -> str:
        return defaults.image_gate.claim(
            uid,
            f"{namespace}/{name}",
            defaults.serving_image,
            lambda ns: client.list(KIMI_DEPLOYMENT, ns),
        )

    return choose(kd, old, running, defaults.serving_image, ask_turn=ask_turn)


def _take_turn(
    defaults: OperatorDefaults, kd: KimiDeployment, uid: str, image: ImageChoice, steps: Steps
) -> None:
    """Hold the operator-wide turn while rolling onto the default image; give it back after."""
    gate, label = defaults.image_gate, f"{kd.metadata.namespace}/{kd.metadata.name}"
    following = image.source == "OperatorDefault" and image.image == defaults.serving_image
    if following and steps.rolling:
        gate.hold(uid, label)
    else:
        gate.release(uid)


def _stalled(kd: KimiDeployment, steps: Steps | None) -> str:
    if steps is None or not steps.stalled:
        return ""
    names = ", ".join(group_name(kd, i) for i in steps.stalled)
    deadline = kd.spec.rollout.progress_deadline_seconds
    return (
        f"{names} not Ready within spec.rollout.progressDeadlineSeconds ({deadline} s): the "
        f"rollout stopped; the {len(steps.hold)} groups not yet updated keep serving"
    )


def _waiting(image: ImageChoice | None) -> str:
    if image is None or not image.waiting_for:
        return ""
    return (
        f"the operator's default image {image.pending} waits for {image.waiting_for} to finish "
        f"moving to it (one deployment at a time); running {image.image}"
    )


def _rollout(image: ImageChoice, steps: Steps) -> dict[str, Any]:
    """The status fields of the rollout and the image."""
    return {
        "updatedReplicas": steps.updated,
        "image": image.image,
        "imageSource": image.source,
        "pendingImage": image.pending,
    }


def _prune(
    client: Client,
    kd: KimiDeployment,
    *,
    uid: str,
    plan: Plan,
    into: Applied,
    jobs: bool,
    routed: bool,
) -> None:
    """Delete this deployment's children, of every kind, that the plan no longer has: groups and
    domains after a scale-down, every ComputeDomain once none is used, the PodMonitor once
    monitoring is off, a resolve Job once its answer is in the status (with `jobs`; the shared
    weights caches are let go of by caches.release_unused). They are listed by the deployment's
    labels rather than looked up by the names the plan would have given them, so that none is
    missed whatever was cut short before: a group deleted by hand, or an operator killed half-way
    through a scale-down. The routing kinds are listed only with `routed` (a pool now, or maybe
    one left from before)."""
    namespace = kd.metadata.namespace
    planned = {(child["kind"], child["metadata"]["name"]) for child in plan.children}
    selector = _selector(kd)
    kinds = [r for r in CHILD_RESOURCES if routed or r not in ROUTING_RESOURCES]
    for resource in (*kinds, JOB) if jobs else kinds:
        if resource.kind in plan.skip:
            continue
        for obj in client.list(resource, namespace, label_selector=selector):
            name = obj["metadata"]["name"]
            if (resource.kind, name) in planned or not owned_by(obj, uid):
                continue
            if client.delete(resource, namespace, name):
                into.deleted.append(f"{resource.kind}/{name}")
