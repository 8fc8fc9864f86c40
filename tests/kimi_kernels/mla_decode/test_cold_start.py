"""benchmarks/vllm_compile_cost.py without compiling: the batches and the SplitK GEMM compile keys
it derives from vLLM 0.33.0's own tables, and its table."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.support.repo import load_script

SCRIPT = Path("benchmarks/vllm_compile_cost.py")


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script(SCRIPT)


def test_batches_add_whole_verify_requests(script: ModuleType) -> None:
    assert script.batches(1) == (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64)
    assert script.batches(8) == (1, 2, 3, 4, 5, 6, 7, 8, 16, 24, 32, 40, 48, 56, 64)


@pytest.mark.parametrize(("tp", "count"), [(8, 19), (16, 20)])
def test_splitk_keys_per_worker(script: ModuleType, tp: int, count: int) -> None:
    keys = script.splitk_keys(tp, 1)
    assert len(keys) == count
    assert script.splitk_keys(tp, 8) == keys  # verify batches reuse the bins' tactics
    assert {dtype for _, dtype in keys} == {"bf16", "f32"}  # f32: the shared-expert gate/up
    assert all(len(tactic) == 4 for tactic, _ in keys)


def test_table_renders(script: ModuleType) -> None:
    compiles = [
        {"site": "splitk_gemm", "key": [[64, 8, 4, 8], "bf16"], "cpu_s": 0.5, "wall_s": 2.0},
        {"site": "splitk_gemm", "key": [[64, 16, 2, 8], "bf16"], "cpu_s": 0.3, "wall_s": 1.0},
    ]
    configs = {
        "tp8": {"batches": [1, 2], "splitk_gemm_compiles": 2, "counted_cpu_s": 0.8,
                "counted_wall_s": 3.0},
    }  # fmt: skip
    text = script.table({"compiles": compiles, "configs": configs})
    assert "splitk_gemm               2           0.50         0.8      3.0" in text
    assert "tp8                    2               2     0.8     3.0" in text
