"""The plan of one reconcile, a pure function of what it observed: the children to apply (the
rollout's turn taken into account), the weights caches to create or share, what to prune and which
caches to let go of, the turn at the operator-wide image gate. No client: `Observed` holds every
read (observe.py fills it), `Decision` every write (act.py sends them).
"""

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from kimi_operator import (
    caches,
    drain,
    evacuation,
    group_life,
    group_set,
    prefill_scaling,
    rollout,
    routing,
    upgrades,
)
from kimi_operator.api.problem import Problem
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.api.status import ROLLING_REASONS, condition, progressing_reason
from kimi_operator.builders import (
    OperatorDefaults,
    Resolved,
    build_caches,
    build_children,
    needs_compute_domain,
)
from kimi_operator.builders.autoscaling import target_metric, threshold
from kimi_operator.builders.images import ImageChoice, choose
from kimi_operator.builders.nodes import CONDITION, Unfit
from kimi_operator.builders.placement import kept_off
from kimi_operator.builders.weights import hf_sources
from kimi_operator.group_set import GroupSet
from kimi_operator.k8s.errors import KubernetesError
from kimi_operator.k8s.merge import Write, owned_by, with_owner
from kimi_operator.k8s.resources import (
    BY_KIND,
    COMPUTE_DOMAIN,
    EXTERNAL_METRICS,
    HORIZONTAL_POD_AUTOSCALER,
    HTTP_ROUTE,
    INFERENCE_POOL,
    LEADER_WORKER_SET,
    POD_MONITOR,
    SCALED_OBJECT,
    Resource,
)
from kimi_operator.plan.capacity import Role
from kimi_operator.rollout import LWS_KIND, Steps

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


class FoundWeights(NamedTuple):
    """The weights as the reads found them (`weights_of`)."""

    weights: caches.Weights
    shared: list[dict[str, Any]]  # the caches the resolutions call for
    writes: list[Write]  # those that create or join them


@dataclass
class Observed:
    """Everything one reconcile read, before it writes anything (observe.py)."""

    body: Mapping[str, Any]  # the KimiDeployment as read
    kd: KimiDeployment
    served: dict[Resource, bool]  # the upstream APIs the cluster serves
    warnings: list[str] = field(default_factory=list)  # the spec beyond the fast path
    first: bool = False  # never reconciled: its children most likely do not exist yet
    prune: bool = False  # the children were listed to prune (the controller asked for it)
    # The resolve Jobs of the sources the status has no commit for (caches.unresolved), by name.
    resolving: dict[str, caches.Found] = field(default_factory=dict)
    # The caches the resolutions name, by (kind, name); None: not there.
    caches: dict[tuple[str, str], dict[str, Any] | None] = field(default_factory=dict)
    # The termination messages of those download Jobs not finished, by Job name.
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # its LeaderWorkerSets
    # With `prune`: every child by kind, as listed by the deployment's labels.
    children: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # With `prune`, once the weights are ready: every shared cache of the namespace by kind.
    shared: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    turn: str = ""  # the image gate's answer, if asked: who moves to the new default image now
    unschedulable: str = ""  # what kube-scheduler says of the pods waiting for nodes
    gateway_endpoint: str = ""  # the API's URL through spec.routing.gatewayRef's Gateway
    # Its pods, read while a group is not Ready or its start-up time not recorded (None: not
    # read this time).
    pods: list[dict[str, Any]] | None = None
    # The requests each draining group's leader holds, by group (None: it did not answer).
    in_flight: dict[str, int | None] = field(default_factory=dict)
    # `weights_of` this observation, worked out once its caches are read (observe.py; None: not
    # yet, and `decide` works it out).
    found: FoundWeights | None = None
    error: KubernetesError | None = None  # a read failed: nothing is written
    # The prefill groups' load from Prometheus (None: no spec.prefill.autoscaling, or not read).
    prefill_load: prefill_scaling.Load | None = None
    # The load of each role with an slo (None: none has one, or not read).
    slo_loads: dict[Role, prefill_scaling.Load] | None = None
    # The ConfigMaps the slo store a calibration in (slo_roles.calibration_maps), by name, as
    # read (None: not found).
    calibration_maps: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    # With spec.autoscaling.slo: the other autoscalers that target the scale subresource.
    other_autoscalers: list[str] = field(default_factory=list)
    # With an slo: the deployment's calibration Jobs running (builders/calibration.py), by name.
    calibrating: list[str] = field(default_factory=list)
    # The nodes groups must leave, by name (builders/nodes.py), as the Node watch knew them;
    # None: it has not listed yet (not known).
    unfit: dict[str, Unfit] | None = field(default_factory=dict)

    @property
    def uid(self) -> str:
        return str(self.body["metadata"]["uid"])

    @property
    def old(self) -> dict[str, Any]:
        """The status as last written."""
        return dict(self.body.get("status") or {})


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


