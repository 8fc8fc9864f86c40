"""Every read of one reconcile, made before any write: the served APIs, the weights' resolve Jobs
and caches, the deployment's children, the pods waiting for nodes or on nodes to leave (the nodes
themselves are the Node watch's: builders/nodes.py), the requests a draining group's
leader holds (its vLLM /metrics), the Gateway, the ConfigMaps holding the calibrations an slo
names (one get each: not watched, an slo is evaluated every 30 s anyway, so an edit is read
within that) and, where one is scheduled, the calibration Jobs running, and the turn at the
operator-wide image gate. What is read depends only on the deployment and its last status,
never on a write's answer, and lists cost the API server: each is made only where it can find
something (decide.py says what is done with them).
"""

from collections.abc import Mapping
from typing import Any

import urllib3

from kimi_operator import caches, drain, group_life, rollout, routing, slo_roles
from kimi_operator import conditions as cond
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.api.status import ROLLING_REASONS, progressing_reason
from kimi_operator.builders import OperatorDefaults, uses_compute_domain
from kimi_operator.builders.calibration import CALIBRATION_LABEL, scheduled
from kimi_operator.builders.meta import MANAGER, selector_labels, selector_string
from kimi_operator.controller.retry import temporary
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError, KubernetesError
from kimi_operator.k8s.merge import owned_by
from kimi_operator.k8s.resources import (
    BY_KIND,
    CACHE_RESOURCES,
    CALIBRATION_RESOURCES,
    CHILD_RESOURCES,
    COMPUTE_DOMAIN,
    CONFIG_MAP,
    CRON_JOB,
    GATEWAY,
    HORIZONTAL_POD_AUTOSCALER,
    JOB,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    POD,
    ROUTING_RESOURCES,
    SCALED_OBJECT,
    Resource,
)
from kimi_operator.prefill_scaling import recorded_prefill
from kimi_operator.reconcile import bounded
from kimi_operator.reconcile.decide import (
    UPSTREAM,
    Observed,
    asks_turn,
    external_metric,
    found_weights,
    had_routing,
    had_weights,
    wanted_caches,
    weights_of,
)
from kimi_operator.reconcile.prometheus import prefill_load, slo_loads

# A leader's /metrics, read while its group drains: short, a reconcile never waits long on one
# (bounded.py: each read, the whole answer, its size; vLLM's text is some tens of KB).
METRICS_TIMEOUT = urllib3.Timeout(connect=1.0, read=2.0)
METRICS_DEADLINE_S = 4.0
METRICS_MAX_BYTES = 4 * 1024 * 1024
_HTTP = urllib3.PoolManager(num_pools=32, maxsize=1)


def served_apis(client: Client, kd: KimiDeployment) -> dict[Resource, bool]:
    served = {r: client.served(r) for r in UPSTREAM}
    metric = external_metric(kd)
    if metric is not None and not served[SCALED_OBJECT]:
        served[metric] = client.served(metric)
    return served


def observe(
    client: Client,
    body: Mapping[str, Any],
    kd: KimiDeployment,
    defaults: OperatorDefaults,
    *,
    warnings: list[str],
    prune: bool,
    now: str,
) -> Observed:
    """What the cluster holds for the deployment `body` (validated: `kd`, with `warnings`);
    `prune`: the controller asks for the children to prune. A failed read ends the observation
    (`error`), discovery's included (the status then says what failed, and when it is tried
    again): the reconcile writes nothing. Reading the pods or the Gateway fails the reconcile
    only for a lasting reason (they are not watched)."""
    old = body.get("status") or {}
    first = not old  # never reconciled: its children most likely do not exist yet
    seen = Observed(
        body,
        kd,
        # Until discovery answers, as if served: nothing is written anyway after a failed read.
        dict.fromkeys(UPSTREAM, True),
        warnings=warnings,
        first=first,
        # Nothing to scale down before the first status, unless the spec was edited before it.
        prune=prune and not (first and body.get("metadata", {}).get("generation") == 1),
    )
    try:
        seen.served = served_apis(client, kd)
        _weights(client, seen, defaults, now=now)
        _children(client, seen, defaults, now=now)
        _turn(client, seen, defaults, now=now)
        seen.other_autoscalers = _others(client, seen)
        seen.calibration_maps = {
            name: client.get(CONFIG_MAP, seen.kd.metadata.namespace, name)
            for name in slo_roles.calibration_maps(seen.kd)
        }
        seen.calibrating = _calibrating(client, seen.kd)
    except KubernetesError as error:
        seen.error = error
        return seen
    waiting = any(not rollout.group_ready(g) for g in seen.groups.values())
    recorded = not group_life.unrecorded(seen.old, seen.groups)
    # Which groups run on the nodes to leave is in their pods: read while a node is unfit.
    seen.unfit = defaults.nodes.now()
    reads = waiting or not recorded or bool(seen.unfit)
    if not seen.first and (reads or _may_drain(seen) or _domains(seen, defaults)):
        seen.pods = _pods(client, seen.kd)
        if waiting and seen.pods is not None:
            seen.unschedulable = cond.unschedulable(seen.pods)
        seen.in_flight = _in_flight(seen.groups, seen.pods or [])
    seen.gateway_endpoint = _gateway_endpoint(client, seen.kd)
    seen.prefill_load = prefill_load(defaults, seen.kd)
    seen.slo_loads = slo_loads(defaults, seen.kd)
    return seen


