"""Helpers the bench tests share (fixtures live in conftest.py)."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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