Gate = Literal["hold", "release"]
# How soon a reconcile looks again at the pods a ComputeDomain kept for them waits on (they
# terminate within drainSeconds + 40 s).
AWAIT_POLL_S = 5.0


@dataclass
class Decision:
    """What one reconcile writes, in order, and what its status is made from."""

    plan: Plan  # its children: those the deployment keeps (the others are pruned)
    weights: caches.Weights
    caches: list[Write] = field(default_factory=list)  # shared caches: created, or joined
    apply: list[dict[str, Any]] = field(default_factory=list)  # children applied, in order
    held: list[dict[str, Any]] = field(default_factory=list)  # outdated groups left as they are
    delete: list[Write] = field(default_factory=list)  # pruned children, then caches let go of
    steps: Steps | None = None  # the rollout's (None: the reconcile stops before it)
    prefill_steps: Steps | None = None  # the prefill groups' rollout, with spec.prefill
    image: ImageChoice | None = None
    gate: Gate = "release"  # the operator-wide turn to move to a new default image
    groups: list[dict[str, Any]] = field(default_factory=list)  # status.groups (group_life.py)
    drains: drain.Drains = field(default_factory=drain.Drains)  # groups leaving (drain.py)
    # ComputeDomains the plan dropped, kept while pods claim their channel (or the pods are
    # unknown): pruned by a later reconcile, once those pods are gone.
    awaiting: list[str] = field(default_factory=list)
    # The groups left on an older template, with the hash of the current one (upgrades.py).
    older: dict[str, str] = field(default_factory=dict)
    # The groups of each role and the evacuations (group_set.py).
    group_set: GroupSet = field(default_factory=GroupSet)

    @property
    def await_poll_s(self) -> float | None:
        """How soon to look again at the pods a kept ComputeDomain waits on: soon for a group
        gone (its pods end within their grace; pods are not watched), not at all for a group
        kept (a domain turned off: its rollout's own events bring the next reconcile)."""
        kept = {c["metadata"]["name"] for c in self.plan.children if c["kind"] == LWS_KIND}
        return AWAIT_POLL_S if set(self.awaiting) - kept else None


def _missing(resource: Resource) -> Problem:
    return Problem(
        f"{resource.kind}NotInstalled",
        f"the {resource.kind} API ({resource.api_version}, CRD {resource.crd_name}) is not "
        f"installed in this cluster: {resource.install}",
    )


def external_metric(kd: KimiDeployment) -> Resource | None:
    """The external metric an HPA of `kd` reads (None without spec.autoscaling.target)."""
    target = threshold(kd)
    if target is None:
        return None
    metric, _ = target_metric(target)
    return Resource(EXTERNAL_METRICS, "v1beta1", metric.external, "ExternalMetric")


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


def _gaps(
    kd: KimiDeployment, served: Mapping[Resource, bool], weights_ready: bool
) -> tuple[set[str], list[Problem], list[Problem]]:
    """(kinds neither applied nor pruned, blockers, degradations) for the APIs the cluster
    serves; until `weights_ready`, groups and domains are neither created nor pruned."""
    spec = kd.spec
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
    return skip, blockers, degradations


