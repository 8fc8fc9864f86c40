"""Gathers the preflight facts from the node (cuda-bindings, /proc, /dev, torch), the image (vLLM's
fast path imports) and the GPU (the CuTe DSL, vLLM's MLA attention cores)."""

from __future__ import annotations

import dataclasses
import glob
import re
from pathlib import Path
from typing import Any

from kimi_kernels.preflight import imports
from kimi_kernels.preflight.checks import (
    Facts,
    Gpu,
    should_run_attention,
    should_run_kernel_checks,
)

IMEX_CHANNELS = "/dev/nvidia-caps-imex-channels/channel*"
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")


def _driver_version() -> str | None:
    try:
        text = DRIVER_VERSION_FILE.read_text()
    except OSError:
        return None
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
    return m.group(1) if m else None


def _gpus(driver: Any) -> tuple[Gpu, ...] | str:
    """The GPUs cuda-bindings sees, or a one-line reason why there are none."""
    ok = driver.CUresult.CUDA_SUCCESS
    try:
        (err,) = driver.cuInit(0)
    except Exception as exc:  # the driver library itself is missing (not a GPU node)
        return f"no NVIDIA GPU found (NVIDIA driver library not loadable: {exc})"
    if err != ok:
        return f"no NVIDIA GPU found (cuInit: {err.name})"
    err, count = driver.cuDeviceGetCount()
    if err != ok or count == 0:
        return "no NVIDIA GPU found (the driver reports no device)"
    attr = driver.CUdevice_attribute
    gpus = []
    for index in range(count):
        _, dev = driver.cuDeviceGet(index)
        _, raw_name = driver.cuDeviceGetName(64, dev)
        _, major = driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev
        )
        _, minor = driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev
        )
        _, multicast = driver.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, dev
        )
        name = raw_name.split(b"\0", 1)[0].decode(errors="replace")
        gpus.append(Gpu(index, name, (major, minor), bool(multicast)))
    return tuple(gpus)


def _node(expect_imex: bool) -> Facts:
    try:
        from cuda.bindings import driver  # noqa: PLC0415
    except ImportError as exc:
        return Facts(
            probe_error=f"no NVIDIA GPU found (cuda-bindings not importable: {exc})",
            expect_imex=expect_imex,
        )
    gpus = _gpus(driver)
    if isinstance(gpus, str):
        return Facts(probe_error=gpus, expect_imex=expect_imex)
    err, driver_cuda = driver.cuDriverGetVersion()
    runtime_cuda: str | None = None
    try:
        import torch  # noqa: PLC0415

        runtime_cuda = torch.version.cuda
    except ImportError:
        pass
    return Facts(
        gpus=gpus,
        driver_version=_driver_version(),
        driver_cuda=driver_cuda if err == driver.CUresult.CUDA_SUCCESS else None,
        runtime_cuda=runtime_cuda,
        expect_imex=expect_imex,
        imex_channels=tuple(sorted(glob.glob(IMEX_CHANNELS))),
    )


def gather(*, expect_imex: bool, fast_path: bool) -> Facts:
    """The node's facts; with ``fast_path``, also what vLLM's latency-specialized decode needs of
    the image (its imports, with or without a GPU) and of the GPU (the CuTe DSL, the attention
    cores)."""
    facts = _node(expect_imex)
    if not fast_path:
        return facts
    tried, errors = imports.check()
    facts = dataclasses.replace(
        facts, fast_path_checks_ran=True, imports_tried=len(tried), import_errors=tuple(errors)
    )
    if should_run_kernel_checks(facts):
        from kimi_kernels.preflight.kernels import check_dsl  # noqa: PLC0415

        facts = dataclasses.replace(facts, dsl_error=check_dsl())
    if should_run_attention(facts):
        from kimi_kernels.preflight.attention import check_cores  # noqa: PLC0415

        facts = dataclasses.replace(facts, attention=check_cores("cuda"))
    return facts
