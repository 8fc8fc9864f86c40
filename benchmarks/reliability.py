"""The operator under faults, restarts, hand edits, churn, teardowns and hostile input, as figures.

`kimi-operator run` in a process of its own against the embedded API server (through KUBECONFIG,
as in a cluster), with its default timeouts and backoffs: API faults on a schedule during create,
update, scale and delete; SIGKILL at random points and restart (--kills, 50 by default); children
and CRDs changed by hand; --deployments churned by --clients concurrent clients, then a soak of
--soak-seconds (600 for the 10-minute figure) with its RSS sampled; the validator and CLI fuzzed
(benchmarks/fuzz_inputs.py); deployments held terminating and deleted with each propagation
policy (Foreground, Orphan, Background), and two `--leader-elect` replicas whose leader is frozen
(SIGSTOP) in a burst and woken after the standby converged, and the KimiDeployment watch gone
silent while deployments are created (embedded/teardown.py); a prune's DELETE held by the API
server while its group is made anew, and the default-image turn holder deleted mid-move
(embedded/stale.py); nodes under groups cordoned and drained as `kubectl drain` does, then
uncordoned, and a whole rack under two deployments drained at once with the operator SIGKILLed
and restarted mid-drain (embedded/drains.py). Prints a table and writes
benchmarks/results/reliability.json.

Usage: python benchmarks/reliability.py [--kills 50] [--deployments 500] [--soak-seconds 600]
       python benchmarks/reliability.py --bounded   (a few minutes: fewer of everything)
"""

import argparse
import functools
import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from fuzz_inputs import run_fuzz
from kimi_operator.api.crd import crd
from kimi_operator.embedded.chart import NAMESPACE as RELEASE_NAMESPACE
from kimi_operator.embedded.chart import operator_identity
from kimi_operator.embedded.drains import (
    RackDrainReport,
    rack_summary,
    run_drains,
    run_rack_drain,
)
from kimi_operator.embedded.drains import summary as drains_summary
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.processes import OperatorProcess, metric_total
from kimi_operator.embedded.reliability import (
    run_by_hand,
    run_churn,
    run_faults,
    run_group_life,
    run_restarts,
)
from kimi_operator.embedded.stale import (
    MOVERS_NAMESPACE,
    run_holder_deleted,
    run_stale_delete,
)
from kimi_operator.embedded.teardown import (
    DeletionReport,
    run_deletions,
    run_frozen_leader,
    run_silent_watch,
    summary,
)
from kimi_operator.embedded.upstream import CHILD_KINDS, upstream_crd
from kimi_operator.k8s.client import Client, load_configuration

ROOT = Path(__file__).resolve().parents[1]
OPERATOR_TIMEOUT_S = 15.0  # the operator's read timeout (Client's default)
RESYNC_S = 5  # the operator's resync interval here
LEADER_ELECTION = [
    "--leader-elect",
    f"--leader-elect-resource-namespace={RELEASE_NAMESPACE}",
    "--leader-elect-resource-name=kimi-kimi-operator",  # the chart's Lease
    "--leader-elect-lease-duration=3",
    "--leader-elect-renew-deadline=2",
    "--leader-elect-retry-period=0.5",
]


