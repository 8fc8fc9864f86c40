"""mla_decode on a GPU against the torch reference (skipped without an NVIDIA GPU).

The full sweep and the timings are ``benchmarks/mla_decode_gpu.py``; this is the quick check.
"""

from __future__ import annotations

import math

import pytest
import torch

from kimi_kernels.mla_decode import mla_decode, mla_decode_reference
from kimi_kernels.mla_decode.check import make_inputs, needle_positions, plant_needles, verdict
from kimi_kernels.mla_decode.config import workspace_floats

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]
SCALE = 1.0 / math.sqrt(192.0)


def _poison_allocator() -> None:
    """Fill freed memory with NaN (small and large pools) so that torch.empty in mla_decode hands
    back poisoned buffers."""
    small = [torch.full((1 << 18,), float("nan"), device="cuda") for _ in range(32)]
    large = torch.full((64 << 20,), float("nan"), device="cuda")
    del small, large


@pytest.mark.parametrize("kv_dtype", [torch.float8_e4m3fn, torch.bfloat16])
@pytest.mark.parametrize(
    ("heads", "q_len", "seq_lens", "num_splits"),
    [
        (6, 1, [1], None),
        (12, 8, [63, 64, 65], None),
        (96, 8, [1000], 5),
        (6, 4, [8192, 17], 16),
    ],
)
def test_matches_reference(
    kv_dtype: torch.dtype, heads: int, q_len: int, seq_lens: list[int], num_splits: int
) -> None:
    gen = torch.Generator().manual_seed(sum(seq_lens) + heads)
    q, kv, table, lens = make_inputs(
        gen, heads, q_len, seq_lens, kv_dtype, spare_blocks=5, q_scale=2.0
    )
    for b, n in enumerate(seq_lens):
        pairs = needle_positions(n, q_len, num_splits or 4)
        plant_needles(gen, q, kv, table, b, pairs, (SCALE, 0.5))
    q, kv, table, lens = (t.cuda() for t in (q, kv, table, lens))
    _poison_allocator()
    splits = num_splits or 4
    workspace = torch.empty(workspace_floats(len(seq_lens), heads * q_len, splits), device="cuda")
    out, lse = mla_decode(q, kv, table, lens, SCALE, 0.5, num_splits=splits, workspace=workspace)
    torch.cuda.synchronize()
    ref_out, ref_lse = mla_decode_reference(q, kv, table, lens, SCALE, 0.5)
    assert out.dtype == torch.bfloat16
    assert lse.dtype == torch.float32
    result = verdict(out, lse, ref_out, ref_lse)
    assert result["ok"], result


def test_lengths_past_the_block_table_are_refused() -> None:
    gen = torch.Generator().manual_seed(9)
    q, kv, table, lens = (t.cuda() for t in make_inputs(gen, 6, 1, [100], torch.float8_e4m3fn))
    with pytest.raises(ValueError, match="seq_lens\\[0\\] = 200 must be in"):
        mla_decode(q, kv, table, lens + 100, SCALE)


def test_masked_nan_cache_rows_stay_out_of_rows_that_cannot_see_them() -> None:
    gen = torch.Generator().manual_seed(10)
    q, kv, table, lens = (t.cuda() for t in make_inputs(gen, 6, 4, [100], torch.float8_e4m3fn))
    kv[int(table[0, 1]), 99 - 64] = float("nan")  # position 99: only the last token sees it
    out, lse = mla_decode(q, kv, table, lens, SCALE, num_splits=2)
    ref_out, ref_lse = mla_decode_reference(q, kv, table, lens, SCALE)
    assert verdict(out[:, :3], lse[:, :3], ref_out[:, :3], ref_lse[:, :3])["ok"]
