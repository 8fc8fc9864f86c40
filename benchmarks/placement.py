"""Where TP groups land on a GB300 NVL72 fleet: exclusive cliques (before) vs clique affinity (now).

Renders KimiDeployments of mixed TP8/TP16 with the operator's real builders, expands each
LeaderWorkerSet into its pods as LWS does, and schedules them with the scheduler model of
kimi_operator.embedded.scheduler on fleets of racks (18 trays of 4 GPUs, one clique each); each
seed creates the groups in another order and breaks the scheduler's ties differently. Prints a
table and writes JSON.

    python benchmarks/placement.py [--seeds 50] [--output benchmarks/results/placement.json]
"""

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.embedded.scheduler import Placement, perfect_racks, place

# (name, gpus, replicas): 5 deployments, 12 TP groups, 36 trays: 2 racks packed perfectly.
MIX = (
    ("chat", 16, 3),
    ("agents", 16, 2),
    ("batch", 8, 4),
    ("eval", 8, 2),
    ("canary", 16, 1),
)


def groups(exclusive: bool) -> list[dict[str, Any]]:
    """The LeaderWorkerSets of MIX, in the order the operator creates them."""
    out = []
    for name, gpus, replicas in MIX:
        doc = {
            "apiVersion": "kimi-operator.io/v1alpha1",
            "kind": "KimiDeployment",
            "metadata": {"name": name, "namespace": "inference"},
            "spec": {
                "model": {"name": "m", "source": {"pvc": {"claimName": "weights"}}},
                "gpus": gpus,
                "replicas": replicas,
                "scheduling": {"exclusiveClique": exclusive},
            },
        }
        report = check_document(doc)
        assert report.deployment is not None, report.problems
        children = build_children(report.deployment, OperatorDefaults())
        out += [c for c in children if c["kind"] == "LeaderWorkerSet"]
    return out


def shuffled(items: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """The groups in one of many creation orders: deployments come and go in any order."""
    out = list(items)
    random.Random(seed).shuffle(out)
    return out


def summary(runs: list[Placement]) -> dict[str, Any]:
    return {
        "runs": len(runs),
        "all_placed_runs": sum(1 for r in runs if r.waiting == 0),
        "groups_placed_median": statistics.median(r.placed for r in runs),
        "groups_waiting_median": statistics.median(r.waiting for r in runs),
        "racks_used_median": statistics.median(r.racks_used for r in runs),
        "straddling_max": max(r.straddling for r in runs),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--output", type=Path, default=Path("benchmarks/results/placement.json"))
    args = parser.parse_args(argv)
    trays = [gpus // 4 for _, gpus, replicas in MIX for _ in range(replicas)]
    perfect = perfect_racks(trays)
    rows = []
    for racks in (perfect, perfect + 1, perfect + 2, len(trays)):
        for mode, exclusive in (("exclusive (before)", True), ("clique affinity", False)):
            built = groups(exclusive)
            runs = [place(shuffled(built, seed), racks, seed) for seed in range(args.seeds)]
            rows.append({"racks": racks, "placement": mode, **summary(runs)})
    print(
        f"{len(trays)} TP groups ({trays.count(4)} TP16, {trays.count(2)} TP8), "
        f"{sum(trays)} trays; perfect packing: {perfect} racks; {args.seeds} seeds per row"
    )
    print(
        "| fleet (racks) | placement | runs with every group placed | groups placed (median) "
        "| racks used (median) | groups across two cliques |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['racks']} | {r['placement']} | {r['all_placed_runs']}/{r['runs']} "
              f"| {r['groups_placed_median']:g} of {len(trays)} | {r['racks_used_median']:g} "
              f"| {r['straddling_max']} |")  # fmt: skip
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps({"mix": MIX, "perfect_racks": perfect, "rows": rows}, indent=2) + "\n"
    )
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