def upstream_crds() -> dict[str, dict[str, Any]]:
    return {kind: upstream_crd(kind) for kind in CHILD_KINDS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bounded", action="store_true", help="fewer of everything (minutes)")
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--deployments", type=int, default=500)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--soak-seconds", type=float, default=600.0)
    parser.add_argument("--fuzz-cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 30))
    args = parser.parse_args()
    if args.bounded:
        args.kills, args.deployments, args.clients = 8, 100, 4
        args.soak_seconds, args.fuzz_cases = min(args.soak_seconds, 30.0), 200

    crds = upstream_crds()
    result: dict[str, Any] = {"seed": args.seed, "bounded": args.bounded}
    started = time.monotonic()
    with EmbeddedApiServer() as api:
        api.install_crds([crd(), *crds.values()])
        client = Client(load_configuration(api.url), pool_size=args.clients + 4)
        args_ = [f"--resync-interval={RESYNC_S}", "--workers=16"]
        with OperatorProcess(api.url, args_, token=operator_identity(api)) as op:
            faults = run_faults(
                api,
                client,
                deployments=8 if args.bounded else 20,
                timeout_delay_s=OPERATOR_TIMEOUT_S + 1,
                phase_timeout_s=180,
            )
            hand = run_by_hand(
                api,
                client,
                is_up=op.is_healthy,
                errors=lambda: metric_total(op.metrics(), "kimi_operator_reconcile_errors_total"),
                crds=crds if not args.bounded else {"PodMonitor": crds["PodMonitor"]},
                timeout_s=120,  # the operator caches discovery for 30 s
            )
            restarts = run_restarts(api, client, op, kills=args.kills, seed=args.seed)
            deletions = run_deletions(
                api, client, deployments=12 if args.bounded else 30, settle_s=15, timeout_s=180
            )
            silent = run_silent_watch(
                api, client, deployments=4 if args.bounded else 10, timeout_s=300
            )
            stale = run_stale_delete(api, client, timeout_s=180)
            life = run_group_life(api, client, timeout_s=180)
            drains = run_drains(client, api.url, timeout_s=180, seed=args.seed)
            rack = run_rack_drain(
                client,
                api.url,
                restart=functools.partial(_restart, op),
                timeout_s=180,
                settle_s=3 * RESYNC_S,
                seed=args.seed,
            )
            churn = run_churn(
                client,
                deployments=args.deployments,
                clients=args.clients,
                seed=args.seed,
                soak_s=args.soak_seconds,
                operator_pid=lambda: op.pid,
                converge_timeout_s=300,
                sample_every_s=max(1.0, args.soak_seconds / 120),
            )
        frozen = run_frozen_leader(
            api,
            client,
            [*LEADER_ELECTION, f"--resync-interval={RESYNC_S}", "--workers=16"],
            token=operator_identity(api),
            burst=60 if args.bounded else 120,
            timeout_s=180,
        )
        holder = run_holder_deleted(
            client,
            lambda image: OperatorProcess(
                api.url,
                [*args_, f"--serving-image={image}", f"--namespace={MOVERS_NAMESPACE}"],
                token=operator_identity(api),
            ),
            timeout_s=180,
        )
        client.close()
    fuzz = run_fuzz(args.fuzz_cases, args.seed)

    injected = Counter(faults.injected)
    injected.update(
        {
            "crd-removed": len(hand.crds),
            "hand-edit": len(hand.repaired),
            "sigkill": restarts.restarts,
            "watch-silence": silent.silenced,
        }
    )
    converged = faults.converged + restarts.converged + churn.converged
    found = (faults, restarts, churn, life, drains, rack)
    duplicates = sum(r.duplicates for r in found)
    orphans = sum(r.orphans for r in found)
    result |= {
        "faults_injected": dict(sorted(injected.items())),
        "deployments_converged": converged,
        "duplicates": duplicates,
        "orphans": orphans,
        "status_reasons_by_phase": faults.reasons,
        "crds_reported": hand.crds,
        "errors_while_crds_missing": hand.errors_during_crd_removal,
        "operator_stayed_up": hand.operator_up,
        "restarts_survived": restarts.restarts,
        "kill_after_writes": restarts.kill_after_writes,
        "churn": {
            "deployments": churn.deployments,
            "clients": args.clients,
            "operations": dict(churn.operations),
            "soak_seconds": round(churn.soak_s, 1),
        },
        "deletions": summary(deletions),
        "frozen_leader": summary(frozen),
        "silent_watch": summary(silent),
        "stale_delete": {
            "answer": stale.answer,
            "group_made_anew_survived": stale.survived,
            "converged": stale.converged.exact,
        },
        "group_life": {
            "failures_counted": life.failures,
            "disruptions": life.disruptions,
            "ready_and_stopped_while_stopped": life.while_stopped,
            "writes_to_the_serving_group_while_another_stopped": life.serving_written,
        },
        "node_drains": drains_summary(drains),
        "rack_drain": _rack(rack),
        "turn_holder_deleted": {
            "next_moved_after_seconds": round(holder.moved_after_s, 1),
            "resync_interval_seconds": RESYNC_S,
        },
        "fuzz": fuzz,
        "rss_mb": {"peak": churn.peak_rss_mb, "final": churn.final_rss_mb},
        "rss_mb_over_time": churn.rss_mb,
        "wall_seconds": round(time.monotonic() - started, 1),
        "targets": {"duplicates": 0, "orphans": 0},
    }
    ops = sum(churn.operations.values())
    rows = [
        ("faults injected", ", ".join(f"{k} {v}" for k, v in sorted(injected.items()))),
        ("deployments converged (fault phases, restarts, churn)", f"{converged}"),
        ("duplicates / orphans found", f"{duplicates} / {orphans}   (target 0 / 0)"),
        ("restarts survived (SIGKILL mid-reconcile)", f"{restarts.restarts}"),
        (
            "a group's life: failures counted at the end / writes to the serving group while "
            "the other was stopped",
            f"{sum(life.failures['resumed'].values())} / {len(life.serving_written)}   "
            "(target 1, the crash / 0)",
        ),
        (
            "node drains (target: no serving pod evicted, fewest serving = replicas)",
            drains_summary(drains),
        ),
        (
            "rack drain, two deployments, operator restarted mid-drain (target: fewest serving "
            "= replicas, one start per group, none after uncordon, no failure)",
            rack_summary(rack),
        ),
        ("CRDs removed and re-added: status said", ", ".join(hand.crds.values())),
        (
            "churn",
            f"{churn.deployments} deployments, {args.clients} clients, {ops} operations, "
            f"{churn.soak_s:.0f} s soak",
        ),
        (
            "deletions (Foreground / Orphan / Background), held terminating",
            _deletions_row(deletions),
        ),
        (
            "frozen leader woken: writes but to the Lease that took effect / exit code",
            f"{len(frozen.landed_after_wake)} / {frozen.exit_code}   (target 0 / 3; "
            f"{len(frozen.writes_after_wake)} sent and refused; burst {frozen.burst}, "
            f"converged {frozen.converged.exact})",
        ),
        (
            "silent watch: deployments created meanwhile converged",
            f"{silent.deployments} in {silent.converge_s:.0f} s, audit exact "
            f"{silent.converged.exact}   (watch resumed from its version {silent.resumed}; "
            "inactivity timeout 70 s)",
        ),
        (
            "stale prune (held 3 s, group made anew): answer / group survived",
            f"{stale.answer} / {stale.survived}   (target 409 / True; "
            f"converged {stale.converged.exact})",
        ),
        (
            "default-image turn holder deleted mid-move: next one moved after",
            f"{holder.moved_after_s:.1f} s   (target: within a resync, {RESYNC_S} s)",
        ),
        ("fuzz cases run (crashes / tracebacks)", _fuzz_row(fuzz)),
        ("operator RSS peak / final", f"{churn.peak_rss_mb:.1f} / {churn.final_rss_mb:.1f} MB"),
    ]
    mode = "bounded" if args.bounded else "full"
    print(f"Reliability ({mode} run, seed {args.seed}, {result['wall_seconds']:.0f} s)")
    for label, value in rows:
        print(f"  {label:<56} {value}")
    out = ROOT / "benchmarks" / "results" / "reliability.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")


