"""Compile-only matrix: every dispatch configuration x arch, compiled without a GPU and inspected.

``python -m kimi_kernels.mla_decode.matrix`` prints one line per kernel (registers, stack,
local memory, spill-instruction count, key SASS instruction counts). The inspection reads the
cubin with ``cuobjdump`` (PyPI ``nvidia-cuda-cuobjdump``): ``-res-usage`` for registers/stack/
local memory and ``-sass`` (which runs ``nvdisasm``, PyPI ``nvidia-cuda-nvdisasm``) for the
instruction classes.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kimi_kernels.mla_decode.config import ARCHS, DISPATCH_CONFIGS, SplitConfig
from kimi_kernels.mla_decode.interface import compile_combine, compile_split

_RES = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")
# A SASS line: /*0a40*/  @!P0 FFMA R1, R2, R3, R4 ;  -> "FFMA"
_OPCODE = re.compile(
    r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)"
)


def find_tool(name: str) -> str:
    """``cuobjdump``/``nvdisasm`` from the PyPI CUDA wheels (nvidia/cu13/bin), else from PATH."""
    for entry in sys.path:
        candidate = Path(entry) / "nvidia" / "cu13" / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found: pip install nvidia-cuda-{name}")
    return found


@dataclass(frozen=True)
class CubinReport:
    registers: int
    stack: int
    local: int
    spill_instructions: int  # LDL/STL in the SASS
    opcodes: collections.Counter[str] = field(compare=False)

    def count(self, prefix: str) -> int:
        """Instructions whose opcode starts with ``prefix`` (``"FFMA"``, ``"MUFU.EX2"``)."""
        return sum(n for op, n in self.opcodes.items() if op.startswith(prefix))


def inspect_cubin(cubin: bytes) -> CubinReport:
    """Resource usage and SASS opcode histogram of a single-kernel cubin."""
    cuobjdump = find_tool("cuobjdump")
    # cuobjdump -sass runs nvdisasm, which it looks up on PATH
    env = {**os.environ, "PATH": f"{Path(find_tool('nvdisasm')).parent}:{os.environ['PATH']}"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        res, sass = (
            subprocess.run(
                [cuobjdump, flag, str(path)], capture_output=True, text=True, check=True, env=env
            ).stdout
            for flag in ("-res-usage", "-sass")
        )
    found = _RES.findall(res)
    if len(found) != 1:
        raise ValueError(f"expected one kernel in the cubin, cuobjdump says:\n{res}")
    reg, stack, _shared, local = map(int, found[0])
    opcodes = collections.Counter(_OPCODE.findall(sass))
    spills = sum(n for op, n in opcodes.items() if op.startswith(("LDL", "STL")))
    return CubinReport(reg, stack, local, spills, opcodes)


@dataclass(frozen=True)
class MatrixEntry:
    kernel: str  # "split" or "combine"
    config: SplitConfig | None
    arch: str
    report: CubinReport


def compile_matrix(archs: Iterable[str] = ARCHS, dump_dir: str | None = None) -> list[MatrixEntry]:
    """Compile every dispatch configuration (and the combine kernel) for each arch."""
    own_dir = dump_dir is None
    directory = tempfile.mkdtemp(prefix="mla-matrix-") if own_dir else str(dump_dir)
    try:
        entries = []
        for arch in archs:
            for config in DISPATCH_CONFIGS:
                fn = compile_split(config, arch, directory)
                entries.append(MatrixEntry("split", config, arch, inspect_cubin(fn.__cubin__)))
            fn = compile_combine(arch, directory)
            entries.append(MatrixEntry("combine", None, arch, inspect_cubin(fn.__cubin__)))
        return entries
    finally:
        if own_dir:
            shutil.rmtree(directory, ignore_errors=True)


def format_entry(e: MatrixEntry) -> str:
    what = (
        "combine"
        if e.config is None
        else (f"split {e.config.kv_dtype:8} {e.config.num_warps}w x {e.config.rows_per_warp}r")
    )
    r = e.report
    return (
        f"{e.arch:8} {what:26} REG {r.registers:3}  STACK {r.stack:3}  LOCAL {r.local:3}  "
        f"LDL/STL {r.spill_instructions:2}  FFMA {r.count('FFMA'):4}  "
        f"MUFU.EX2 {r.count('MUFU.EX2'):2}  F2FP.*E4M3 {r.count('F2FP.F16.E4M3'):3}  "
        f"SHFL {r.count('SHFL'):3}"
    )


def main() -> int:
    archs = sys.argv[1:] or list(ARCHS)
    for entry in compile_matrix(archs):
        print(format_entry(entry))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
