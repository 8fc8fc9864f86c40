"""Host-side helpers of the MLA decode kernel: dispatch, split heuristic, input checks."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import pytest
import torch

from kimi_kernels.mla_decode.config import (
    DISPATCH_CONFIGS,
    MAX_SPLITS,
    MAX_WORKSPACE_BYTES,
    MIN_TILES_PER_SPLIT,
    SUPPORTED_HEADS,
    TILE_N,
    V_DIM,
    SplitConfig,
    choose_config,
    choose_num_splits,
    row_groups,
    workspace_floats,
)
from kimi_kernels.mla_decode.interface import (
    check_inputs,
    combine_fakes,
    device_arch,
    partition_workspace,
    split_fakes,
    to_cute,
)
from kimi_kernels.mla_decode.kernel import MLADecodeCombine, MLADecodeSplitKV


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "bf16"])
@pytest.mark.parametrize("heads", SUPPORTED_HEADS)
@pytest.mark.parametrize("q_len", range(1, 9))
def test_every_shape_dispatches_to_a_compiled_config(kv_dtype: str, heads: int, q_len: int) -> None:
    config = choose_config(kv_dtype, heads * q_len)
    assert config in DISPATCH_CONFIGS
    assert config.kv_dtype == kv_dtype
    # the smallest tile that holds the rows, or the largest tile
    smaller = [c for c in DISPATCH_CONFIGS if c.kv_dtype == kv_dtype and c < config]
    assert all(c.rows_per_cta < heads * q_len for c in smaller)
    MLADecodeSplitKV.can_implement(config)


def test_dispatch_configs_are_exactly_what_choose_config_returns() -> None:
    reachable = {
        choose_config(k, rows) for k in ("fp8_e4m3", "bf16") for rows in range(1, 8 * 96 + 1)
    }
    assert reachable == set(DISPATCH_CONFIGS)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("fp16", 6), "kv cache dtype 'fp16' is not supported"),
        (("fp8_e4m3", 0), "rows must be >= 1"),
    ],
)
def test_choose_config_errors(args: tuple[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        choose_config(*args)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (SplitConfig("fp16", 4, 4), "kv_dtype 'fp16' is not supported"),
        (SplitConfig("bf16", 3, 4), "num_warps must be 2, 4 or 8, got 3"),
        (SplitConfig("bf16", 4, 3), "rows_per_warp must be 1, 2 or 4, got 3"),
    ],
)
def test_can_implement_errors(config: SplitConfig, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MLADecodeSplitKV.can_implement(config)
    with pytest.raises(ValueError, match="num_splits must be >= 1"):
        MLADecodeCombine.can_implement(0)


@pytest.mark.parametrize("num_sms", [132, 148])
@pytest.mark.parametrize("batch", [1, 2, 8])
@pytest.mark.parametrize("heads", SUPPORTED_HEADS)
@pytest.mark.parametrize("q_len", [1, 8])
@pytest.mark.parametrize("seq_len", [1, 63, 1000, 8192, 131072])
def test_split_heuristic_bounds(
    num_sms: int, batch: int, heads: int, q_len: int, seq_len: int
) -> None:
    rows = heads * q_len
    config = choose_config("fp8_e4m3", rows)
    splits = choose_num_splits(batch, rows, seq_len, config, num_sms)
    assert 1 <= splits <= MAX_SPLITS
    # never more splits than the context has groups of MIN_TILES_PER_SPLIT tiles
    assert splits <= max(1, -(-seq_len // TILE_N) // MIN_TILES_PER_SPLIT)
    assert batch * splits * rows * V_DIM * 4 <= max(MAX_WORKSPACE_BYTES, batch * rows * V_DIM * 4)
    # long contexts fill at least one wave of SMs (or hit a cap)
    ctas = batch * row_groups(rows, config) * splits
    if seq_len >= 131072 and splits < MAX_SPLITS:
        assert ctas >= num_sms


def _launch_cost(ctas: int, splits: int, wave: int) -> float:
    """Whole waves x work per CTA (a partly filled last wave lasts as long as a full one)."""
    return math.ceil(ctas * splits / wave) / splits


@pytest.mark.parametrize("num_sms", [132, 148, 160])
@pytest.mark.parametrize("batch", [1, 2, 3, 8])
@pytest.mark.parametrize("heads", SUPPORTED_HEADS)
@pytest.mark.parametrize("q_len", [1, 2, 8])
def test_split_heuristic_takes_no_costlier_tail_wave(
    num_sms: int, batch: int, heads: int, q_len: int
) -> None:
    """No split count within the caps gives a shorter launch than the chosen one."""
    rows = heads * q_len
    config = choose_config("fp8_e4m3", rows)
    splits = choose_num_splits(batch, rows, 131072, config, num_sms)
    ctas, wave = batch * row_groups(rows, config), num_sms * config.ctas_per_sm
    cap = min(MAX_SPLITS, MAX_WORKSPACE_BYTES // (batch * rows * V_DIM * 4))
    best = min(_launch_cost(ctas, s, wave) for s in range(1, max(1, cap) + 1))
    assert _launch_cost(ctas, splits, wave) == pytest.approx(best)


def test_split_heuristic_examples() -> None:
    """Pinned values: a change to the heuristic shows up here (and needs a NOTES.md entry)."""
    fp8_6x8 = choose_config("fp8_e4m3", 48)
    assert choose_num_splits(1, 48, 131072, fp8_6x8, 132) == 88
    assert choose_num_splits(8, 48, 131072, fp8_6x8, 132) == 11
    assert choose_num_splits(1, 48, 1000, fp8_6x8, 132) == 8
    assert choose_num_splits(1, 48, 64, fp8_6x8, 132) == 1
    # 96 heads x 8 tokens: 48 row groups on 132 SMs x 2 -> 11 splits (528 CTAs, two full waves,
    # 2/11 of the unsplit time); the former rounding up took 6 (288 CTAs: a 24-CTA tail wave,
    # 2/6, 1.8x as long)
    fp8_96x8 = choose_config("fp8_e4m3", 768)
    assert choose_num_splits(1, 768, 131072, fp8_96x8, 132) == 11


def test_workspace_views_are_disjoint_and_sized() -> None:
    batch, rows, splits = 2, 48, 5
    need = workspace_floats(batch, rows, splits)
    ws = torch.zeros(need + 100)
    o_part, lse_part = partition_workspace(ws, batch, rows, splits)
    assert o_part.shape == (batch, splits, rows, V_DIM)
    assert lse_part.shape == (batch, splits, rows)
    o_part.fill_(1.0)
    lse_part.fill_(2.0)
    assert int((ws == 1.0).sum()) + int((ws == 2.0).sum()) == need  # disjoint, nothing else
    assert o_part.data_ptr() % 16 == 0
    assert lse_part.data_ptr() % 16 == 0


@pytest.mark.parametrize(
    ("workspace", "message"),
    [
        (torch.zeros(100), "workspace has 100 floats; batch 1 x 2 splits x 6 rows needs 6156"),
        (
            torch.zeros(7000, dtype=torch.float64),
            "contiguous 1-D float32 tensor, got torch.float64",
        ),
        (torch.zeros(2, 7000), "contiguous 1-D float32"),
        (torch.zeros(7001)[1:], "16-byte boundary"),
    ],
)
def test_workspace_errors(workspace: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        partition_workspace(workspace, 1, 6, 2)


def test_split_heuristic_errors() -> None:
    config = DISPATCH_CONFIGS[0]
    with pytest.raises(ValueError, match="must be >= 1"):
        choose_num_splits(0, 6, 100, config, 132)
    with pytest.raises(ValueError, match="max_seq_len must be >= 1"):
        choose_num_splits(1, 6, 0, config, 132)


def _inputs(**over: torch.Tensor) -> dict[str, torch.Tensor]:
    t = {
        "q": torch.zeros(2, 8, 6, 576, dtype=torch.bfloat16),
        "kv_cache": torch.zeros(4, 64, 576, dtype=torch.float8_e4m3fn),
        "block_table": torch.zeros(2, 3, dtype=torch.int32),
        "seq_lens": torch.zeros(2, dtype=torch.int32),
    }
    t.update(over)
    return t


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"q": torch.zeros(2, 8, 6, 512, dtype=torch.bfloat16)}, "q must be \\[batch, q_len"),
        ({"q": torch.zeros(2, 8, 6, 576)}, "q must be bfloat16, got torch.float32"),
        ({"q": torch.zeros(2, 9, 6, 576, dtype=torch.bfloat16)}, "q_len must be 1..8"),
        ({"kv_cache": torch.zeros(4, 32, 576)}, "kv_cache must be \\[num_blocks, 64, 576\\]"),
        ({"kv_cache": torch.zeros(4, 64, 576)}, "kv_cache must be float8_e4m3fn or bfloat16"),
        ({"block_table": torch.zeros(3, 3, dtype=torch.int32)}, "block_table must be \\[2,"),
        ({"block_table": torch.zeros(2, 3)}, "block_table must be int32"),
        ({"seq_lens": torch.zeros(3, dtype=torch.int32)}, "seq_lens must be \\[2\\]"),
        ({"seq_lens": torch.zeros(2, dtype=torch.int64)}, "seq_lens must be int32"),
        (
            {"q": torch.zeros(2, 8, 576, 6, dtype=torch.bfloat16).transpose(2, 3)},
            "q must have a contiguous last dimension",
        ),
        ({}, "all tensors must be on one CUDA device, got \\['cpu'\\]"),
    ],
)
def test_check_inputs_errors(over: dict[str, torch.Tensor], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_inputs(**_inputs(**over))


def test_device_arch_rejects_other_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _device: (8, 0))
    with pytest.raises(RuntimeError, match=r"compute capability 8\.0"):
        device_arch(torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _device: (10, 3))
    assert device_arch(torch.device("cuda", 0)) == "sm_103a"


def _type_strings(tensors: Iterable[Any]) -> list[str]:
    from cutlass._mlir import ir  # noqa: PLC0415

    with ir.Context(), ir.Location.unknown():
        return [str(t.mlir_type) for t in tensors]


@pytest.mark.parametrize("config", DISPATCH_CONFIGS)
def test_runtime_tensors_have_the_types_the_kernels_were_compiled_for(config: SplitConfig) -> None:
    """What mla_decode passes at run time (to_cute of torch tensors) has exactly the MLIR types of
    the fake tensors the kernels are compiled from, except the memory space: DLPack says
    "generic" for these CPU tensors where a CUDA tensor says "gmem"."""
    kv_dtype = torch.float8_e4m3fn if config.kv_dtype == "fp8_e4m3" else torch.bfloat16
    split_args = [
        torch.zeros(2, 8, 6, 576, dtype=torch.bfloat16),
        torch.zeros(5, 64, 576, dtype=kv_dtype),
        torch.zeros(2, 3, dtype=torch.int32),
        torch.zeros(2, dtype=torch.int32),
        torch.zeros(2, dtype=torch.int32),
        torch.zeros(2, 4, 48, 512),
        torch.zeros(2, 4, 48),
    ]
    combine_args = [*split_args[5:], torch.zeros(2, 8, 6, 512, dtype=torch.bfloat16)]
    combine_args.append(torch.zeros(2, 8, 6))
    for real, fake in ((split_args, split_fakes(config)), (combine_args, combine_fakes())):
        got = [s.replace("generic", "gmem") for s in _type_strings(map(to_cute, real))]
        assert "generic" in _type_strings([to_cute(real[0])])[0]
        assert got == _type_strings(fake)


def test_check_inputs_rejects_misaligned_tensors() -> None:
    t = _inputs()
    t["seq_lens"] = torch.zeros(3, dtype=torch.int32)[1:]
    with pytest.raises(ValueError, match="seq_lens must start on a 16-byte boundary"):
        check_inputs(**t)
