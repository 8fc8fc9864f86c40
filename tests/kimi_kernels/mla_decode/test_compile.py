"""Compile-only matrix: every dispatch configuration x {sm_90a, sm_100a, sm_103a}, no GPU needed.

Each kernel is compiled from fake tensors, its cubin inspected with cuobjdump: no local memory,
no spill instructions, no stack, the instruction classes the design relies on are present.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from kimi_kernels.mla_decode.config import ARCHS, DISPATCH_CONFIGS
from kimi_kernels.mla_decode.interface import compile_split
from kimi_kernels.mla_decode.matrix import MatrixEntry, compile_matrix, format_entry

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> list[MatrixEntry]:
    return compile_matrix(ARCHS, str(tmp_path_factory.mktemp("mla-cubins")))


def test_every_config_and_arch_compiled(
    matrix: list[MatrixEntry], record_property: Callable[[str, object], None]
) -> None:
    got = {(e.kernel, e.config, e.arch) for e in matrix}
    want = {("split", c, a) for c in DISPATCH_CONFIGS for a in ARCHS} | {
        ("combine", None, a) for a in ARCHS
    }
    assert got == want
    record_property(
        "mla_compile_matrix",
        json.dumps([format_entry(e) for e in matrix]),
    )
    print("\n" + "\n".join(format_entry(e) for e in matrix))


def test_no_spills_no_local_memory(matrix: list[MatrixEntry]) -> None:
    bad = [
        format_entry(e)
        for e in matrix
        if e.report.local or e.report.stack or e.report.spill_instructions
    ]
    assert not bad, "local memory / spills:\n" + "\n".join(bad)


def test_registers_fit_the_occupancy_the_heuristic_assumes(matrix: list[MatrixEntry]) -> None:
    # the split heuristic counts config.ctas_per_sm resident CTAs (from shared memory): their
    # registers must fit an SM's 64K as well
    for e in matrix:
        threads = 128 if e.config is None else e.config.num_warps * 32
        ctas = 1 if e.config is None else e.config.ctas_per_sm
        assert 0 < e.report.registers <= 255, format_entry(e)
        assert e.report.registers * threads * ctas <= 65536, format_entry(e)


def test_split_kernels_have_the_intended_instruction_classes(matrix: list[MatrixEntry]) -> None:
    for e in matrix:
        if e.config is None:
            continue
        r = e.report
        assert r.count("FFMA") >= 64, format_entry(e)  # q.k and p.v on CUDA cores
        assert r.count("MUFU.EX2") > 0, format_entry(e)  # online softmax
        assert r.count("SHFL.BFLY") > 0, format_entry(e)  # warp max/sum reductions
        assert r.count("SHFL.IDX") > 0, format_entry(e)  # probability broadcast for p.v
        assert r.count("LDS") > 0, format_entry(e)  # staged tile reads
        assert r.count("STS") > 0, format_entry(e)  # staged tile writes
        assert r.count("BAR.SYNC") > 0, format_entry(e)
        fp8_converts = r.count("F2FP.F16.E4M3")  # in-kernel FP8 e4m3 dequantization
        if e.config.kv_dtype == "fp8_e4m3":
            assert fp8_converts > 0, format_entry(e)
        else:
            assert fp8_converts == 0, format_entry(e)


def test_combine_kernel_instruction_classes(matrix: list[MatrixEntry]) -> None:
    for e in matrix:
        if e.config is None:
            assert e.report.count("MUFU.EX2") > 0, format_entry(e)
            assert e.report.count("F2FP.BF16") > 0, format_entry(e)  # bf16 output


def test_compile_cache_returns_the_same_kernel() -> None:
    config, arch = DISPATCH_CONFIGS[0], ARCHS[0]
    first = compile_split(config, arch)
    assert compile_split(config, arch) is first
    assert compile_split(DISPATCH_CONFIGS[1], arch) is not first
