"""Gathers the preflight facts from the node (cuda-bindings, /proc, /dev, torch, the CuTe DSL)."""

from __future__ import annotations

import dataclasses
import glob
import re
from pathlib import Path
from typing import Any

from kimi_kernels.preflight.checks import Facts, Gpu, should_run_kernel_checks

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


def gather(*, expect_imex: bool, run_kernels: bool) -> Facts:
    try:
        from cuda.bindings import driver  # noqa: PLC0415
    except ImportError as exc:
        return Facts(probe_error=f"no NVIDIA GPU found (cuda-bindings not importable: {exc})")
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
    facts = Facts(
        gpus=gpus,
        driver_version=_driver_version(),
        driver_cuda=driver_cuda if err == driver.CUresult.CUDA_SUCCESS else None,
        runtime_cuda=runtime_cuda,
        expect_imex=expect_imex,
        imex_channels=tuple(sorted(glob.glob(IMEX_CHANNELS))),
    )
    if not (run_kernels and should_run_kernel_checks(facts)):
        return facts
    from kimi_kernels.preflight.kernels import check_dsl, check_mla_decode  # noqa: PLC0415

    return dataclasses.replace(
        facts, dsl_error=check_dsl(), mla_error=check_mla_decode(), kernel_checks_ran=True
    )
