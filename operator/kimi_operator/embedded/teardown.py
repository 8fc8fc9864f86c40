"""Reliability scenarios of a real cluster's teardowns and partitions, with their audit: deletions
with each propagation policy while the deployments are held terminating by a finalizer, a
leader frozen (SIGSTOP) in the middle of a burst, then woken (SIGCONT) after the standby
converged, and a KimiDeployment watch gone silent (a connection lost without a reset) while
deployments are created. Used by benchmarks/reliability.py, tests/integration/reliability and
tests/integration/test_deposed_leader.py.

The audit, checked on the server's thread after every write (`TerminatingWatch`): no child is
created for a terminating owner; and after the deletions, none outlives its owner but the
orphans asked for (which keep no ownerReference), and no child exists twice (embedded.audit).
"""

import signal
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from kimi_operator.embedded.audit import Audit, audit
from kimi_operator.embedded.faults import Fault
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.processes import OperatorProcess, metric_total, wait
from kimi_operator.embedded.reliability import (
    NAMESPACE,
    converge,
    create_all,
    delete_all,
    deployment,
)
from kimi_operator.embedded.server import ApiServer
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import CHILD_RESOURCES, KIMI_DEPLOYMENT

HOLD = "reliability.example.com/hold"  # someone else's finalizer: the owner stays terminating
POLICIES = ("Foreground", "Orphan", "Background")
EXIT_LEADERSHIP_LOST = 3
CHILD_PLURALS = frozenset(r.plural for r in CHILD_RESOURCES)