def plan_children(
    kd: KimiDeployment,
    defaults: OperatorDefaults,
    served: Mapping[Resource, bool],
    spares: int = 0,
    *,
    weights: Resolved | None = None,
    weights_ready: bool = True,
    indices: Mapping[str, Sequence[int]] | None = None,
) -> Plan:
    """What a reconcile applies: also what a check of the cluster expects (embedded.audit).
    `spares`: surge groups a rollout may keep (rollout.decide drops those it does not);
    `indices`: instead, the groups of each role to build (group_set.py).
    `weights`: how the Hugging Face sources were resolved (builders.build_children); until
    `weights_ready`, groups and domains are neither created nor pruned (a running group keeps
    serving the commit it has while a new one downloads)."""
    defaults = dataclasses.replace(
        defaults,
        compute_domain_available=served[COMPUTE_DOMAIN],
        keda_available=served.get(SCALED_OBJECT, False),
        inference_pool_available=served.get(INFERENCE_POOL, False),
    )
    skip, blockers, degradations = _gaps(kd, served, weights_ready)
    built = build_children(kd, defaults, spares, weights=weights, indices=indices)
    children = [c for c in built if c["kind"] not in skip]
    return Plan(defaults, children, skip, blockers, degradations)


def _planned(
    kd: KimiDeployment,
    defaults: OperatorDefaults,
    served: Mapping[Resource, bool],
    weights: caches.Weights,
    indices: Mapping[str, Sequence[int]] | None = None,
) -> Plan:
    """The plan with the rollout's spare groups (or the group set's, `indices`) and the weights
    as found."""
    return plan_children(
        kd,
        defaults,
        served,
        spares=kd.spec.rollout.max_surge,
        weights=weights.resolved,
        weights_ready=weights.ready,
        indices=indices,
    )


def unobserved(observed: Observed) -> caches.Weights:
    """The weights as the last status recorded them: what a reconcile says when it stopped
    before it could look (ready only without a Hugging Face source)."""
    kd = observed.kd
    return caches.Weights(caches.recorded(kd, observed.old), ready=not any(hf_sources(kd)))


def stopped(observed: Observed, defaults: OperatorDefaults) -> Decision:
    """The decision of a reconcile that stops before the weights are known (a read or a cache
    write failed): nothing written, the plan as the recorded weights give it."""
    weights = unobserved(observed)
    return Decision(_planned(observed.kd, defaults, observed.served, weights), weights)


def wanted_caches(
    observed: Observed, defaults: OperatorDefaults
) -> tuple[caches.Weights, list[dict[str, Any]]]:
    """(the weights as resolved so far, the caches the resolutions call for): what the caches'
    reads need to know (observe.py), before the downloads are looked at."""
    weights = caches.resolve(observed.kd, observed.old, observed.resolving)
    return weights, build_caches(observed.kd, defaults, weights.resolved)


def weights_of(
    observed: Observed, defaults: OperatorDefaults, *, now: str, refused: Problem | None = None
) -> FoundWeights:
    """The weights, the caches they call for and the writes that create or join them. A
    download Job created now has not finished; `refused`: a ResourceQuota refused one of those
    writes, so the downloads are not looked at (nothing after it was written)."""
    kd = observed.kd
    weights, shared = wanted_caches(observed, defaults)
    kept = caches.retained(kd, weights)
    writes, live = [], []
    for obj in shared:
        actual = observed.caches.get((obj["kind"], obj["metadata"]["name"]))
        going = None if actual is None else caches.terminating(actual)
        if going is not None:  # neither joined nor used: the groups wait with the weights
            weights.ready = False
            weights.waiting.append(going)
            continue
        write = caches.shared_write(obj, actual, observed.body, obj["metadata"]["name"] in kept)
        if write is not None:
            writes.append(write)
        if write is not None and write.verb == "create":
            live.append(dict(write.body or {}))  # no status yet: its Job has not finished
        else:
            live.append(dict(actual or {}))  # a patch leaves its status as it was
    if refused is not None:
        weights.ready = False
        weights.failed.append(refused)
        return FoundWeights(weights, shared, [])
    caches.downloads(weights, live, observed.messages, now=now)
    return FoundWeights(weights, shared, writes)


