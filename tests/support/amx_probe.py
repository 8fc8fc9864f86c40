"""What Linux lets a process do with AMX tiles, seen from inside it and from a child spawned as
vLLM spawns its engine core and workers (multiprocessing's "spawn": a fresh exec of the same
Python, the environment inherited), printed as JSON. Run by tests/kimi_operator/dev/
test_cpu_vllm.py (the project's Python) and tests/vllm/test_amx.py (.venv-vllm-cpu's), under the
CPU server's environment or not: `python amx_probe.py [--ask] [--isa]`. Its observer is its own
(arch_prctl's GET codes), not the server's sitecustomize.

--ask: this process asks for the tiles first (ARCH_REQ_XCOMP_PERM), then spawns and forks a child
(Linux: the permission is inherited on fork, cleared on exec).
--isa: also the attention kernel family vLLM's CPU build picks for the CPU server (bf16, block
size 128, head size 128) in this process, and what torch says of AMX tiles.
"""

import ctypes
import json
import multiprocessing
import platform
import subprocess
import sys
from typing import Any

SYS_ARCH_PRCTL = 158  # x86-64
ARCH_GET_XCOMP_SUPP = 0x1021
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18
TILES = 1 << XFEATURE_XTILEDATA


def _mask(code: int) -> int:
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return 0
    features = ctypes.c_uint64()
    libc = ctypes.CDLL(None, use_errno=True)
    return features.value if libc.syscall(SYS_ARCH_PRCTL, code, ctypes.byref(features)) == 0 else 0


def tiles() -> dict[str, Any]:
    """This process: the kernel offers tiles, the process may use them, its sitecustomize."""
    site = sys.modules.get("sitecustomize")
    return {
        "offered": bool(_mask(ARCH_GET_XCOMP_SUPP) & TILES),
        "permitted": bool(_mask(ARCH_GET_XCOMP_PERM) & TILES),
        "sitecustomize": getattr(site, "__file__", None),
    }


def main() -> None:
    if "--ask" in sys.argv and _mask(ARCH_GET_XCOMP_SUPP) & TILES:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
    report: dict[str, Any] = {"process": tiles()}
    for method in ("spawn", "fork"):
        with multiprocessing.get_context(method).Pool(1) as pool:
            report[method] = pool.apply(tiles)
    if "--isa" in sys.argv:
        import torch  # noqa: PLC0415
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa  # noqa: PLC0415

        report["isa"] = _get_attn_isa(torch.bfloat16, 128, 128, "auto")
        report["torch_amx"] = bool(torch.cpu._is_amx_tile_supported())
    print(json.dumps(report))


def run(python: str, env: dict[str, str], *args: str) -> dict[str, Any]:
    """The report of this script run by a fresh `python` under `env` (for the tests)."""
    done = subprocess.run(
        [python, __file__, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


if __name__ == "__main__":
    main()
