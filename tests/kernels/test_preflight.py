"""Node preflight: the decisions as pure functions, and a real run on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kimi_kernels.preflight.checks import (
    Facts,
    Gpu,
    evaluate,
    report,
    should_run_kernel_checks,
)

GB300 = Gpu(0, "NVIDIA GB300", (10, 3), multicast=True)
B200 = Gpu(1, "NVIDIA B200", (10, 0), multicast=True)
H200 = Gpu(0, "NVIDIA H200", (9, 0), multicast=True)
GOOD = Facts(
    gpus=(GB300, B200),
    driver_version="580.95.05",
    driver_cuda=13000,
    runtime_cuda="13.0",
    kernel_checks_ran=True,
)
ROOT = Path(__file__).resolve().parents[2]


def _with(**changes: object) -> Facts:
    return Facts(**{**GOOD.__dict__, **changes})


def test_a_ready_node_has_no_problems():
    assert evaluate(GOOD) == []
    assert report(GOOD, [])["ok"] is True


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (Facts(probe_error="no NVIDIA GPU found (x)"), ["no NVIDIA GPU found (x)"]),
        (_with(gpus=()), ["no NVIDIA GPU found"]),
        (
            _with(gpus=(H200,)),
            [
                "GPU 0 is NVIDIA H200 (compute capability 9.0); the latency-specialized decode "
                "path needs the SM100/SM103 family (B200/B300/GB200/GB300)"
            ],
        ),
        (
            _with(gpus=(Gpu(2, "NVIDIA GB300", (10, 3), multicast=False),)),
            [
                "GPU 2 (NVIDIA GB300) does not support multicast memory; vLLM's fast path needs it "
                "(o-projection, MLA DCP, two-shot all-reduce)"
            ],
        ),
        (
            _with(driver_cuda=12080, runtime_cuda="12.8"),
            [
                "NVIDIA driver 580.95.05 supports CUDA up to 12.8; the serving image needs CUDA "
                "13.0 or newer: upgrade the node's driver"
            ],
        ),
        (
            _with(driver_cuda=13000, runtime_cuda="13.2"),
            ["torch is built for CUDA 13.2 but the driver supports only 13.0"],
        ),
        (
            _with(driver_cuda=None),
            ["could not read the NVIDIA driver's CUDA version (cuDriverGetVersion)"],
        ),
        (
            _with(expect_imex=True),
            [
                "a ComputeDomain claim is expected but no IMEX channel device is mounted "
                "(/dev/nvidia-caps-imex-channels/channel*): check the ComputeDomain and the NVIDIA "
                "DRA driver on this node"
            ],
        ),
        (
            _with(dsl_error="RuntimeError: boom", mla_error="max |out - reference| = 1"),
            [
                "CuTe DSL smoke kernel failed: RuntimeError: boom",
                "mla_decode check failed: max |out - reference| = 1",
            ],
        ),
    ],
)
def test_each_problem_is_one_clear_line(facts, expected):
    assert evaluate(facts) == expected


def test_imex_channel_present_is_fine():
    facts = _with(expect_imex=True, imex_channels=("/dev/nvidia-caps-imex-channels/channel0",))
    assert evaluate(facts) == []


def test_several_problems_are_all_reported():
    facts = _with(gpus=(H200, Gpu(1, "NVIDIA H200", (9, 0), multicast=False)), expect_imex=True)
    problems = evaluate(facts)
    assert len(problems) == 4
    assert problems[0].startswith("GPU 0 is NVIDIA H200")
    assert problems[1].startswith("GPU 1 is NVIDIA H200")
    assert problems[2].startswith("GPU 1 (NVIDIA H200) does not support multicast")
    assert problems[3].startswith("a ComputeDomain claim is expected")


def test_kernel_checks_run_only_with_a_usable_driver():
    assert should_run_kernel_checks(GOOD)
    assert should_run_kernel_checks(_with(gpus=(H200,)))  # still worth knowing on other GPUs
    assert not should_run_kernel_checks(_with(gpus=()))
    assert not should_run_kernel_checks(_with(driver_cuda=12080))
    assert not should_run_kernel_checks(Facts(probe_error="no NVIDIA GPU found"))


def _run_preflight(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "kernels")}
    return subprocess.run(
        [sys.executable, "-m", "kimi_kernels.preflight", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_fails_cleanly():
    run = _run_preflight()
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("preflight: no NVIDIA GPU found")
    body = json.loads(run.stdout)
    assert body["ok"] is False
    assert body["problems"][0].startswith("no NVIDIA GPU found")
    assert body["facts"]["kernel_checks_ran"] is False


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_on_a_gpu_it_reports_the_gpu_and_runs_the_kernels():
    run = _run_preflight()
    body = json.loads(run.stdout)
    assert body["facts"]["gpus"], body
    assert body["facts"]["kernel_checks_ran"] is True, body
    assert body["facts"]["dsl_error"] is None, body
    assert body["facts"]["mla_error"] is None, body
    assert run.returncode == (0 if body["ok"] else 1)