def found_weights(observed: Observed, defaults: OperatorDefaults, *, now: str) -> FoundWeights:
    """`weights_of`, as observe.py worked it out once the caches were read (else now)."""
    if observed.found is not None:
        return observed.found
    return weights_of(observed, defaults, now=now)


def _groups_skipped(observed: Observed, skip: set[str]) -> bool:
    """Whether the rollout decides from no live group: before the first status, or while groups
    are not applied (an API missing, the weights not ready)."""
    return observed.first or LEADER_WORKER_SET.kind in skip


def _image(
    observed: Observed,
    defaults: OperatorDefaults,
    live: Mapping[str, Mapping[str, Any]],
    ask_turn: Callable[[], str],
) -> ImageChoice:
    """The serving image to roll to (builders.images.choose); `ask_turn` when a new default
    image is due: the gate's answer."""
    running = next((rollout.leader_image(g) for g in live.values()), "")
    return choose(observed.kd, observed.old, running, defaults.serving_image, ask_turn=ask_turn)


def asks_turn(
    observed: Observed, defaults: OperatorDefaults, *, now: str, ask: Callable[[], str]
) -> None:
    """Call `ask` (the gate) if, and only if, the plan needs the gate's answer: observe.py asks
    here, `decide` then reads the answer from `Observed.turn`."""
    weights = found_weights(observed, defaults, now=now).weights
    skip, _, _ = _gaps(observed.kd, observed.served, weights.ready)
    _image(observed, defaults, {} if _groups_skipped(observed, skip) else observed.groups, ask)


