"""Read a Dockerfile's instructions (continuation lines joined, comments dropped)."""

import re
from dataclasses import dataclass
from pathlib import Path

from tests.support.repo import ROOT

OPERATOR = ROOT / "images" / "operator" / "Dockerfile"
SERVING = ROOT / "images" / "vllm" / "Dockerfile"
CHECK = ROOT / "images" / "vllm" / "check_fast_path.py"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    value: str


def instructions(path: Path) -> list[Instruction]:
    out, pending = [], ""
    for line in path.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        keyword, _, value = (pending + line).strip().partition(" ")
        out.append(Instruction(keyword.upper(), re.sub(r"\s+", " ", value).strip()))
        pending = ""
    return out


def stages(path: Path) -> list[list[Instruction]]:
    """The instructions of each build stage (global ARGs before the first FROM dropped)."""
    out: list[list[Instruction]] = []
    for instruction in instructions(path):
        if instruction.keyword == "FROM":
            out.append([])
        if out:
            out[-1].append(instruction)
    return out


def arg_default(path: Path, name: str) -> str:
    for instruction in instructions(path):
        if instruction.keyword == "ARG" and instruction.value.startswith(f"{name}="):
            return instruction.value.split("=", 1)[1]
    raise AssertionError(f"{path}: no ARG {name}=...")
