"""Reliability scenarios against the embedded API server, shared by
tests/integration/reliability (bounded) and benchmarks/reliability.py (full size): API faults on a
schedule during create, update, scale and delete; the operator killed mid-reconcile and restarted;
children and CRDs changed by hand; churn by concurrent clients with the operator's memory sampled.

Each scenario drives the cluster through a `Client` and checks it with `audit` (children exactly
as planned, no duplicates, no orphans); the operator under test runs beside it (in-process or as a
process) and is given to the scenario only where the scenario must kill, probe or measure it.
"""

import contextlib
import copy
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kimi_operator.api.status import condition
from kimi_operator.builders.meta import LWS_WORKER_INDEX_LABEL
from kimi_operator.builders.placement import GROUP_LABEL
from kimi_operator.embedded.audit import Audit, audit
from kimi_operator.embedded.faults import Fault
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.kubelet import group_ready_status
from kimi_operator.embedded.processes import OperatorProcess, memory_mb, wait
from kimi_operator.embedded.scheduler import lws_pods
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.merge import APPLIED_ANNOTATION
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, LEADER_WORKER_SET, POD, SERVICE
from kimi_operator.rollout import group_of

SAMPLE = Path(__file__).resolve().parents[3] / "crds" / "samples" / "k3-tp8-dspark.yaml"
NAMESPACE = "reliability"
# Reasons the status gives while an API failure is being retried (conditions.api_failure).
API_FAILURE_REASONS = frozenset({"ApiConflict", "ApiThrottled", "ApiServerError", "ApiTimeout"})


def deployment(name: str, namespace: str = NAMESPACE, **spec: Any) -> dict[str, Any]:
    """The sample KimiDeployment named `name`, with `spec` fields replaced."""
    doc: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    doc = copy.deepcopy(doc)
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"].update(spec)
    return doc


def unsettled(client: Client) -> list[str]:
    """The deployments whose status does not yet say that the current generation was acted on
    with nothing degraded and no retry pending (groups may still be starting: no kubelet here),
    with what it says. A group is recorded in status.groups by the reconcile after the one that
    creates it (the first reads no pods): until then the status is still to be written."""
    found = []
    for kd in client.list(KIMI_DEPLOYMENT):
        status = kd.get("status") or {}
        degraded, progressing = condition(status, "Degraded"), condition(status, "Progressing")
        if (
            status.get("observedGeneration") != kd["metadata"].get("generation")
            or degraded.get("status") != "False"
            or progressing.get("reason") == "RetryingAfterApiError"
            or len(status.get("groups") or []) < (status.get("replicas") or 0)
        ):
            found.append(
                f"{kd['metadata']['name']} (generation {kd['metadata'].get('generation')}, "
                f"observed {status.get('observedGeneration')}, Degraded {degraded.get('reason')}"
                f", Progressing {progressing.get('reason')})"
            )
    return found


def settled(client: Client) -> Audit | None:
    """The audit once the cluster is exactly as planned and every status says so; None before."""
    found = audit(client)
    if not found.exact or found.invalid or unsettled(client):
        return None
    return found


def converge(client: Client, timeout: float) -> Audit:
    """Wait until `settled`; on a timeout, say what is still wrong."""
    try:
        found: Audit = wait(
            lambda: settled(client), timeout, "convergence", 0.25, not_yet=(ApiError,)
        )
    except TimeoutError as error:
        raise AssertionError(f"{error}: {audit(client).summary()}; {unsettled(client)}") from None
    return found


def create_all(client: Client, docs: Iterable[Mapping[str, Any]]) -> None:
    for doc in docs:
        client.create(KIMI_DEPLOYMENT, doc)


def patch_all(client: Client, names: Iterable[str], spec: Mapping[str, Any]) -> None:
    for name in names:
        client.patch(KIMI_DEPLOYMENT, NAMESPACE, name, {"spec": dict(spec)})


def delete_all(client: Client, names: Iterable[str]) -> None:
    for name in names:
        client.delete(KIMI_DEPLOYMENT, NAMESPACE, name)


# ----------------------------------------------------------------------------- faults


