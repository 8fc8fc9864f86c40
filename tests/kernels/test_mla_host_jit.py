"""The split kernel's index helpers (``split_range``, ``causal_limit``) executed on the CPU through
host-side ``@cute.jit`` drivers: the DSL code the kernel inlines, run against its Python twins."""

from __future__ import annotations

import cutlass
import pytest
import torch
from cutlass import Int32, cute
from cutlass.cute.runtime import from_dlpack

from kimi_kernels.mla_decode.config import split_bounds
from kimi_kernels.mla_decode.kernel import causal_limit, split_range


@cute.jit
def _all_split_ranges(out: cute.Tensor, seq_len: Int32, num_splits: Int32) -> None:
    for s in cutlass.range(num_splits):
        start, end = split_range(seq_len, num_splits, s)
        out[s, 0] = start
        out[s, 1] = end


@cute.jit
def _all_limits(out: cute.Tensor, seq_len: Int32, q_len: Int32, heads: Int32) -> None:
    for row in cutlass.range(q_len * heads):
        out[row] = causal_limit(seq_len, q_len, heads, row)


@pytest.mark.parametrize("num_splits", [1, 2, 3, 7, 64, 129])
@pytest.mark.parametrize("seq_len", [1, 31, 32, 33, 63, 64, 65, 1000, 8192, 131072])
def test_split_range_runs_on_the_host_and_matches_split_bounds(seq_len, num_splits):
    out = torch.full((num_splits, 2), -7, dtype=torch.int32)
    _all_split_ranges(from_dlpack(out), Int32(seq_len), Int32(num_splits))
    want = [split_bounds(seq_len, num_splits, s) for s in range(num_splits)]
    assert [tuple(r) for r in out.tolist()] == want


@pytest.mark.parametrize(("q_len", "heads"), [(1, 6), (8, 12), (3, 96)])
def test_causal_limit_runs_on_the_host(q_len, heads):
    seq_len = 100
    out = torch.full((q_len * heads,), -7, dtype=torch.int32)
    _all_limits(from_dlpack(out), Int32(seq_len), Int32(q_len), Int32(heads))
    want = [seq_len - q_len + row // heads for row in range(q_len * heads)]
    assert out.tolist() == want
    assert out.tolist()[-1] == seq_len - 1  # the last draft token sees the whole context
