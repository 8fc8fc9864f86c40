"""The operator at scale, against the embedded API server: 200 KimiDeployments created at once.

Measures (against its targets): time from a deployment's create to all its children present
(median, p99 < 2 s), API writes per deployment against the minimum (its children + one status
write), writes during a quiet minute of resyncs (0), and the operator's peak RSS (< 200 MB).

The API server and the operator each run in a process of their own (`kimi-operator run`, through
KUBECONFIG, exactly as in a cluster); the server timestamps every write. On a machine with two or
more CPUs the operator gets one of its own (the chart's CPU limit is 1) and the API server and this
load generator share the others, as in a cluster where the API server runs elsewhere; without
that, on a small machine, the three contend for the same cores and measure the machine rather
than the operator (`--no-pin` to measure that anyway). Prints a table and writes
benchmarks/results/operator.json.

Usage: python benchmarks/operator_scale.py [--deployments 200] [--quiet-seconds 60]
"""

import argparse
import copy
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from kimi_operator.embedded import chart
from kimi_operator.embedded.processes import OperatorProcess, cpu_s, fetch, memory_mb, wait
from kimi_operator.embedded.timeline import TIMELINE_PATH
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "crds" / "samples" / "k3-tp8-dspark.yaml"
NAMESPACE = "bench"
CHILDREN = 5  # ComputeDomain, LeaderWorkerSet, Service, PodDisruptionBudget, PodMonitor
TARGET_P99_S = 2.0
TARGET_RSS_MB = 200.0


def owner_of(path: str, name: str) -> tuple[str, str] | None:
    """(deployment, kind of write) for a write the operator made, or None."""
    if "/events" in path:
        return name.split(".", 1)[0], "event"
    if "/kimideployments" in path:
        return (name, "status") if path.endswith("/status") else None  # None: our own creates
    deployment = name[: -len("-g0")] if name.endswith("-g0") else name
    return deployment, "child"


