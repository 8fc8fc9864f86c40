"""Preflight decisions as pure functions of the gathered facts (unit-tested without a GPU)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# vLLM 0.33.0's serving image is built on CUDA 13 (torch 2.14.0 cu13, cutlass-dsl[cu13]).
MIN_DRIVER_CUDA = 13000  # cuDriverGetVersion: 1000 * major + 10 * minor
SUPPORTED_CAPABILITIES = {(10, 0): "SM100", (10, 3): "SM103"}


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    capability: tuple[int, int]
    multicast: bool


@dataclass(frozen=True)
class CoreResult:
    """One of vLLM's MLA attention cores run on the tiny case (attention.py)."""

    core: str
    error: float | None  # worst per-row relative L2 error; None when the core did not run
    problem: str | None


@dataclass(frozen=True)
class Facts:
    """What ``probe.gather`` found. ``probe_error`` set means nothing else could be gathered."""

    probe_error: str | None = None
    gpus: tuple[Gpu, ...] = ()
    driver_version: str | None = None  # e.g. "580.95.05" (/proc/driver/nvidia/version)
    driver_cuda: int | None = None  # newest CUDA the driver supports, e.g. 13000
    runtime_cuda: str | None = None  # the CUDA torch was built with, e.g. "13.0"
    expect_imex: bool = False
    imex_channels: tuple[str, ...] = ()
    fast_path_checks_ran: bool = False  # off for decode.backend auto (--no-kernels)
    imports_tried: int = 0
    import_errors: tuple[str, ...] = ()  # the fast path's modules and lazy imports (imports.py)
    dsl_error: str | None = None  # None: the CuTe DSL smoke kernel compiled, ran and was right
    attention: tuple[CoreResult, ...] = ()  # vLLM's MLA attention cores against the reference


def _cuda_str(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def gpu_problems(facts: Facts) -> list[str]:
    if not facts.gpus:
        return ["no NVIDIA GPU found"]
    problems = []
    for gpu in facts.gpus:
        if gpu.capability not in SUPPORTED_CAPABILITIES:
            major, minor = gpu.capability
            problems.append(
                f"GPU {gpu.index} is {gpu.name} (compute capability {major}.{minor}); the "
                "latency-specialized decode path needs the SM100/SM103 family "
                "(B200/B300/GB200/GB300)"
            )
        if not gpu.multicast:
            problems.append(
                f"GPU {gpu.index} ({gpu.name}) does not support multicast memory; vLLM's fast path "
                "needs it (o-projection, MLA DCP, two-shot all-reduce)"
            )
    return problems


def driver_problems(facts: Facts) -> list[str]:
    if facts.driver_cuda is None:
        return ["could not read the NVIDIA driver's CUDA version (cuDriverGetVersion)"]
    problems = []
    if facts.driver_cuda < MIN_DRIVER_CUDA:
        problems.append(
            f"NVIDIA driver {facts.driver_version or '(unknown version)'} supports CUDA up to "
            f"{_cuda_str(facts.driver_cuda)}; the serving image needs CUDA "
            f"{_cuda_str(MIN_DRIVER_CUDA)} or newer: upgrade the node's driver"
        )
    if facts.runtime_cuda is not None:
        major, minor = (int(x) for x in facts.runtime_cuda.split(".")[:2])
        if 1000 * major + 10 * minor > facts.driver_cuda:
            problems.append(
                f"torch is built for CUDA {facts.runtime_cuda} but the driver supports only "
                f"{_cuda_str(facts.driver_cuda)}"
            )
    return problems


def imex_problems(facts: Facts) -> list[str]:
    if facts.expect_imex and not facts.imex_channels:
        return [
            "a ComputeDomain claim is expected but no IMEX channel device is mounted "
            "(/dev/nvidia-caps-imex-channels/channel*): check the ComputeDomain and the NVIDIA "
            "DRA driver on this node"
        ]
    return []


def fast_path_problems(facts: Facts) -> list[str]:
    problems = [f"the fast path would fail to import: {line}" for line in facts.import_errors]
    if facts.dsl_error is not None:
        problems.append(f"CuTe DSL smoke kernel failed: {facts.dsl_error}")
    problems.extend(
        f"vLLM's MLA attention core {r.problem}" for r in facts.attention if r.problem is not None
    )
    return problems


def evaluate(facts: Facts) -> list[str]:
    """Every problem, one line each; empty means the node is ready."""
    if facts.probe_error is not None:
        return [facts.probe_error, *fast_path_problems(facts)]
    return [
        *gpu_problems(facts),
        *driver_problems(facts),
        *imex_problems(facts),
        *fast_path_problems(facts),
    ]


def should_run_kernel_checks(facts: Facts) -> bool:
    """Kernels are only tried on a GPU whose driver can run the image's CUDA."""
    return bool(facts.gpus) and facts.probe_error is None and not driver_problems(facts)


def should_run_attention(facts: Facts) -> bool:
    """vLLM's attention cores run on SM100/SM103 only (tokenspeed_mla refuses other GPUs): on
    another GPU the family problem says it all."""
    supported = all(gpu.capability in SUPPORTED_CAPABILITIES for gpu in facts.gpus)
    return should_run_kernel_checks(facts) and supported and not facts.import_errors


def report(facts: Facts, problems: list[str]) -> dict[str, Any]:
    return {"ok": not problems, "problems": problems, "facts": asdict(facts)}