def _others(client: Client, seen: Observed) -> list[str]:
    """With spec.autoscaling.slo, the HorizontalPodAutoscalers and ScaledObjects of its
    namespace, not the operator's, that target the deployment's scale subresource."""
    kd = seen.kd
    if "decode" not in slo_roles.roles(kd):
        return []
    kinds = [HORIZONTAL_POD_AUTOSCALER, *([SCALED_OBJECT] if seen.served[SCALED_OBJECT] else [])]
    listed = [
        {**obj, "kind": resource.kind}
        for resource in kinds
        for obj in client.list(resource, kd.metadata.namespace)
    ]
    return slo_roles.foreign(kd, seen.uid, listed)


def _calibrating(client: Client, kd: KimiDeployment) -> list[str]:
    """With a scheduled calibration: the deployment's calibration Jobs not finished (its
    CronJob's, or one a user made from it: they carry its label), whose load the SLO scaler does
    not read."""
    if not scheduled(kd):
        return []
    jobs = client.list(
        JOB, kd.metadata.namespace, label_selector=f"{CALIBRATION_LABEL}={kd.metadata.name}"
    )
    return sorted(j["metadata"]["name"] for j in jobs if not caches.finished(j))


def _weights(client: Client, seen: Observed, defaults: OperatorDefaults, *, now: str) -> None:
    """The resolve Jobs not yet answered, the caches their answers name (one get each, as
    they are shared: not listed), and the termination messages of the resolve Jobs finished
    and of the download Jobs not complete."""
    kd, namespace = seen.kd, seen.kd.metadata.namespace
    for name in caches.unresolved(kd, seen.old):
        job = client.get(JOB, namespace, name)
        message = _message(client, job) if caches.finished(job) else {}
        seen.resolving[name] = (job, message)
    _, shared = wanted_caches(seen, defaults)
    for obj in shared:
        kind, name = obj["kind"], obj["metadata"]["name"]
        found = client.get(BY_KIND[kind], namespace, name)
        seen.caches[(kind, name)] = found
        if found is not None and kind == JOB.kind and not caches.completed(found):
            seen.messages[name] = _message(client, found)
    seen.found = weights_of(seen, defaults, now=now)


def _message(client: Client, job: dict[str, Any] | None) -> dict[str, Any]:
    assert job is not None
    pods = client.list(POD, job["metadata"]["namespace"], label_selector=caches.job_pods(job))
    return caches.termination_message(pods)


def selector(kd: KimiDeployment) -> str:
    """The label selector of every child of this deployment."""
    return selector_string({**selector_labels(kd), "app.kubernetes.io/managed-by": MANAGER})


def _children(client: Client, seen: Observed, defaults: OperatorDefaults, *, now: str) -> None:
    """Its LeaderWorkerSets (what a rollout decides from); with `prune`, every child kind the
    cluster serves: the routing kinds only for a deployment that has or had a pool, its Jobs
    only where it had weights to resolve, and the shared caches once its weights are ready. A
    group draining makes it prune: its drain ends in deleting the group and its ComputeDomain."""
    kd, namespace = seen.kd, seen.kd.metadata.namespace
    if seen.prune:
        _prunable(client, seen, defaults, now=now)
    if seen.first or not seen.served[LEADER_WORKER_SET]:
        return
    found = seen.children.get(LEADER_WORKER_SET.kind)
    if found is None:
        found = client.list(LEADER_WORKER_SET, namespace, label_selector=selector(kd))
    seen.groups = {
        g["metadata"]["name"]: {**g, "kind": LEADER_WORKER_SET.kind}
        for g in found
        if owned_by(g, seen.uid)
    }
    if not seen.prune and any(rollout.draining_since(g) for g in seen.groups.values()):
        seen.prune = True
        seen.children[LEADER_WORKER_SET.kind] = found
        _prunable(client, seen, defaults, now=now)


def _prunable(client: Client, seen: Observed, defaults: OperatorDefaults, *, now: str) -> None:
    """Every child kind listed (those listed already kept), and the shared caches."""
    kd, namespace, old = seen.kd, seen.kd.metadata.namespace, seen.old
    weights, shared, _ = found_weights(seen, defaults, now=now)
    weighted = bool(shared) or had_weights(old)
    routed = kd.spec.routing.mode == "InferencePool" or had_routing(old)
    # A scheduled calibration's ServiceAccount, Role and RoleBinding: listed while it has a
    # schedule or a CronJob is left, which is listed first and pruned last (a prune cut short
    # after it would leave them unlisted).
    cron_jobs = client.list(CRON_JOB, namespace, label_selector=selector(kd))
    calibrated = bool(scheduled(kd)) or any(owned_by(c, seen.uid) for c in cron_jobs)
    kinds = [
        r
        for r in CHILD_RESOURCES
        if r != CRON_JOB
        and (routed or r not in ROUTING_RESOURCES or (calibrated and r in CALIBRATION_RESOURCES))
    ]
    for resource in (*kinds, JOB) if weighted else kinds:
        if seen.served.get(resource, True) and resource.kind not in seen.children:
            listed = client.list(resource, namespace, label_selector=selector(kd))
            seen.children[resource.kind] = listed
    seen.children[CRON_JOB.kind] = cron_jobs
    if weighted and weights.ready:
        seen.shared = {
            resource.kind: client.list(resource, namespace, label_selector=caches.CACHE_SELECTOR)
            for resource in CACHE_RESOURCES
        }