@dataclass(frozen=True)
class Phase:
    """One change to every deployment, made while `faults` are injected. `expect`: reasons the
    status must have shown meanwhile (faults on the status write itself, or a watch stream,
    leave no trace in the status: only convergence tells)."""

    name: str
    change: Callable[[Client, Sequence[str]], None]
    faults: tuple[Fault, ...]
    expect: frozenset[str] = frozenset()


def fault_phases(deployments: int, timeout_delay_s: float) -> list[Phase]:
    """The schedule: in each phase every second matching request fails, until each fault has
    hit a quarter of the deployments (at least once). `timeout_delay_s` must exceed the
    operator's client read timeout."""
    n = max(1, deployments // 4)

    def f(method: str, path: str, status: int = 0, **extra: Any) -> Fault:
        return Fault(method, path, status, times=n, every=2, **extra)

    def scale(replicas: int) -> Callable[[Client, Sequence[str]], None]:
        return lambda client, names: patch_all(client, names, {"replicas": replicas})

    return [
        Phase(
            "create",
            lambda client, names: create_all(client, (deployment(name) for name in names)),
            (
                f("POST", "/leaderworkersets", 409),  # taken name: read, then created
                f("POST", "/computedomains", 429, retry_after=1),
                f("POST", "/services", 500),
                f("POST", "/poddisruptionbudgets", delay_s=timeout_delay_s),  # lands anyway
                Fault("GET", "/kimideployments", times=n, drop_watch=True),
            ),
            frozenset({"ApiThrottled", "ApiServerError", "ApiTimeout"}),
        ),
        Phase(
            "update gpus 8 -> 16",
            lambda client, names: patch_all(client, names, {"gpus": 16}),
            (
                f("PATCH", "/leaderworkersets/", 409),
                f("PATCH", "/leaderworkersets/", 503),
                f("GET", "/leaderworkersets/", 429, retry_after=1),
                Fault("GET", "/kimideployments", times=n, drop_watch=True),
            ),
            frozenset({"ApiConflict", "ApiServerError", "ApiThrottled"}),
        ),
        Phase(  # a status write refused cannot say so: convergence tells
            "update gpus 16 -> 8, status writes refused",
            lambda client, names: patch_all(client, names, {"gpus": 8}),
            (f("PATCH", "/status", 500), f("PATCH", "/status", 429, retry_after=1)),
        ),
        Phase(
            "scale 1 -> 3",
            scale(3),
            (
                f("POST", "/leaderworkersets", 500),
                f("POST", "/computedomains", delay_s=timeout_delay_s),
                Fault("GET", "/kimideployments", times=n, drop_watch=True),
            ),
            frozenset({"ApiServerError", "ApiTimeout"}),
        ),
        Phase(
            "scale 3 -> 1",
            scale(1),
            (
                f("DELETE", "/leaderworkersets/", 500),
                f("DELETE", "/computedomains/", 429, retry_after=1),
                f("GET", "/computedomains/", delay_s=timeout_delay_s),
            ),
            frozenset({"ApiServerError", "ApiThrottled", "ApiTimeout"}),
        ),
        Phase(
            "delete",
            delete_all,
            (
                f("GET", "/kimideployments/", 500),  # the operator's reads of a gone deployment
                Fault("GET", "/kimideployments", times=n, drop_watch=True),  # DELETED events lost
            ),
        ),
    ]


@dataclass
class FaultReport:
    injected: Counter[str] = field(default_factory=Counter)  # by Fault.kind
    converged: int = 0  # deployment-phases that converged
    duplicates: int = 0
    orphans: int = 0
    reasons: dict[str, list[str]] = field(default_factory=dict)  # phase -> reasons the status gave


def reasons_said(writes: Iterable[tuple[str, Mapping[str, Any]]]) -> set[str]:
    """The reasons of Degraded=True conditions in `writes` (paired with Progressing=True
    RetryingAfterApiError when an API failure is being retried)."""
    found = set()
    for _, status in writes:
        degraded = condition(status, "Degraded")
        if degraded.get("status") == "True":
            reason = degraded.get("reason", "")
            progressing = condition(status, "Progressing")
            retrying = (progressing.get("status"), progressing.get("reason")) == (
                "True",
                "RetryingAfterApiError",
            )
            if reason not in API_FAILURE_REASONS or retrying:
                found.add(reason)
    return found


def run_faults(
    api: EmbeddedApiServer,
    client: Client,
    *,
    deployments: int,
    timeout_delay_s: float,
    phase_timeout_s: float,
) -> FaultReport:
    """Every phase with its faults; after each one (faults cleared) the cluster converges
    exactly, and the status said each expected reason while the faults lasted. A status the
    operator sent and the API server refused as stale counts as said: the deployment was
    edited after the reconcile that met the fault read it (a relist after a dropped watch can
    start one just before the phase's edit), and a status of a spec that is gone is refused by
    design (docs/architecture.md, "Write rules"); the fault may have been spent on it."""
    names = [f"faults-{i:03d}" for i in range(deployments)]
    report = FaultReport()
    for phase in fault_phases(deployments, timeout_delay_s):
        before, statuses, stale = api.injected(), api.status_mark(), api.stale_status_mark()
        api.inject(*phase.faults)
        phase.change(client, names)
        found = converge(client, phase_timeout_s)
        api.clear_faults()
        found = converge(client, phase_timeout_s)
        report.injected += Counter(api.injected()) - Counter(before)
        said = reasons_said(api.status_writes(statuses) + api.stale_status_writes(stale))
        report.reasons[phase.name] = sorted(said)
        missing = phase.expect - said
        if missing:
            raise AssertionError(
                f"{phase.name}: the status never said {sorted(missing)} (said {sorted(said)}; "
                f"faults answered {dict(report.injected)})"
            )
        report.converged += found.converged if phase.name != "delete" else len(names)
        report.duplicates += len(found.duplicates)
        report.orphans += len(found.orphans)
    return report


# ----------------------------------------------------------------------------- restarts


@dataclass
class RestartReport:
    restarts: int = 0  # kills after which the operator came back and the cluster converged
    converged: int = 0
    duplicates: int = 0
    orphans: int = 0
    kill_after_writes: list[int] = field(default_factory=list)


def random_change(rng: random.Random, client: Client, live: set[str], pool: Sequence[str]) -> None:
    """Create, update, scale or delete one deployment of `pool` at random (`live`: those that
    exist, kept up to date)."""
    name = rng.choice(pool)
    if name not in live:
        client.create(KIMI_DEPLOYMENT, deployment(name, replicas=rng.randint(0, 3)))
        live.add(name)
    elif rng.random() < 0.2:
        client.delete(KIMI_DEPLOYMENT, NAMESPACE, name)
        live.discard(name)
    else:
        spec = {"replicas": rng.randint(0, 3), "gpus": rng.choice((8, 16))}
        client.patch(KIMI_DEPLOYMENT, NAMESPACE, name, {"spec": spec})


def run_restarts(
    api: EmbeddedApiServer,
    client: Client,
    operator: OperatorProcess,
    *,
    kills: int,
    seed: int,
    pool_size: int = 12,
    converge_every: int = 5,
    converge_timeout_s: float = 60.0,
) -> RestartReport:
    """`kills` times: change a few deployments at random, SIGKILL the operator after a random
    number of its writes (0: before it acts), restart it. Every `converge_every` kills and at
    the end, the cluster must converge exactly."""
    rng = random.Random(seed)
    pool = [f"restart-{i:02d}" for i in range(pool_size)]
    live = {kd["metadata"]["name"] for kd in client.list(KIMI_DEPLOYMENT, NAMESPACE)} & set(pool)
    report = RestartReport()
    for round_ in range(1, kills + 1):
        start = api.mark()
        for _ in range(rng.randint(1, 4)):
            random_change(rng, client, live, pool)
        ours = api.mark() - start  # our own writes, not the operator's
        after = rng.randint(0, 12)
        report.kill_after_writes.append(after)
        with contextlib.suppress(TimeoutError):  # killed after fewer writes, if it stops
            written = lambda target=start + ours + after: api.mark() >= target  # noqa: E731
            wait(written, 5.0, "its writes", every=0.005)
        operator.kill()
        operator.start()
        if round_ % converge_every == 0 or round_ == kills:
            found = converge(client, converge_timeout_s)
            report.converged = found.converged
            report.duplicates += len(found.duplicates)
            report.orphans += len(found.orphans)
        report.restarts += 1
    return report


# ----------------------------------------------------------------------------- by hand


@dataclass
class HandReport:
    repaired: list[str] = field(default_factory=list)  # what was done by hand and undone
    crds: dict[str, str] = field(default_factory=dict)  # kind -> the reason the status gave
    errors_during_crd_removal: float = 0.0
    operator_up: bool = True


def run_by_hand(
    api: EmbeddedApiServer,
    client: Client,
    *,
    is_up: Callable[[], bool],
    errors: Callable[[], float],
    crds: Mapping[str, Mapping[str, Any]],
    timeout_s: float,
) -> HandReport:
    """Children edited, deleted, disowned by hand are restored; each CRD in `crds` (kind ->
    CRD) removed while deployments exist is reported in their status, and restored once the CRD
    is back. `is_up` (the operator is alive and healthy) is checked throughout; `errors` (its
    reconcile error count) must not run away while a CRD is missing."""
    report = HandReport()
    names = ["hand-0", "hand-1"]
    create_all(client, (deployment(name) for name in names))
    converge(client, timeout_s)
    group, svc = f"{names[0]}-g0", names[1]
    client.patch(LEADER_WORKER_SET, NAMESPACE, group, {"spec": {"replicas": 7}})
    client.delete(SERVICE, NAMESPACE, svc)
    client.patch(SERVICE, NAMESPACE, names[0], {"metadata": {"ownerReferences": None}})
    converge(client, timeout_s)
    report.repaired += [f"{group} spec edited", f"{svc} deleted", f"{names[0]} disowned"]
    for kind, crd in crds.items():
        before = errors()
        api.remove_crd(crd["metadata"]["name"])

        def said(kind: str = kind) -> str | None:
            for kd in client.list(KIMI_DEPLOYMENT, NAMESPACE):
                degraded = condition(kd.get("status") or {}, "Degraded")
                if degraded.get("reason") != f"{kind}NotInstalled":
                    return None
                if "install" not in degraded.get("message", ""):
                    return None
            return f"{kind}NotInstalled"

        report.crds[kind] = wait(
            said, timeout_s, f"the status saying {kind} is missing", not_yet=(ApiError,)
        )
        report.operator_up &= is_up()
        api.install_crds([crd])
        converge(client, timeout_s)
        report.operator_up &= is_up()
        report.errors_during_crd_removal += errors() - before
    delete_all(client, names)
    return report


# ----------------------------------------------------------------------------- churn


@dataclass
class ChurnReport:
    deployments: int = 0
    operations: Counter[str] = field(default_factory=Counter)
    converged: int = 0
    duplicates: int = 0
    orphans: int = 0
    rss_mb: list[tuple[float, float]] = field(default_factory=list)  # (seconds, MB)
    soak_s: float = 0.0

    @property
    def peak_rss_mb(self) -> float:
        return max((mb for _, mb in self.rss_mb), default=0.0)

    @property
    def final_rss_mb(self) -> float:
        return self.rss_mb[-1][1] if self.rss_mb else 0.0


class RssSampler:
    """Samples a process's RSS every `every` seconds in a thread, from construction to stop."""

    def __init__(self, pid: Callable[[], int], every: float) -> None:
        self.samples: list[tuple[float, float]] = []
        self._pid, self._every, self._stop = pid, every, threading.Event()
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                mb = memory_mb(self._pid())
            except (OSError, RuntimeError, AssertionError):  # between a kill and a restart
                mb = None
            if mb is not None:
                self.samples.append((round(time.monotonic() - self._start, 1), round(mb, 1)))
            self._stop.wait(self._every)

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.samples


Specs = dict[str, dict[str, Any] | None]  # name -> the spec fields set, None: deleted


def _client_ops(client: Client, state: Specs, rng: random.Random) -> Counter[str]:
    """One client's share of the churn: each name of `state` acted on 1-5 times in an order
    shuffled across them: created when absent, else deleted (probability 0.3) or updated.
    `state` is kept up to date: no other client touches these names."""
    ops: Counter[str] = Counter()
    steps: list[str] = []
    for name in state:
        steps += [name] * rng.randint(1, 5)
    rng.shuffle(steps)
    for name in steps:
        spec: dict[str, Any] | None = {"replicas": rng.randint(0, 2), "gpus": rng.choice((8, 16))}
        if state[name] is None:
            client.create(KIMI_DEPLOYMENT, deployment(name, **(spec or {})))
            ops["create"] += 1
        elif rng.random() < 0.3:
            client.delete(KIMI_DEPLOYMENT, NAMESPACE, name)
            ops["delete"] += 1
            spec = None
        else:
            client.patch(KIMI_DEPLOYMENT, NAMESPACE, name, {"spec": spec})
            ops["update"] += 1
        state[name] = spec
    return ops


def _churn(client: Client, shares: Sequence[Specs], seed: int) -> Counter[str]:
    """The clients' shares churned at once, one thread each."""
    with ThreadPoolExecutor(len(shares)) as pool:
        counts = pool.map(
            lambda i: _client_ops(client, shares[i], random.Random(seed * 1000 + i)),
            range(len(shares)),
        )
        return sum(counts, Counter())


def check_specs(client: Client, prefix: str, shares: Iterable[Specs]) -> None:
    """The deployments named `prefix...` are exactly those the clients left, with their specs."""
    wanted = {name: spec for share in shares for name, spec in share.items() if spec is not None}
    have = {
        kd["metadata"]["name"]: kd["spec"]
        for kd in client.list(KIMI_DEPLOYMENT, NAMESPACE)
        if kd["metadata"]["name"].startswith(prefix)
    }
    wrong = sorted(
        name
        for name in set(have) | set(wanted)
        if name not in have or name not in wanted or have[name] | wanted[name] != have[name]
    )
    if wrong:
        raise AssertionError(f"deployments not as the clients left them: {wrong[:10]}")


def run_churn(
    client: Client,
    *,
    deployments: int,
    clients: int,
    seed: int,
    soak_s: float,
    operator_pid: Callable[[], int],
    converge_timeout_s: float,
    sample_every_s: float = 1.0,
) -> ChurnReport:
    """`deployments` names churned by `clients` concurrent clients (each owns a share of the
    names, so the final state is known exactly); the cluster must converge to it. Then a soak:
    the same churn on a small pool, in rounds, for `soak_s` seconds, the operator's RSS
    sampled throughout."""
    report = ChurnReport(deployments=deployments)
    sampler = RssSampler(operator_pid, sample_every_s)
    names = [f"churn-{i:04d}" for i in range(deployments)]
    shares: list[Specs] = [dict.fromkeys(names[i::clients]) for i in range(clients)]
    report.operations = _churn(client, shares, seed)
    found = converge(client, converge_timeout_s)
    check_specs(client, "churn-", shares)
    report.converged, report.duplicates = found.converged, len(found.duplicates)
    report.orphans = len(found.orphans)
    # The soak: rounds of the same churn on a pool of its own, until `soak_s` is over.
    soak = [f"soak-{i:03d}" for i in range(max(clients, min(50, deployments // 4)))]
    soak_shares: list[Specs] = [dict.fromkeys(soak[i::clients]) for i in range(clients)]
    started, round_ = time.monotonic(), 0
    while time.monotonic() - started < soak_s:
        round_ += 1
        report.operations += _churn(client, soak_shares, seed + round_)
        time.sleep(1.0)
    report.soak_s = time.monotonic() - started
    if soak_s:
        found = converge(client, converge_timeout_s)
        check_specs(client, "soak-", soak_shares)
        report.duplicates += len(found.duplicates)
        report.orphans += len(found.orphans)
    report.rss_mb = sampler.stop()
    return report


# ----------------------------------------------------------------------------- a group's life

GENERATION_LABEL = "reliability.kimi-operator.io/generation"  # of the group that made the pod
EVICTED = "EvictionByEvictionAPI"


def follow_groups(client: Client, deployment: str, namespace: str = NAMESPACE) -> None:
    """LeaderWorkerSet's controller and the kubelets, as far as a group's life goes: the pods of
    each group made (bound and Ready) for its generation, and made again when it changes (a new
    template, a stop, a resume: the group recreated); none for a group at 0 replicas; those of
    groups gone deleted. A group's status is written when its pods are made (a group the
    scenario set restarting stays so until then)."""
    groups = {
        g["metadata"]["name"]: g
        for g in client.list(LEADER_WORKER_SET, namespace)
        if group_of(deployment, g["metadata"]["name"])
    }
    pods: dict[str, list[dict[str, Any]]] = {}
    for pod in client.list(POD, namespace):
        group = pod["metadata"]["labels"].get(GROUP_LABEL, "")
        if group_of(deployment, group):
            pods.setdefault(group, []).append(pod)
    for name, found in pods.items():
        group = groups.get(name)
        if group is None or not _current(group, found):
            for pod in found:
                client.delete(POD, namespace, pod["metadata"]["name"])
    for name, group in groups.items():
        current = _current(group, pods.get(name, []))
        if group["spec"].get("replicas", 1) and not current:
            _make_pods(client, group)
        if current or not group["spec"].get("replicas", 1):
            status = group.get("status") or {}
            seen = status.get("observedGeneration") == group["metadata"].get("generation")
            if not seen:
                ready = {"status": group_ready_status(group)}
                client.patch(LEADER_WORKER_SET, namespace, name, ready, subresource="status")


def _current(group: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether `pods` (of the group) are those of its generation and it wants them."""
    generation = str(group["metadata"].get("generation"))
    return (
        bool(pods)
        and bool(group["spec"].get("replicas", 1))
        and all(p["metadata"]["labels"].get(GENERATION_LABEL) == generation for p in pods)
    )


def _make_pods(client: Client, group: Mapping[str, Any], *, ready: bool = True) -> None:
    """The group's pods, bound and Ready; the group's status Ready (`ready`), or restarting."""
    meta = group["metadata"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for index, pod in enumerate(lws_pods(group)):
        labels = pod.labels | {
            LWS_WORKER_INDEX_LABEL: str(index),
            GENERATION_LABEL: str(meta.get("generation")),
        }
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod.name, "namespace": meta["namespace"], "labels": labels},
            "spec": pod.spec,
        }
        client.create(POD, body)
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("PodScheduled", "Ready")
        ]
        container = {"name": "vllm", "restartCount": 0, "state": {"running": {}}}
        status = {"phase": "Running", "conditions": conditions, "containerStatuses": [container]}
        client.patch(POD, meta["namespace"], pod.name, {"status": status}, subresource="status")
    said = {"status": group_ready_status(group, ready=ready)}
    client.patch(LEADER_WORKER_SET, meta["namespace"], meta["name"], said, subresource="status")


@dataclass
class LifeReport:
    # group -> failures counted (status.groups[].restarts) after each step
    failures: dict[str, dict[str, int]] = field(default_factory=dict)
    disruptions: list[str] = field(default_factory=list)  # lastDisruption reasons recorded
    # While g1 was stopped: (readyReplicas, stoppedGroups) the status said during the rollout,
    # and the writes to g0 (the only group serving) and its pods.
    while_stopped: tuple[int, int] = (0, 0)
    serving_written: list[str] = field(default_factory=list)
    duplicates: int = 0
    orphans: int = 0


def _records(client: Client, name: str) -> dict[str, dict[str, Any]]:
    kd = client.get(KIMI_DEPLOYMENT, NAMESPACE, name) or {}
    return {g["name"]: g for g in (kd.get("status") or {}).get("groups") or []}


def _leaders(client: Client, name: str) -> dict[str, str]:
    """The leader pod's uid of each group of deployment `name`."""
    found = {}
    for pod in client.list(POD, NAMESPACE):
        labels = pod["metadata"]["labels"]
        group = labels.get(GROUP_LABEL, "")
        if group_of(name, group) and labels.get(LWS_WORKER_INDEX_LABEL) == "0":
            found[group] = pod["metadata"]["uid"]
    return found


def _started(client: Client, name: str, count: int) -> dict[str, dict[str, Any]] | None:
    """The records once `count` groups run and each has its present leader recorded started."""
    leaders = _leaders(client, name)
    records = _records(client, name)
    started = {group: r for group, r in records.items() if r.get("startupSeconds") is not None}
    done = len(leaders) == count and all(
        started.get(group, {}).get("leaderUid") == uid for group, uid in leaders.items()
    )
    return records if done else None


def _restarting(client: Client, group: str) -> None:
    """`group` not Ready, as LeaderWorkerSet says while it recreates the group."""
    lws = client.get(LEADER_WORKER_SET, NAMESPACE, group)
    assert lws is not None
    status = {"status": group_ready_status(lws, ready=False)}
    client.patch(LEADER_WORKER_SET, NAMESPACE, group, status, subresource="status")


def _pod(client: Client, group: str, *, leader: bool) -> dict[str, Any]:
    """The leader pod of `group`, or a worker."""
    return next(
        p
        for p in client.list(POD, NAMESPACE)
        if p["metadata"]["labels"].get(GROUP_LABEL) == group
        and (p["metadata"]["labels"].get(LWS_WORKER_INDEX_LABEL) == "0") == leader
    )


def _evicted_and_recreated(
    client: Client, name: str, group: str, until: Callable[[Callable[[], Any], str], Any]
) -> dict[str, dict[str, Any]]:
    """A worker of `group` evicted, the operator seeing it; then the group recreated by
    LeaderWorkerSet, its new pods seen while it is not Ready yet, then Ready. The records."""
    _evict(client, _pod(client, group, leader=False))
    until(
        lambda: _records(client, name)[group].get("disruptedSinceLeader") == EVICTED,
        "the eviction seen",
    )
    for pod in client.list(POD, NAMESPACE):
        if pod["metadata"]["labels"].get(GROUP_LABEL) == group:
            client.delete(POD, NAMESPACE, pod["metadata"]["name"])
    lws = client.get(LEADER_WORKER_SET, NAMESPACE, group)
    assert lws is not None
    _make_pods(client, lws, ready=False)
    records: dict[str, dict[str, Any]] = until(lambda: _started(client, name, 2), "recreated")
    ready = {"status": group_ready_status(lws)}
    client.patch(LEADER_WORKER_SET, NAMESPACE, group, ready, subresource="status")
    return records


def _evict(client: Client, worker: Mapping[str, Any]) -> None:
    """`worker` evicted (kubectl drain): its DisruptionTarget condition, its container ended by
    it, and its group not Ready (LeaderWorkerSet recreating it)."""
    ended = {"name": "vllm", "restartCount": 0, "state": {"terminated": {"exitCode": 143}}}
    disrupted = {"type": "DisruptionTarget", "status": "True", "reason": EVICTED}
    evicted = {
        "conditions": [*worker["status"]["conditions"], disrupted],
        "containerStatuses": [ended],
    }
    name = worker["metadata"]["name"]
    client.patch(POD, NAMESPACE, name, {"status": evicted}, subresource="status")
    _restarting(client, worker["metadata"]["labels"][GROUP_LABEL])


def _crash(client: Client, leader: Mapping[str, Any]) -> None:
    """`leader` OOM-killed and restarted, its group not Ready (LeaderWorkerSet recreating it)."""
    crashed = {
        "name": "vllm",
        "restartCount": 1,
        "state": {"running": {}},
        "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
    }
    status = {"status": {"containerStatuses": [crashed]}}
    client.patch(POD, NAMESPACE, leader["metadata"]["name"], status, subresource="status")
    _restarting(client, leader["metadata"]["labels"][GROUP_LABEL])


def _applied(client: Client, group: str) -> str:
    lws = client.get(LEADER_WORKER_SET, NAMESPACE, group) or {}
    return str((lws.get("metadata", {}).get("annotations") or {}).get(APPLIED_ANNOTATION, ""))


def run_group_life(api: EmbeddedApiServer, client: Client, *, timeout_s: float) -> LifeReport:
    """A two-group deployment with a budget of one failure through what a group's life brings
    (docs/group-lifecycle.md): scaled to zero and back three times, a group's pod evicted and
    the group recreated, then a group stopped by a crash while a rollout runs, and resumed. The
    groups' pods are `follow_groups`'. Nothing but the crash may be counted; the rollout may not
    touch the one group serving while the other is stopped."""
    name, report = "life", LifeReport()
    budget = {"restartBudget": {"failures": 1}}
    client.create(KIMI_DEPLOYMENT, deployment(name, replicas=2, serving=budget))

    def until(probe: Callable[[], Any], what: str) -> Any:
        def step() -> Any:
            follow_groups(client, name)
            return probe()

        return wait(step, timeout_s, what, 0.1, not_yet=(ApiError,))

    def counted(step: str) -> None:
        records = _records(client, name)
        report.failures[step] = {g: r.get("restarts", 0) for g, r in records.items()}

    until(lambda: _started(client, name, 2), "two groups started")
    g0, g1 = f"{name}-g0", f"{name}-g1"
    for cycle in range(3):  # KEDA: to zero while idle, back with the load
        patch_all(client, [name], {"replicas": 0})
        until(lambda: _status_at(client, name, replicas=0), "the status of 0 groups, naming none")
        patch_all(client, [name], {"replicas": 2})
        until(lambda: _started(client, name, 2), "two groups started again")
        counted(f"scaled 2 -> 0 -> 2 ({cycle + 1})")
    records = _evicted_and_recreated(client, name, g0, until)
    report.disruptions.append(records[g0].get("lastDisruption", {}).get("reason", ""))
    counted("evicted")
    # A crash stops g1 (budget 1); a template change meanwhile leaves g0, the one serving.
    _crash(client, _pod(client, g1, leader=True))
    _restarting(client, g1)
    until(lambda: _at_zero(client, g1), "g1 stopped at 0 replicas")
    mark, before = api.mark(), _applied(client, g1)
    patch_all(client, [name], {"serving": {"drainSeconds": 30}})  # a new pod template

    def rolled() -> dict[str, Any] | None:
        """Acted on: g1, down, rewritten; one group of two updated."""
        kd = _status_at(client, name, replicas=2)
        updated = kd is not None and (kd.get("status") or {}).get("updatedReplicas") == 1
        return kd if updated and _applied(client, g1) != before else None

    seen = until(rolled, "g1 rewritten, g0 held").get("status") or {}
    report.while_stopped = (seen.get("readyReplicas", -1), seen.get("stoppedGroups", -1))
    report.serving_written = sorted(
        {f"{w.method} {w.path}" for w in api.writes(mark) if w.name.startswith(g0)}
    )
    counted("stopped")
    annotate = {"metadata": {"annotations": {"kimi-operator.io/resume": "fixed"}}}
    client.patch(KIMI_DEPLOYMENT, NAMESPACE, name, annotate)
    found = until(lambda: settled(client), "resumed and rolled")
    counted("resumed")
    report.duplicates, report.orphans = len(found.duplicates), len(found.orphans)
    delete_all(client, [name])
    mine = (g0, g1, f"{name}-g2")  # its groups, a rollout's surge among them: not the others'
    until(lambda: not any(client.get(LEADER_WORKER_SET, NAMESPACE, g) for g in mine), "collected")
    gone = audit(client)
    report.duplicates += len(gone.duplicates)
    report.orphans += len(gone.orphans)
    return report


def _status_at(client: Client, name: str, *, replicas: int) -> dict[str, Any] | None:
    """The deployment once its status is of its generation, with `replicas` groups, every one
    of them recorded."""
    kd = client.get(KIMI_DEPLOYMENT, NAMESPACE, name) or {}
    status = kd.get("status") or {}
    of_generation = status.get("observedGeneration") == kd.get("metadata", {}).get("generation")
    groups = len(status.get("groups") or [])
    return kd if of_generation and status.get("replicas") == replicas == groups else None


def _at_zero(client: Client, group: str) -> bool:
    lws = client.get(LEADER_WORKER_SET, NAMESPACE, group) or {}
    return bool((lws.get("spec") or {}).get("replicas") == 0)
