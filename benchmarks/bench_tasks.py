"""Tasks, not requests: one generated agent trace replayed open and closed, slow and fast server.

Runs `kimi-operator bench --profile agentic` (the real CLI and client) four times against the stub
server in its own process on 127.0.0.1: the same `bench trace` output, `--replay open` and
`--replay closed`, on a slow and a fast timetable. The stub keeps its timetable whatever the load
(it models no queueing), so the differences shown are those of the replay alone: a closed replay
waits for each answer and the agent's think time, so it takes longer and a faster server shortens
its tasks; an open one sends every turn at its trace time whether or not its answer came.

Prints a table and writes benchmarks/results/bench_tasks.json.
"""

import argparse
import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

from kimi_operator.bench.stub import Schedule, serve_in_process
from kimi_operator.cli import main

RESULTS = Path(__file__).resolve().parent / "results" / "bench_tasks.json"
SERVERS = {  # name: (TTFT s, s per token)
    "slow": (0.5, 0.010),
    "fast": (0.15, 0.0025),
}


def cli(*args: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(list(args))
    if code != 0:
        raise SystemExit(f"kimi-operator {' '.join(args)}: exit {code}")


def replay(url: str, trace: Path, mode: str, directory: Path, args: argparse.Namespace) -> Any:
    cli(
        "bench", "--endpoint", url, "--profile", "agentic", "--trace", str(trace),
        "--replay", mode, "--gpus", str(args.gpus), "--gpu-hour-price", str(args.price),
        "--output", str(directory), "--no-progress",
    )  # fmt: skip
    return json.loads((directory / "results.json").read_text())


def figures(data: Any) -> dict[str, Any]:
    summary, tasks = data["summary"], data["summary"]["tasks"]
    return {
        "duration_s": summary["duration_s"],
        "requests": summary["requests_ok"],
        "tasks_completed": tasks["completed"],
        "task_completion_p50_s": tasks["completion_s"]["p50"],
        "task_completion_p90_s": tasks["completion_s"]["p90"],
        "tasks_per_hour": tasks["tasks_per_hour"],
        "cost_per_task_usd": tasks["cost_per_task_usd"],
        "cost_per_million_output_tokens_usd": summary["cost_per_million_output_tokens_usd"],
        "ttft_p50_s": summary["ttft_s"]["p50"],
        "decode_tokens_per_s_p50": summary["decode_tokens_per_s"]["p50"],
    }


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--duration", type=float, default=20.0, help="sessions start in half")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--price", type=float, default=6.5, help="$ per GPU-hour")
    args = parser.parse_args()
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        trace = Path(scratch) / "trace.jsonl"
        cli(
            "bench", "trace", "--sessions", str(args.sessions), "--turns", str(args.turns),
            "--seed", str(args.seed), "--duration", str(args.duration), "--output", str(trace),
        )  # fmt: skip
        for server, (ttft_s, step_s) in SERVERS.items():
            with serve_in_process(Schedule(ttft_s=ttft_s, step_s=step_s)) as url:
                for mode in ("closed", "open"):
                    name = f"{server}-{mode}"
                    runs[name] = figures(replay(url, trace, mode, Path(scratch) / name, args))
    columns = [
        ("duration_s", "run s", "{:.1f}"),
        ("tasks_completed", "tasks", "{}"),
        ("task_completion_p50_s", "task p50 s", "{:.2f}"),
        ("task_completion_p90_s", "task p90 s", "{:.2f}"),
        ("tasks_per_hour", "tasks/h", "{:,.0f}"),
        ("cost_per_task_usd", "$/task", "{:.4f}"),
        ("cost_per_million_output_tokens_usd", "$/1M out", "{:.2f}"),
        ("ttft_p50_s", "TTFT p50 s", "{:.3f}"),
        ("decode_tokens_per_s_p50", "decode p50", "{:.0f}"),
    ]
    print(f"{'run':<14}" + "".join(f"{title:>12}" for _, title, _ in columns))
    for name, row in runs.items():
        print(f"{name:<14}" + "".join(f"{fmt.format(row[key]):>12}" for key, _, fmt in columns))
    RESULTS.parent.mkdir(exist_ok=True)
    setup = {"servers": SERVERS, **vars(args)}
    RESULTS.write_text(json.dumps({"setup": setup, "runs": runs}, indent=1) + "\n")
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main_()