def _may_drain(seen: Observed) -> bool:
    """Whether a group drains, or may start to (drain.py needs its leader pods): one is marked
    draining; the spec is new or a rollout under way (a group may be rewritten); or, when
    pruning, a role has more groups than the spec wants (a scale-down's, a surge group's, an
    evacuation's); or a group's template predates the routable label. A drain that begins
    without its pods read (a new default image) is marked, and its pods read next time."""
    generation = seen.body.get("metadata", {}).get("generation")
    if any(drain.unlabelled(g) for g in seen.groups.values()):
        return True  # their leaders are labelled before the Service selects the label
    if seen.old.get("observedGeneration") != generation or (
        progressing_reason(seen.old) in ROLLING_REASONS
    ):
        return bool(seen.groups)
    # The groups the operator's autoscalers last wanted (the spec's without one).
    kd = slo_roles.recorded(recorded_prefill(seen.kd, seen.old), seen.old)
    replicas = {"g": kd.spec.replicas, "p": 0}
    if kd.spec.prefill is not None:
        replicas["p"] = kd.spec.prefill.replicas
    present = {"g": 0, "p": 0}
    for name, group in seen.groups.items():
        found = rollout.group_of(kd.metadata.name, name)
        if rollout.draining_since(group) is not None:
            return True
        if found is not None:
            present[found[0]] += 1
    return seen.prune and any(present[letter] > replicas[letter] for letter in present)


def _domains(seen: Observed, defaults: OperatorDefaults) -> bool:
    """Whether the reconcile prunes a ComputeDomain the plan may drop for which the pods are not
    read yet (a group beyond the spec has them read by `_may_drain`): one whose group is gone,
    or any once the spec uses none. It goes only once no pod claims its channel (decide.py,
    `_prune`)."""
    if not seen.prune:
        return False
    domains = [d["metadata"]["name"] for d in seen.children.get(COMPUTE_DOMAIN.kind, [])]
    gone = any(name not in seen.groups for name in domains)
    return gone or (bool(domains) and not uses_compute_domain(seen.kd, defaults))


def _in_flight(
    groups: Mapping[str, Mapping[str, Any]], pods: list[dict[str, Any]]
) -> dict[str, int | None]:
    """The requests the leader of each Ready group draining holds (None: no answer)."""
    by_group = group_life.by_group(pods)
    out: dict[str, int | None] = {}
    for name, group in groups.items():
        if rollout.draining_since(group) is None or not rollout.group_ready(group):
            continue
        urls = [drain.metrics_url(p) for p in drain.leaders(by_group.get(name, []))]
        counts = [requests_at(url) for url in urls if url is not None]
        out[name] = None if not counts or None in counts else sum(c or 0 for c in counts)
    return out


def requests_at(url: str) -> int | None:
    """Requests in flight on the vLLM server at `url` (its /metrics); None if it does not say."""
    try:
        status, body = bounded.get(
            _HTTP,
            url,
            timeout=METRICS_TIMEOUT,
            deadline_s=METRICS_DEADLINE_S,
            max_bytes=METRICS_MAX_BYTES,
        )
    except urllib3.exceptions.HTTPError:
        return None
    if status != 200:
        return None
    return drain.in_flight(body.decode(errors="replace"))


def _turn(client: Client, seen: Observed, defaults: OperatorDefaults, *, now: str) -> None:
    """The operator-wide turn to move to a new default image, asked only when the plan needs it
    (builders.images: reading every deployment's status, it takes a free turn for this one)."""
    kd, uid = seen.kd, seen.uid
    label = f"{kd.metadata.namespace}/{kd.metadata.name}"

    def ask() -> str:
        seen.turn = defaults.image_gate.claim(
            uid, label, defaults.serving_image, lambda ns: client.list(KIMI_DEPLOYMENT, ns)
        )
        return seen.turn

    asks_turn(seen, defaults, now=now, ask=ask)


def _pods(client: Client, kd: KimiDeployment) -> list[dict[str, Any]] | None:
    """The deployment's pods: why a group's wait for nodes, as the scheduler said on them, and
    each group's start and failures (group_life.py); None if they could not be listed now (pods
    are not watched, the next resync looks again)."""
    try:
        pods: list[dict[str, Any]] = client.list(
            POD, kd.metadata.namespace, label_selector=selector_string(selector_labels(kd))
        )
    except ApiError as error:
        if temporary(error):
            return None
        raise
    return pods


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
