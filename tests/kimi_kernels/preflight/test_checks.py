"""Node preflight: the decisions as pure functions, and a real run on this machine."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kimi_kernels.preflight import imports
from kimi_kernels.preflight.checks import (
    CoreResult,
    Facts,
    Gpu,
    evaluate,
    report,
    should_run_attention,
    should_run_kernel_checks,
)
from tests.support.repo import ROOT

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)

GB300 = Gpu(0, "NVIDIA GB300", (10, 3), multicast=True)
B200 = Gpu(1, "NVIDIA B200", (10, 0), multicast=True)
H200 = Gpu(0, "NVIDIA H200", (9, 0), multicast=True)
GOOD = Facts(
    gpus=(GB300, B200),
    driver_version="580.95.05",
    driver_cuda=13000,
    runtime_cuda="13.0",
    fast_path_checks_ran=True,
    imports_tried=60,
    attention=(CoreResult("tokenspeed", 2e-3, None), CoreResult("trtllm", 3e-3, None)),
)


def _with(**changes: object) -> Facts:
    return Facts(**{**GOOD.__dict__, **changes})


def test_a_ready_node_has_no_problems() -> None:
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
            _with(
                import_errors=("from tokenspeed_mla import mla_decode (...) fails: boom",),
                dsl_error="RuntimeError: boom",
                attention=(
                    CoreResult("tokenspeed", 1.0, "tokenspeed: relative L2 error 1 (limit 0.01)"),
                    CoreResult("trtllm", None, "trtllm: RuntimeError: no cubin"),
                ),
            ),
            [
                "the fast path would fail to import: from tokenspeed_mla import mla_decode (...) "
                "fails: boom",
                "CuTe DSL smoke kernel failed: RuntimeError: boom",
                "vLLM's MLA attention core tokenspeed: relative L2 error 1 (limit 0.01)",
                "vLLM's MLA attention core trtllm: RuntimeError: no cubin",
            ],
        ),
        (
            Facts(probe_error="no NVIDIA GPU found (x)", import_errors=("import tvm_ffi fails",)),
            ["no NVIDIA GPU found (x)", "the fast path would fail to import: import tvm_ffi fails"],
        ),
    ],
)
def test_each_problem_is_one_clear_line(facts: Facts, expected: list[str]) -> None:
    assert evaluate(facts) == expected


def test_imex_channel_present_is_fine() -> None:
    facts = _with(expect_imex=True, imex_channels=("/dev/nvidia-caps-imex-channels/channel0",))
    assert evaluate(facts) == []


def test_several_problems_are_all_reported() -> None:
    facts = _with(gpus=(H200, Gpu(1, "NVIDIA H200", (9, 0), multicast=False)), expect_imex=True)
    problems = evaluate(facts)
    assert len(problems) == 4
    assert problems[0].startswith("GPU 0 is NVIDIA H200")
    assert problems[1].startswith("GPU 1 is NVIDIA H200")
    assert problems[2].startswith("GPU 1 (NVIDIA H200) does not support multicast")
    assert problems[3].startswith("a ComputeDomain claim is expected")


def test_kernel_checks_run_only_with_a_usable_driver() -> None:
    assert should_run_kernel_checks(GOOD)
    assert should_run_kernel_checks(_with(gpus=(H200,)))  # still worth knowing on other GPUs
    assert not should_run_kernel_checks(_with(gpus=()))
    assert not should_run_kernel_checks(_with(driver_cuda=12080))
    assert not should_run_kernel_checks(Facts(probe_error="no NVIDIA GPU found"))


def test_attention_cores_run_only_where_vllm_could_run_them() -> None:
    assert should_run_attention(GOOD)
    assert should_run_attention(_with(gpus=(Gpu(0, "NVIDIA GB300", (10, 3), multicast=False),)))
    assert not should_run_attention(_with(gpus=(GB300, H200)))  # tokenspeed_mla refuses SM90
    assert not should_run_attention(_with(import_errors=("import tvm_ffi fails",)))
    assert not should_run_attention(_with(driver_cuda=12080))


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


# An import statement inside a block (a function's body): `from m import a, b`, parenthesised
# over several lines or not, or `import m` (either with `as` names).
INDENTED_IMPORT = re.compile(
    r"^[ \t]+(?:from[ \t]+(?P<module>[\w.]+)[ \t]+import[ \t]+(?P<names>\([^)]*\)|[^\n#]+)"
    r"|import[ \t]+(?P<imported>[\w.]+)(?:[ \t]+as[ \t]+\w+)?[ \t]*$)",
    re.MULTILINE,
)


def _fast_path_failures() -> list[str]:
    """The lines the import check must give here, found independently of it (a text scan of vLLM's
    source, not the preflight's AST walk): every absolute import inside a block of the fast path
    whose top-level package is not installed (the development venv lacks tokenspeed_mla, which
    vLLM's requirements bring only to the serving image)."""
    spec = importlib.util.find_spec("vllm")
    assert spec is not None
    assert spec.submodule_search_locations
    site = Path(next(iter(spec.submodule_search_locations))).parent
    package = site / imports.FAST_PATH.replace(".", "/")
    failures = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        for match in INDENTED_IMPORT.finditer(text):
            module = match["module"] or match["imported"]
            if importlib.util.find_spec(module.partition(".")[0]) is not None:
                continue
            line = text.count("\n", 0, match.start()) + 1
            where = f"{path.relative_to(site).as_posix()}:{line}"
            if match["imported"]:
                failures.append(f"import {module} ({where})")
            else:
                # `from m import a as b` is the import of a (the preflight names what is imported).
                parts = match["names"].strip("()").split(",")
                names = [n.split(" as ")[0].strip() for n in parts if n.strip()]
                failures.append(f"from {module} import {', '.join(names)} ({where})")
    return failures


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_still_checks_the_image() -> None:
    """No GPU, and vLLM's fast path imported as the image would on first use: every import that
    fails is one line naming vLLM's source line, no traceback."""
    run = _run_preflight()
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    # (vLLM itself logs a line here: the development venv's vLLM has no compiled vllm._C.)
    lines = [line for line in run.stderr.splitlines() if line.startswith("preflight: ")]
    assert lines[0].startswith("preflight: no NVIDIA GPU found")
    missing = _fast_path_failures()
    assert [line.partition(" fails: ")[0] for line in lines[1:]] == [
        f"preflight: the fast path would fail to import: {m}" for m in missing
    ]
    assert all("ModuleNotFoundError" in line for line in lines[1:])
    body = json.loads(run.stdout)
    assert body["ok"] is False
    assert body["problems"] == [line.removeprefix("preflight: ") for line in lines]
    facts = body["facts"]
    assert facts["fast_path_checks_ran"] is True
    assert facts["imports_tried"] > 50  # the package's modules and lazy imports (60 in 0.33.0)
    assert facts["dsl_error"] is None
    assert facts["attention"] == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_stock_decode_skips_the_fast_path_checks() -> None:
    run = _run_preflight("--no-kernels")
    assert run.returncode == 1
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("preflight: no NVIDIA GPU found")
    facts = json.loads(run.stdout)["facts"]
    assert facts["fast_path_checks_ran"] is False
    assert facts["imports_tried"] == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_on_a_gpu_it_reports_the_gpu_and_runs_the_kernels() -> None:
    run = _run_preflight()
    body = json.loads(run.stdout)
    facts = body["facts"]
    assert facts["gpus"], body
    assert facts["fast_path_checks_ran"] is True, body
    assert facts["dsl_error"] is None, body
    assert run.returncode == (0 if body["ok"] else 1)
    if all(tuple(g["capability"]) in {(10, 0), (10, 3)} for g in facts["gpus"]):
        assert facts["import_errors"] == [], body
        assert [(r["core"], r["problem"]) for r in facts["attention"]] == [
            ("tokenspeed", None),
            ("trtllm", None),
        ], body
    else:  # vLLM's cores refuse this GPU: the family problem says so, no core is tried
        assert facts["attention"] == [], body
        assert body["problems"][0].startswith("GPU 0 is "), body
