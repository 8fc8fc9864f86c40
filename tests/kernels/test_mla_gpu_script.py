"""The prepared GPU check script (benchmarks/mla_decode_gpu.py), exercised without a GPU: its case
list covers what issue 6 asks for, its DSL code compiles, its table renders, and without a GPU it
stops with one clear line."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from cutlass import cute

from kimi_kernels.mla_decode.config import SUPPORTED_HEADS

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "mla_decode_gpu.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("mla_decode_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_correctness_cases_cover_every_shape(script):
    cases = script.correctness_cases()
    fp8 = {(h, q, lens[0]) for h, q, lens, kv, splits in cases if kv == torch.float8_e4m3fn}
    want = {
        (h, q, s)
        for h in SUPPORTED_HEADS
        for q in range(1, 9)
        for s in (1, 63, 64, 65, 1000, 8192, 131072)
        if q <= s
    }
    assert want <= fp8
    assert any(kv == torch.bfloat16 for _, _, _, kv, _ in cases)
    assert {splits for *_, splits in cases} >= {None, 1, 128}
    for _, q_len, lens, _, _ in cases:
        assert all(q_len <= n for n in lens)


def test_empty_pair_compiles(script):
    pair = script.EmptyPair([4, 3, 2], [48, 2, 1])
    cute.compile(pair, cute.runtime.make_fake_stream(), options="--gpu-arch sm_90a")


def test_table_renders_a_result(script, monkeypatch):
    timing = {
        "heads": 12, "q_len": 8, "batch": 1, "s_k": 131072, "num_splits": 44, "us": 250.0,
        "gbps": 300.0, "tflops": 9.0, "floor_us": 20.0, "x_floor": 12.5,
        "x_empty_pair": 30.0, "speedup_vs_reference": 40.0,
    }  # fmt: skip
    monkeypatch.setattr(
        script,
        "RESULT",
        {
            "correctness": {"passed": 3, "failed": 1, "cases": [{"ok": False, "heads": 6}]},
            "floors": {"copy_gbps": 4000.0, "matmul_bf16_tflops": 700.0},
            "timing": [timing, {"heads": 96, "s_k": 8192, "error": "Traceback\nRuntimeError: x"}],
            "split_sweep": {"h12_q8_b1_s32768": {1: 100.0, 2: "Traceback"}},
        },
    )
    text = script.table()
    assert "correctness: 3 passed, 1 failed" in text
    assert "FAIL" in text
    assert " 12  8  1  131072     44     250.0" in text
    assert "96 s_k 8192: ERROR RuntimeError: x" in text
    assert "1:100 2:ERR" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_stops_cleanly(script, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["mla_decode_gpu.py"])
    assert script.main() == 2
    assert capsys.readouterr().err == "mla_decode_gpu: no NVIDIA GPU found\n"