def _deletions_row(report: DeletionReport) -> str:
    counts = " / ".join(
        str(report.deletions.get(p, 0)) for p in ("Foreground", "Orphan", "Background")
    )
    figures = summary(report)
    return (
        f"{counts}: created for a terminating owner {figures['created_for_terminating_owner']}, "
        f"outliving their owner {figures['children_outliving_owner']}, orphans adopted back "
        f"{figures['orphans_adopted_back']}   (target 0 / 0 / 0)"
    )


def _restart(op: OperatorProcess) -> None:
    """SIGKILL, then started again (waiting for its /healthz)."""
    op.kill()
    op.start()


def _rack(report: RackDrainReport) -> dict[str, Any]:
    """The rack drain's figures for the JSON."""
    return {
        "nodes": report.nodes,
        "groups_on_the_rack": len(report.groups),
        "drained_seconds": report.took_s,
        "operator_restarted_after_seconds": report.restarted_after_s,
        "groups_started_before_the_restart": report.started_before_restart,
        "evictions_granted": report.evicted,
        "evictions_refused": report.refused,
        "serving_pods_evicted": len(report.serving_evicted),
        "fewest_serving": report.fewest_serving,
        "groups_started": len(report.started),
        "groups_started_after_uncordon": len(report.started_after_uncordon),
        "failures": sum(report.failures.values()),
        "duplicates": report.duplicates,
        "orphans": report.orphans,
        "wall_seconds": report.wall_s,
    }


def _fuzz_row(fuzz: dict[str, int | float]) -> str:
    return f"{fuzz.get('cases', 0)} ({fuzz.get('crashes', 0)} / {fuzz.get('tracebacks', 0)})"


if __name__ == "__main__":
    main()