def main() -> None:  # noqa: PLR0915 (one straight-line measurement)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=200)
    parser.add_argument("--quiet-seconds", type=float, default=60.0)
    parser.add_argument("--resync-interval", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="no CPU affinity")
    args = parser.parse_args()
    try:
        chart.helm_binary()  # the embedded API server renders the chart's RBAC with it
    except RuntimeError as missing:
        sys.exit(f"operator_scale: {missing}")

    server = subprocess.Popen(
        [sys.executable, "-m", "kimi_operator.embedded"],
        stdout=subprocess.PIPE,
        text=True,
    )
    operator = None
    try:
        assert server.stdout is not None
        url, token = server.stdout.readline().strip(), server.stdout.readline().strip()
        operator = OperatorProcess(
            url,
            [f"--resync-interval={args.resync_interval}", f"--workers={args.workers}"],
            token=token,
        )
        operator.start()
        cpus = sorted(os.sched_getaffinity(0))
        pinned = args.pin and len(cpus) >= 2
        if pinned:
            os.sched_setaffinity(operator.pid, cpus[-1:])
            for pid in (server.pid, 0):  # 0: this process
                os.sched_setaffinity(pid, cpus[:-1])
        time.sleep(1.0)  # its watch streams are up

        baseline = {"operator": cpu_s(operator.pid), "server": cpu_s(server.pid)}
        client = Client(load_configuration(url), pool_size=32)
        template = yaml.safe_load(SAMPLE.read_text())
        docs = []
        for i in range(args.deployments):
            doc = copy.deepcopy(template)
            doc["metadata"] = {"name": f"bench-{i:04d}", "namespace": NAMESPACE}
            docs.append(doc)
        started = time.monotonic()
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda d: client.create(KIMI_DEPLOYMENT, d), docs))
        created_s = time.monotonic() - started

        seen: list[Any] = []

        def settled() -> bool:
            """Every child and every status written (read incrementally: polling is load too)."""
            seen.extend(fetch(url + TIMELINE_PATH + f"?since={len(seen)}"))
            children = statuses = 0
            for _, method, path, *_ in seen:
                if method == "POST" and "/kimideployments" not in path and "/events" not in path:
                    children += 1
                elif method == "PATCH" and path.endswith("/status"):
                    statuses += 1
            return bool(children >= args.deployments * CHILDREN and statuses >= args.deployments)

        wait(settled, 120, "every child and status", every=0.25)
        settled_s = time.monotonic() - started
        cpu = {
            "operator_cpu_s": cpu_s(operator.pid) - baseline["operator"],
            "api_server_cpu_s": cpu_s(server.pid) - baseline["server"],
        }
        time.sleep(min(args.resync_interval, 5.0))  # writes in flight land

        timeline = fetch(url + TIMELINE_PATH)
        quiet_from = len(timeline)
        time.sleep(args.quiet_seconds)
        quiet = fetch(url + TIMELINE_PATH + f"?since={quiet_from}")
        rss_mb = memory_mb(operator.pid, "VmHWM")
        reconciles = operator.metrics()

        created_at: dict[str, float] = {}
        done_at: dict[str, float] = {}
        writes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for when, method, path, name, *_ in timeline:
            if method == "POST" and path.endswith("/kimideployments"):
                created_at[name] = when
                continue
            owner = owner_of(path, name)
            if owner is None:
                continue
            deployment, kind = owner
            writes[deployment][kind] += 1
            if kind == "child":
                done_at[deployment] = max(done_at.get(deployment, 0.0), when)
        latencies = sorted(done_at[d] - created_at[d] for d in created_at)
        p99 = latencies[min(len(latencies) - 1, round(0.99 * len(latencies)) - 1)]
        per_deployment = [sum(w.values()) for w in writes.values()]
        without_events = [w["child"] + w["status"] for w in writes.values()]
        minimum = CHILDREN + 1
        resyncs = sum(
            float(line.rsplit(" ", 1)[1])
            for line in reconciles.splitlines()
            if line.startswith("kimi_operator_reconciles_total{") and 'trigger="resync"' in line
        )
        result: dict[str, Any] = {
            "deployments": args.deployments,
            "children_per_deployment": CHILDREN,
            "create_all_s": created_s,
            "settled_s": settled_s,
            "create_to_children_median_s": statistics.median(latencies),
            "create_to_children_p99_s": p99,
            "create_to_children_max_s": latencies[-1],
            "writes_per_deployment_median": statistics.median(per_deployment),
            "writes_per_deployment_max": max(per_deployment),
            "writes_per_deployment_without_events_median": statistics.median(without_events),
            "writes_minimum": minimum,
            "events_per_deployment_median": statistics.median(w["event"] for w in writes.values()),
            "quiet_seconds": args.quiet_seconds,
            "quiet_writes": len(quiet),
            "resyncs_during_run": resyncs,
            "operator_peak_rss_mb": rss_mb,
            "cpus": len(cpus),
            "operator_has_own_cpu": pinned,
            **cpu,  # from the first create until every child and status was written
            "targets": {"p99_s": TARGET_P99_S, "rss_mb": TARGET_RSS_MB, "quiet_writes": 0},
        }
    finally:
        if operator is not None:
            operator.stop()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)

    rows = [
        ("create -> all children, median", f"{result['create_to_children_median_s']:.3f} s", ""),
        (
            "create -> all children, p99",
            f"{result['create_to_children_p99_s']:.3f} s",
            f"< {TARGET_P99_S:.0f} s",
        ),
        (
            "API writes per deployment (children + status)",
            f"{result['writes_per_deployment_without_events_median']:.0f}",
            f"= {minimum}",
        ),
        (
            "  plus Warning events per deployment",
            f"{result['events_per_deployment_median']:.0f}",
            "(custom all-reduce warning)",
        ),
        (
            f"writes during {args.quiet_seconds:.0f} s of resyncs",
            f"{result['quiet_writes']}",
            "= 0",
        ),
        ("resync reconciles in that run", f"{resyncs:.0f}", ""),
        ("operator peak RSS", f"{rss_mb:.1f} MB", f"< {TARGET_RSS_MB:.0f} MB"),
        (
            "CPU in the burst: operator / API server",
            f"{cpu['operator_cpu_s']:.1f} / {cpu['api_server_cpu_s']:.1f} s",
            f"(settled {settled_s:.1f} s after the first create)",
        ),
    ]
    print(
        f"{args.deployments} KimiDeployments created at once ({created_s:.2f} s to create); "
        + (
            f"the operator on 1 CPU of its own, API server and client on {len(cpus) - 1}"
            if pinned
            else f"operator, API server and client sharing {len(cpus)} CPUs"
        )
    )
    for label, value, target in rows:
        print(f"  {label:<48} {value:>10}   {target}")
    out = ROOT / "benchmarks" / "results" / "operator.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
