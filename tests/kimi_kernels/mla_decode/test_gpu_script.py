"""The prepared GPU check script (benchmarks/mla_decode_gpu.py), exercised without a GPU: its case
list covers every shape, each phase runs in its own process and a failing or missing phase fails
the one verdict, its table renders, and without a GPU it stops with one clear line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from kimi_kernels.mla_decode.config import SUPPORTED_HEADS, choose_config, choose_num_splits
from tests.support.repo import load_script

SCRIPT = Path("benchmarks/mla_decode_gpu.py")


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script(SCRIPT)


def test_correctness_cases_cover_every_shape(script: ModuleType) -> None:
    cases = script.correctness_cases()
    fp8 = {(h, q, lens[0]) for h, q, lens, kv, splits in cases if kv == "fp8_e4m3"}
    want = {
        (h, q, s)
        for h in SUPPORTED_HEADS
        for q in range(1, 9)
        for s in (1, 63, 64, 65, 1000, 8192, 131072)
        if q <= s
    }
    assert want <= fp8
    assert any(kv == "bf16" for _, _, _, kv, _ in cases)
    assert {splits for *_, splits in cases} >= {None, 1, 128}
    for _, q_len, lens, _, _ in cases:
        assert all(q_len <= n for n in lens)


def test_phase_shares_fit_the_budget(script: ModuleType) -> None:
    assert set(script.PHASES) == {"env", "correctness", "floors", "timing", "splits"}
    assert sum(script.PHASES.values()) == pytest.approx(1.0)


def test_a_phase_runs_in_its_own_process(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The env phase on this machine (no GPU): the child's error comes back as the phase's error,
    the parent goes on, and no result file means no result."""
    monkeypatch.setattr(script, "OUT_DIR", tmp_path)
    monkeypatch.setenv("OUT", str(tmp_path))
    got = script.spawn("env", 30.0)
    if torch.cuda.is_available():
        assert got["result"]["gpu"]
    else:
        assert "result" not in got
        assert got["rc"] != 0
        assert "Error" in got["error"]


def test_verdict_needs_every_phase_and_every_check(script: ModuleType) -> None:
    ok = {"result": {"passed": 3, "failed": 0, "cases": []}}
    phases = {"env": {"result": {}}, "correctness": ok, "floors": {"result": {}}}
    assert script.overall(phases)["ok"]
    assert not script.overall({**phases, "floors": {"error": "x", "rc": 1}})["ok"]
    bad = {"result": {"passed": 3, "failed": 1, "cases": []}}
    assert not script.overall({**phases, "correctness": bad})["ok"]


def test_table_renders_a_result(script: ModuleType) -> None:
    timing = {
        "heads": 12, "q_len": 8, "batch": 1, "s_k": 131072, "splits": 44, "us": 250.0,
        "moved_gbps": 300.0, "tflops": 9.0, "floor_us": 20.0, "x_floor": 12.5,
    }  # fmt: skip
    phases = {
        "correctness": {"result": {"passed": 3, "failed": 1, "cases": [{"ok": False}]}},
        "floors": {"result": {"gpu": "NVIDIA H200", "copy_gbps": 4e3, "matmul_bf16_tflops": 700}},
        "timing": {"result": {"shapes": [timing, {"shape": [96], "error": "T\nRuntimeError: x"}]}},
        "splits": {"result": {"h12_q8_b1_s32768": {"1": 100.0, "2": "Traceback"}}},
        "env": {"rc": 1, "error": "Traceback\nImportError: y"},
    }  # fmt: skip
    result = {"phases": phases, "verdict": script.overall(phases)}
    text = script.table(result)
    assert text.startswith("verdict: FAIL (correctness 3 passed, 1 failed")
    assert "FAIL {" in text
    assert "floors (NVIDIA H200): copy 4000 GB/s" in text
    assert " 12  8  1  131072     44     250.0" in text
    assert "[96]: ERROR RuntimeError: x" in text
    assert "env: rc 1: ['ImportError: y']" in text
    assert "1:100 2:ERR" in text
    json.dumps(result)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_stops_cleanly(
    script: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setattr(sys, "argv", ["mla_decode_gpu.py"])
    monkeypatch.setattr(script, "OUT_DIR", tmp_path)
    assert script.main() == 2
    assert capsys.readouterr().err == "mla_decode_gpu: no NVIDIA GPU found\n"


@pytest.fixture
def launched_splits() -> list[int]:
    """The split count of each launch of the kernel (the fake of `on_the_cpu`)."""
    return []


@pytest.fixture
def on_the_cpu(
    script: ModuleType, monkeypatch: pytest.MonkeyPatch, launched_splits: list[int]
) -> ModuleType:
    """The correctness checks' glue on the CPU: inputs on "cpu", mla_decode replaced by the
    kernels' schedule twin (with the host-side length check mla_decode runs)."""
    import types  # noqa: PLC0415

    import kimi_kernels.mla_decode as package  # noqa: PLC0415
    from kimi_kernels.mla_decode.reference import check_block_table  # noqa: PLC0415
    from tests.kimi_kernels.mla_decode.schedule_twin import twin_decode  # noqa: PLC0415

    def fake_mla_decode(  # noqa: PLR0917
        q: torch.Tensor,
        kv: torch.Tensor,
        table: torch.Tensor,
        lens: torch.Tensor,
        scale: float,
        kv_scale: float = 1.0,
        **options: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        totals = options.get("totals")
        check_block_table(q.shape[1], kv.shape[0], table, lens, totals)
        splits = options.get("num_splits") or 3
        launched_splits.append(splits)
        dcp = options.get("dcp", (1, 0, 1))
        out, lse = twin_decode(
            q, kv, table, lens, scale, kv_scale, num_splits=splits, totals=totals, dcp=dcp
        )
        return out.to(torch.bfloat16), lse

    monkeypatch.setattr(script, "DEVICE", "cpu")
    monkeypatch.setattr(script, "poison", lambda: None)
    monkeypatch.setattr(package, "mla_decode", fake_mla_decode, raising=False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    props = types.SimpleNamespace(multi_processor_count=132)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _device: props)
    return script


@pytest.mark.parametrize(
    "case",
    [
        (6, 2, [1000, 70, 2], "fp8_e4m3", None),
        (12, 8, [300], "bf16", None),
        (6, 3, [65], "fp8_e4m3", 7),
    ],
)
def test_correctness_checks_pass_a_correct_schedule(
    on_the_cpu: ModuleType,
    launched_splits: list[int],
    case: tuple[int, int, list[int], str, int | None],
) -> None:
    heads, q_len, lens, kv, forced = case
    result = on_the_cpu.check_case(torch.Generator().manual_seed(1), case)
    assert result["ok"], result
    assert result["heads"] == heads
    # The split count reported is the one launched: the forced one, else the config's choice for
    # the fake device's 132 SMs.
    rows = heads * q_len
    chosen = choose_num_splits(len(lens), rows, max(lens), choose_config(kv, rows), 132)
    assert launched_splits == [forced or chosen]
    assert result["splits"] == (forced or chosen)


def test_the_extra_checks_pass_a_correct_schedule(on_the_cpu: ModuleType) -> None:
    gen = torch.Generator().manual_seed(2)
    for check in (on_the_cpu.check_masked_nan, on_the_cpu.check_dcp, on_the_cpu.check_refusal):
        result = check(gen)
        assert result["ok"], result
