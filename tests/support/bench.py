"""Helpers of the bench tests (tests/kimi_operator/bench, tests/vllm): CLI results, arguments,
the closed-chain task. The `cli` and `stub` fixtures live in that folder's conftest.py."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_operator.bench.results import RequestRecord


@dataclass
class CliResult:
    code: int
    out: str
    err: str


Cli = Callable[..., CliResult]


def results(directory: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((directory / "results.json").read_text())
    return loaded


def bench_argv(url: str, output: Path, *extra: str, requests: int, output_tokens: int) -> list[str]:
    """`kimi-operator bench` arguments against `url`: no warm-up, results into `output`."""
    return [
        "bench", "--endpoint", url, "--requests", str(requests),
        "--output-tokens", str(output_tokens), "--output", str(output), "--warmup", "0", *extra,
    ]  # fmt: skip


def closed_chain_task(data: dict[str, Any], thinks: tuple[float, float]) -> tuple[Any, float]:
    """The task of a closed replay of a three-turn chain (a <- b <- c), checked: each turn became
    due when the answer it waits for ended plus its think time, and the task's completion is the
    turns' latencies plus the thinking, within the client's own overhead (send lags + the stream's
    tail after its last token). Returns the task and the summed send lag."""
    assert data["config"]["replay"] == "closed"  # the default for a trace with dependencies
    a, b, c = data["requests"]
    (task,) = data["tasks"]
    assert task["completed"]
    assert abs(b["scheduled_start_s"] - (a["start_s"] + a["e2e_s"] + thinks[0])) < 1e-6
    assert abs(c["scheduled_start_s"] - (b["start_s"] + b["e2e_s"] + thinks[1])) < 1e-6
    lags = float(sum(r["start_s"] - r["scheduled_start_s"] for r in (a, b, c)))
    tail = c["e2e_s"] - c["chunk_times_s"][-1]
    turns = a["e2e_s"] + b["e2e_s"] + c["e2e_s"]
    assert abs(task["completion_s"] - (turns + sum(thinks))) <= lags + tail + 1e-6
    return task, lags


def record(times: list[float], *, index: int = 0, error: str | None = None) -> RequestRecord:
    """A request whose chunks came at `times` (seconds after it was sent), one token each."""
    return RequestRecord(
        index=index,
        group=None,
        request_id=None,
        scheduled_start_s=0.0,
        start_s=0.0,
        prompt_tokens=1,
        output_tokens=len(times),
        ttft_s=times[0] if times else None,
        e2e_s=times[-1] if times else None,
        decode_tokens_per_s=None,
        chunk_times_s=times,
        chunk_tokens=None,
        token_counts="chunks",
        error=error,
    )