def decide(
    observed: Observed,
    defaults: OperatorDefaults,
    *,
    now: str,
    refused: Problem | None = None,
) -> Decision:
    """The writes of one reconcile. `refused`: a ResourceQuota refused a weights cache (act.py
    stopped there): the plan is made again knowing it, without the caches' writes."""
    kd, body, old = observed.kd, observed.body, observed.old
    if refused is None:
        weights, shared, cache_writes = found_weights(observed, defaults, now=now)
    else:
        weights, shared, cache_writes = weights_of(observed, defaults, now=now, refused=refused)
    skip, _, _ = _gaps(kd, observed.served, weights.ready)
    skip_groups = _groups_skipped(observed, skip)
    live = {} if skip_groups else observed.groups
    records = group_life.records(kd, old, observed.groups, observed.pods, now=now)
    groups = group_set.plan(kd, live, observed.pods, observed.unfit, now=now, lives=records)
    indices = {letter: groups.indices(letter, kd.spec.rollout.max_surge) for letter in groups.roles}
    image = _image(observed, defaults, live, lambda: observed.turn)
    chosen = dataclasses.replace(defaults, serving_image=image.image)
    plan = _planned(kd, chosen, observed.served, weights, indices)
    children = [with_owner(c, body) for c in plan.children]
    claims = {role: w.claim_name for role, w in weights.resolved.items()}
    inputs = upgrades.current(kd, plan.defaults, claims)
    halted = group_life.stopped(records)
    # Braked before the rollout looks: a stopped group's template is what it has, at 0 replicas.
    braked = evacuation.marked(group_life.braked(children, halted), groups.marks)
    stamped = upgrades.stamped(braked, live, inputs)
    older = upgrades.older(kd, body, plan.defaults, inputs, children=braked, live=live)
    # A stopped group has no pod left to restart: the current template is free to take.
    older = {name: template for name, template in older.items() if name not in halted}
    rolled = rollout.decide(
        kd,
        stamped,
        live,
        positions={letter: role.positions for letter, role in groups.roles.items()},
        replacing={name for role in groups.roles.values() for name in role.replacing},
        leaving=set(groups.leaving),
        now=now,
        was_rolling=not skip_groups and progressing_reason(old) in ROLLING_REASONS,
        older=older,
    )
    # A group made now is kept off the nodes with a failing condition (the scheduler keeps it
    # off cordoned and tainted ones): a replacement back in the room its group left, or a
    # group made again there, would be evacuated again (placement.kept_off).
    failing = [n for n, u in (observed.unfit or {}).items() if u.reason == CONDITION]
    created = {
        name: kept_off(c, failing)
        for c in rolled.write
        if c["kind"] == LEADER_WORKER_SET.kind
        and (name := c["metadata"]["name"]) not in observed.groups
    }
    write = [
        created.get(c["metadata"]["name"], c) if c["kind"] == LEADER_WORKER_SET.kind else c
        for c in rolled.write
    ]
    records = group_life.with_created(kd, old, records, created, now=now)
    plan.children = rolled.planned
    brake = group_life.stopped_problem(kd, records)
    if brake is not None:
        plan.degradations.append(brake)
    plan.degradations += groups.problems
    # A group stopped before its template was written waits for a person, not for the image:
    # the turn goes to the next deployment meanwhile.
    following = (
        image.source == "OperatorDefault"
        and image.image == defaults.serving_image
        and not group_life.stopped_before_written(records, live)
    )
    held = rolled.held
    pruning = observed.prune and LEADER_WORKER_SET.kind not in plan.skip
    drains = _drains(observed, live, write, held, pruning, now=now, leaving=groups.leaving)
    steps, prefill_steps = _drain_held(kd, rolled.steps, rolled.prefill_steps, drains.hold)
    # Evacuated once drained: deleted (as read); its replacement serves in its place.
    evacuated = sorted(drains.go & set(groups.leaving))
    groups.news += [group_set.replaced(*groups.leaving[n]) for n in evacuated]
    decision = Decision(
        plan,
        weights,
        caches=cache_writes,
        apply=[
            c
            for c in write
            if not _held_by(c, drains)
            and not (c["kind"] == LEADER_WORKER_SET.kind and c["metadata"]["name"] in evacuated)
        ],
        held=[*held, *(dict(live[c["metadata"]["name"]]) for c in write if _held_by(c, drains))],
        steps=steps,
        prefill_steps=prefill_steps,
        image=image,
        gate="hold" if following and rolled.steps.rolling else "release",
        groups=records,
        drains=drains,
        older=older,
        group_set=groups,
    )
    if observed.prune:
        staying = {name for name in live if name not in drains.go} - {
            c["metadata"]["name"] for c in plan.children
        }
        decision.delete, decision.awaiting = _prune(observed, plan, staying)
        weighted = bool(shared) or had_weights(old)
        if weighted and weights.ready:
            keep = {(o["kind"], o["metadata"]["name"]) for o in shared}
            decision.delete += caches.releases(observed.shared, observed.uid, keep)
    decision.delete += [Write.delete(LEADER_WORKER_SET, live[name]) for name in evacuated]
    return decision


def _drains(
    observed: Observed,
    live: Mapping[str, Mapping[str, Any]],
    write: list[dict[str, Any]],
    held: list[dict[str, Any]],
    pruning: bool,
    *,
    now: str,
    leaving: Collection[str] = (),
) -> drain.Drains:
    """The drains of the groups leaving (pruned) and of those a rollout rewrites, and the end of
    those wanted again (drain.py). A group rewritten once drained loses its mark in the same
    apply (`write` is changed in place: the mark's annotation set to null)."""
    groups = [c for c in (*write, *held) if c["kind"] == LEADER_WORKER_SET.kind]
    rewrites = {
        c["metadata"]["name"]
        for c in write
        if c["kind"] == LEADER_WORKER_SET.kind
        and c["metadata"]["name"] in live
        and not rollout.is_updated(live[c["metadata"]["name"]], c)
    }
    drains = drain.plan(
        observed.kd,
        live,
        kept={c["metadata"]["name"] for c in groups},
        rewrites=rewrites,
        prune=pruning,
        pods=observed.pods,
        counts=observed.in_flight,
        now=now,
        leaving=leaving,
    )
    for i, child in enumerate(write):
        name = child["metadata"]["name"]
        if name in rewrites and name not in drains.hold and rollout.draining_since(live[name]):
            meta = child["metadata"]
            annotations = {**meta.get("annotations", {}), rollout.DRAINING_ANNOTATION: None}
            write[i] = {**child, "metadata": {**meta, "annotations": annotations}}
    return drains


