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
