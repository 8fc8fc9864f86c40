"""The split kernel's index helpers (``split_range``, ``causal_limit``, ``local_count``) executed on
the CPU through
host-side ``@cute.jit`` drivers: the DSL code the kernel inlines, run against its Python twins."""

from __future__ import annotations

import cutlass
import pytest
import torch
from cutlass import Int32, cute
from cutlass.cute.runtime import from_dlpack

from kimi_kernels.mla_decode.config import local_count as host_local_count
from kimi_kernels.mla_decode.config import split_bounds
from kimi_kernels.mla_decode.kernel import causal_limit, local_count, split_range
from kimi_kernels.mla_decode.reference import global_positions


@cute.jit
def _all_split_ranges(out: cute.Tensor, seq_len: Int32, num_splits: Int32) -> None:
    for s in cutlass.range(num_splits):
        start, end = split_range(seq_len, num_splits, s)
        out[s, 0] = start
        out[s, 1] = end


@cute.jit
def _all_limits(  # noqa: PLR0917 (the kernel helper's arguments)
    out: cute.Tensor,
    total: Int32,
    q_len: Int32,
    heads: Int32,
    world: Int32,
    rank: Int32,
    interleave: Int32,
) -> None:
    for row in cutlass.range(q_len * heads):
        out[row] = causal_limit(total, q_len, heads, row, world, rank, interleave)


@cute.jit
def _all_counts(out: cute.Tensor, world: Int32, rank: Int32, interleave: Int32) -> None:
    for n in cutlass.range(out.shape[0]):
        out[n] = local_count(n, world, rank, interleave)


@pytest.mark.parametrize("num_splits", [1, 2, 3, 7, 64, 129])
@pytest.mark.parametrize("seq_len", [1, 31, 32, 33, 63, 64, 65, 1000, 8192, 131072])
def test_split_range_runs_on_the_host_and_matches_split_bounds(
    seq_len: int, num_splits: int
) -> None:
    out = torch.full((num_splits, 2), -7, dtype=torch.int32)
    _all_split_ranges(from_dlpack(out), Int32(seq_len), Int32(num_splits))
    want = [split_bounds(seq_len, num_splits, s) for s in range(num_splits)]
    assert [tuple(r) for r in out.tolist()] == want


@pytest.mark.parametrize(("q_len", "heads"), [(1, 6), (8, 12), (3, 96)])
def test_causal_limit_runs_on_the_host(q_len: int, heads: int) -> None:
    seq_len = 100
    out = torch.full((q_len * heads,), -7, dtype=torch.int32)
    _all_limits(from_dlpack(out), *(Int32(x) for x in (seq_len, q_len, heads, 1, 0, 1)))
    want = [seq_len - q_len + row // heads for row in range(q_len * heads)]
    assert out.tolist() == want
    assert out.tolist()[-1] == seq_len - 1  # the last draft token sees the whole context


@pytest.mark.parametrize(("world", "interleave"), [(1, 1), (4, 1), (2, 64), (8, 16), (16, 64)])
def test_local_count_runs_on_the_host_and_counts_the_rank_positions(
    world: int, interleave: int
) -> None:
    """The kernel's local_count, its Python twin and a brute-force count over the global
    positions of each rank's shard agree for every global length up to 3 interleave cycles."""
    span = 3 * world * interleave + 5
    for rank in range(world):
        out = torch.full((span,), -7, dtype=torch.int32)
        _all_counts(from_dlpack(out), Int32(world), Int32(rank), Int32(interleave))
        held = global_positions(span, (world, rank, interleave), torch.device("cpu"))
        brute = [int((held < n).sum()) for n in range(span)]
        assert out.tolist() == brute
        assert [host_local_count(n, world, rank, interleave) for n in range(span)] == brute


def test_causal_limit_under_dcp_is_the_last_local_position_globally_visible() -> None:
    total, q_len, heads, world, interleave = 200, 4, 2, 4, 8
    for rank in range(world):
        out = torch.full((q_len * heads,), -7, dtype=torch.int32)
        args = (total, q_len, heads, world, rank, interleave)
        _all_limits(from_dlpack(out), *(Int32(x) for x in args))
        pos = global_positions(total, (world, rank, interleave), torch.device("cpu"))
        for row, limit in enumerate(out.tolist()):
            visible = pos <= total - q_len + row // heads
            assert limit == int(visible.sum()) - 1