def _held_by(child: Mapping[str, Any], drains: drain.Drains) -> bool:
    return child["kind"] == LEADER_WORKER_SET.kind and child["metadata"]["name"] in drains.hold


def _drain_held(
    kd: KimiDeployment, steps: Steps, prefill: Steps | None, hold: set[str]
) -> tuple[Steps, Steps | None]:
    """The rollout's steps with the members it counted as updated but held while they drain
    (before their rewrite) not yet updated. A group leaving or an extra drained before it is
    pruned was never counted (the model check found `updatedReplicas` -1: extras of a
    scale-down drained while the one member was rewritten)."""

    def held(step: Steps, replicas: int) -> Steps:
        counted = {name for i, name in enumerate(step.names[:replicas]) if i not in step.hold}
        return dataclasses.replace(step, updated=step.updated - len(counted & hold))

    steps = held(steps, kd.spec.replicas)
    if prefill is not None and kd.spec.prefill is not None:
        prefill = held(prefill, kd.spec.prefill.replicas)
    return steps, prefill


def _prune(observed: Observed, plan: Plan, staying: set[str]) -> tuple[list[Write], list[str]]:
    """Delete this deployment's children, of every kind listed, that the plan no longer has:
    groups and domains after a scale-down, every ComputeDomain once none is used, the PodMonitor
    once monitoring is off, a resolve Job once its answer is in the status (the shared weights
    caches are let go of by caches.releases). They are listed by the deployment's labels rather
    than looked up by the names the plan would have given them, so that none is missed whatever
    was cut short before: a group deleted by hand, or an operator killed half-way through a
    scale-down. A group `staying` (draining: drain.py) keeps its ComputeDomain too, and a
    ComputeDomain goes only once no pod claims its channel (a group's pods run their preStop
    and vLLM's shutdown drain on the IMEX channel after their LeaderWorkerSet is deleted): the
    second list names those kept for their pods (docs/group-lifecycle.md, "Leaving")."""
    planned = {(child["kind"], child["metadata"]["name"]) for child in plan.children}
    claimed = None if observed.pods is None else channels_claimed(observed.pods)
    out, awaiting = [], []
    for kind, listed in observed.children.items():
        if kind in plan.skip:
            continue
        for obj in listed:
            meta = obj["metadata"]
            if (kind, meta["name"]) in planned or not owned_by(obj, observed.uid):
                continue
            if kind in rollout.GROUP_KINDS and meta["name"] in staying:
                continue
            if kind == COMPUTE_DOMAIN.kind and (claimed is None or channel(obj) in claimed):
                awaiting.append(meta["name"])
                continue
            out.append(Write.delete(BY_KIND[kind], obj))
    return out, awaiting


def channel(domain: Mapping[str, Any]) -> str:
    """The ResourceClaimTemplate a ComputeDomain makes for its group's pods."""
    spec = domain.get("spec") or {}
    return str(spec.get("channel", {}).get("resourceClaimTemplate", {}).get("name", ""))


def channels_claimed(pods: Sequence[Mapping[str, Any]]) -> set[str]:
    """The ResourceClaimTemplates `pods` claim (terminating pods' included)."""
    return {
        claim.get("resourceClaimTemplateName", "")
        for pod in pods
        for claim in (pod.get("spec") or {}).get("resourceClaims") or []
    }


def had_weights(status: Mapping[str, Any]) -> bool:
    """Whether the last status saw a Hugging Face source: resolve Jobs or caches may be left."""
    seen = condition(status, "WeightsReady")
    return bool(status.get("weights")) or seen.get("reason", "ClaimGiven") != "ClaimGiven"


def had_routing(status: Mapping[str, Any]) -> bool:
    """Whether the last status saw anything but mode Service (or predates RoutingReady): a pool
    and endpoint picker may be left to prune. Else their seven kinds are not listed."""
    return condition(status, "RoutingReady").get("reason") != "Service"