class TerminatingWatch:
    """An observer of the embedded server: the children that appeared for a KimiDeployment
    after its deletion began (`created`, as "Kind namespace/name")."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self._known: dict[str, set[str]] = {}  # terminating owner uid -> child uids then

    def __call__(self, server: ApiServer) -> None:
        terminating = {
            kd["metadata"]["uid"]
            for kd in server.stored(KIMI_DEPLOYMENT.plural)
            if kd["metadata"].get("deletionTimestamp")
        }
        if not terminating:
            return
        children: dict[str, list[dict[str, Any]]] = {}  # owner uid -> its children now
        for plural in CHILD_PLURALS:
            for child in server.stored(plural):
                for ref in child["metadata"].get("ownerReferences") or []:
                    if ref.get("uid") in terminating:
                        children.setdefault(ref["uid"], []).append(child)
        for owner in terminating:
            now = children.get(owner, [])
            known = self._known.setdefault(owner, {c["metadata"]["uid"] for c in now})
            for child in now:
                meta = child["metadata"]
                if meta["uid"] not in known:
                    known.add(meta["uid"])
                    self.created.append(f"{child.get('kind')} {meta['namespace']}/{meta['name']}")


@dataclass
class DeletionReport:
    deletions: dict[str, int] = field(default_factory=dict)  # by propagation policy
    created_for_terminating: list[str] = field(default_factory=list)
    orphans_kept: int = 0  # children of Orphan deletions, kept without an ownerReference
    orphans_with_owner: list[str] = field(default_factory=list)  # wrongly adopted back
    left_behind: list[str] = field(default_factory=list)  # of Foreground/Background deletions
    after: Audit = field(default_factory=Audit)  # the cluster once the kept orphans are gone


def _children_of(client: Client, name: str) -> list[dict[str, Any]]:
    found = []
    for resource in CHILD_RESOURCES:
        if client.served(resource):
            for obj in client.list(resource, NAMESPACE):
                if (obj["metadata"].get("labels") or {}).get("app.kubernetes.io/instance") == name:
                    found.append({**obj, "kind": resource.kind})
    return found


def run_deletions(
    api: EmbeddedApiServer, client: Client, *, deployments: int, settle_s: float, timeout_s: float
) -> DeletionReport:
    """`deployments` created and converged, held by a finalizer, deleted with each policy in
    turn; `settle_s` of resyncs while they terminate; then released."""
    watch = TerminatingWatch()
    api.observe(watch)
    names = [f"teardown-{i}" for i in range(deployments)]
    create_all(client, [deployment(name) for name in names])
    converge(client, timeout_s)
    policy_of = {name: POLICIES[i % len(POLICIES)] for i, name in enumerate(names)}
    for name in names:
        client.patch(KIMI_DEPLOYMENT, NAMESPACE, name, {"metadata": {"finalizers": [HOLD]}})
    for name, policy in policy_of.items():
        client.delete(KIMI_DEPLOYMENT, NAMESPACE, name, propagation=policy)
    time.sleep(settle_s)  # the operator resyncs the terminating deployments meanwhile
    for name in names:
        client.patch(KIMI_DEPLOYMENT, NAMESPACE, name, {"metadata": {"finalizers": None}})
    wait(
        lambda: all(client.get(KIMI_DEPLOYMENT, NAMESPACE, n) is None for n in names),
        timeout_s,
        "every deployment gone",
    )
    time.sleep(settle_s)
    report = DeletionReport(
        deletions={p: list(policy_of.values()).count(p) for p in POLICIES},
        created_for_terminating=watch.created,
    )
    for name, policy in policy_of.items():
        for child in _children_of(client, name):
            label = f"{child['kind']} {NAMESPACE}/{child['metadata']['name']}"
            if policy != "Orphan":
                report.left_behind.append(label)
            elif child["metadata"].get("ownerReferences"):
                report.orphans_with_owner.append(label)
            else:
                report.orphans_kept += 1
                resource = next(r for r in CHILD_RESOURCES if r.kind == child["kind"])
                client.delete(resource, NAMESPACE, child["metadata"]["name"])
    report.after = audit(client)
    return report


@dataclass
class FrozenLeaderReport:
    burst: int
    exit_code: int | None  # of the old leader once woken (3: it stepped down)
    # "METHOD path -> code" of every write but the Lease's since SIGCONT
    writes_after_wake: list[str]
    # Those the API server did not refuse: the woken leader's changes (none: its writes are
    # fenced, and what was past the fence carries the read it was decided from).
    landed_after_wake: list[str]
    converged: Audit


def run_frozen_leader(
    api: EmbeddedApiServer,
    client: Client,
    args: Sequence[str],
    *,
    token: str,
    burst: int,
    timeout_s: float,
) -> FrozenLeaderReport:
    """Two `kimi-operator run ARGS` (with --leader-elect among ARGS); the leader frozen in the
    middle of a burst of `burst` creates, the standby left to converge, the old leader woken.
    Should the standby not converge, the error says how each replica is and ends its log."""
    with tempfile.TemporaryFile("w+") as first_log, tempfile.TemporaryFile("w+") as second_log:
        first = OperatorProcess(api.url, args, first_log, token=token)
        second = OperatorProcess(api.url, args, second_log, token=token)
        with first:
            wait(lambda: _leads(first), timeout_s, "the first replica to lead")
            with second:
                docs = [deployment(f"frozen-{i}") for i in range(burst)]
                create_all(client, docs[: burst // 2])
                wait(lambda: len(api.writes()) > burst, timeout_s, "the leader to be writing")
                first.signal(signal.SIGSTOP)
                create_all(client, docs[burst // 2 :])
                wait(lambda: _leads(second), timeout_s, "the standby to take the Lease over")
                try:
                    converge(client, timeout_s)
                except AssertionError as error:
                    replicas = {"the frozen leader": (first, first_log)}
                    replicas["the standby"] = (second, second_log)
                    first.kill()  # frozen, it would ignore the SIGTERM of the way out
                    raise AssertionError(f"{error}\n{_replicas(replicas)}") from None
                return _wake(api, client, first, timeout_s, burst)


def _replicas(replicas: Mapping[str, tuple[OperatorProcess, IO[str]]]) -> str:
    """Each replica's state (running, or its exit code) and the last lines of its log that are
    not INFO (failures, retries, the Lease)."""
    lines = []
    for name, (replica, log) in replicas.items():
        code = replica.process.poll() if replica.process is not None else None
        log.seek(0)
        notable = [line for line in log.read().splitlines() if " INFO " not in line][-20:]
        state = "running" if code is None else f"exited {code}"
        lines.append(f"{name}: {state}; its log, but INFO:\n" + "\n".join(notable))
    return "\n".join(lines)


def _wake(
    api: EmbeddedApiServer, client: Client, first: OperatorProcess, timeout_s: float, burst: int
) -> FrozenLeaderReport:
    """SIGCONT to the frozen leader; what it wrote after."""
    woken = api.mark()
    first.signal(signal.SIGCONT)
    code = first.wait(timeout_s)
    writes = [w for w in api.writes(woken) if "/leases/" not in w.path]
    return FrozenLeaderReport(
        burst=burst,
        exit_code=code,
        writes_after_wake=[f"{w.method} {w.path} -> {w.code}" for w in writes],
        landed_after_wake=[f"{w.method} {w.path}" for w in writes if not w.refused],
        converged=converge(client, timeout_s),
    )


@dataclass
class SilentWatchReport:
    deployments: int  # created while the watch was silent
    silenced: int  # KimiDeployment watches gone silent (the fault answered)
    resumed: int  # KimiDeployment watches opened from a resourceVersion since
    converge_s: float  # from the first create until every deployment converged
    converged: Audit


def run_silent_watch(
    api: EmbeddedApiServer, client: Client, *, deployments: int, timeout_s: float
) -> SilentWatchReport:
    """The operator's KimiDeployment watch goes silent (open; no event nor bookmark ever again)
    at the first of `deployments` creates: they converge only once the operator takes the
    watch for dead (its inactivity timeout) and resumes it from its last version, the server
    replaying their ADDED events (its resync revisits only the deployments it knows; its relist
    comes every 5 minutes). Then they are deleted."""
    mark, before = len(api.reads()), api.injected().get("watch-silence", 0)
    api.inject(Fault("GET", "/kimideployments", drop_watch=True, silent=True))
    started = time.monotonic()
    names = [f"silent-{i}" for i in range(deployments)]
    create_all(client, [deployment(name) for name in names])
    converged = converge(client, timeout_s)
    converge_s = time.monotonic() - started
    watches = [r for r in api.reads(mark) if r.verb == "watch" and "/kimideployments" in r.path]
    delete_all(client, names)
    wait(
        lambda: all(client.get(KIMI_DEPLOYMENT, NAMESPACE, n) is None for n in names),
        timeout_s,
        "every silent-* deployment gone",
    )
    return SilentWatchReport(
        deployments=deployments,
        silenced=api.injected().get("watch-silence", 0) - before,
        resumed=sum(1 for r in watches if r.resource_version not in ("", "0")),
        converge_s=converge_s,
        converged=converged,
    )


def _leads(operator: OperatorProcess) -> bool:
    return metric_total(operator.metrics(), "kimi_operator_leader") == 1


def summary(report: DeletionReport | FrozenLeaderReport | SilentWatchReport) -> Mapping[str, Any]:
    """The figures benchmarks/reliability.py prints and writes."""
    if isinstance(report, SilentWatchReport):
        return {
            "deployments_created_meanwhile": report.deployments,
            "watches_silenced": report.silenced,
            "watches_resumed_from_a_version": report.resumed,
            "converge_seconds": round(report.converge_s, 1),
            "converged": report.converged.exact,
        }
    if isinstance(report, DeletionReport):
        return {
            "deletions": report.deletions,
            "created_for_terminating_owner": len(report.created_for_terminating),
            "orphans_kept_without_owner": report.orphans_kept,
            "orphans_adopted_back": len(report.orphans_with_owner),
            "children_outliving_owner": len(report.left_behind) + len(report.after.orphans),
            "duplicates": len(report.after.duplicates),
        }
    return {
        "burst": report.burst,
        "old_leader_exit_code": report.exit_code,
        "writes_after_wake_not_to_the_lease": len(report.writes_after_wake),
        "writes_after_wake_that_changed_something": len(report.landed_after_wake),
        "converged": report.converged.exact,
    }
