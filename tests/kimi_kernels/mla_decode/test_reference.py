"""The torch reference against a naive float64 per-head softmax, and the split/combine math."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from kimi_kernels.mla_decode import merge_partials, mla_decode_reference
from kimi_kernels.mla_decode.check import make_inputs
from kimi_kernels.mla_decode.config import PAGE_SIZE, TILE_N, split_bounds
from kimi_kernels.mla_decode.reference import gather_kv

SCALE = 1.0 / math.sqrt(192.0)  # Kimi K3's softmax scale is 1/sqrt(qk_nope + rope) = 1/sqrt(192)


def naive(
    inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    scale: float,
    kv_scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """float64, one (request, token, head) at a time, straight from the definition."""
    q, kv_cache, block_table, seq_lens = inputs
    batch, q_len, heads, _ = q.shape
    out = torch.zeros(batch, q_len, heads, 512, dtype=torch.float64)
    lse = torch.zeros(batch, q_len, heads, dtype=torch.float64)
    cache = kv_cache.to(torch.float64) * kv_scale
    for b in range(batch):
        n = int(seq_lens[b])
        rows = torch.stack(
            [cache[int(block_table[b, p // PAGE_SIZE]), p % PAGE_SIZE] for p in range(n)]
        )
        for j in range(q_len):
            visible = rows[: n - q_len + j + 1]
            for h in range(heads):
                s = (visible @ q[b, j, h].to(torch.float64)) * scale
                m = s.max()
                e = torch.exp(s - m)
                lse[b, j, h] = m + torch.log(e.sum())
                out[b, j, h] = (e / e.sum()) @ visible[:, :512]
    return out, lse


@pytest.mark.parametrize(
    ("kv_dtype", "heads", "q_len", "seq_lens", "kv_scale"),
    [
        (torch.float8_e4m3fn, 6, 1, [1, 63], 0.5),
        (torch.float8_e4m3fn, 12, 8, [8, 64, 65], 1.7),
        (torch.float8_e4m3fn, 6, 4, [200, 129], 1.0),
        (torch.bfloat16, 12, 2, [130, 2], 1.0),
        (torch.float32, 6, 3, [70], 0.25),
    ],
)
def test_reference_matches_naive_float64(
    kv_dtype: torch.dtype, heads: int, q_len: int, seq_lens: list[int], kv_scale: float
) -> None:
    gen = torch.Generator().manual_seed(hash((heads, q_len, *seq_lens)) % 2**31)
    inp = make_inputs(gen, heads, q_len, seq_lens, kv_dtype, q_dtype=torch.float32)
    out, lse = mla_decode_reference(*inp, SCALE, kv_scale)
    want_out, want_lse = naive(inp, SCALE, kv_scale)
    assert out.dtype == torch.float32
    assert out.shape == (len(seq_lens), q_len, heads, 512)
    assert lse.shape == (len(seq_lens), q_len, heads)
    torch.testing.assert_close(out.double(), want_out, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(lse.double(), want_lse, atol=2e-5, rtol=2e-5)


def test_reference_page_order_does_not_matter() -> None:
    """The same logical cache under two different physical page orders gives the same result."""
    gen = torch.Generator().manual_seed(1)
    q, kv, table, lens = make_inputs(gen, 6, 2, [150, 90], torch.float8_e4m3fn)
    perm = torch.randperm(kv.shape[0], generator=gen)
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.numel())
    kv2 = kv[perm]  # physical block i of kv2 is block perm[i] of kv
    table2 = inverse[table.long()].to(torch.int32)
    a = mla_decode_reference(q, kv, table, lens, SCALE)
    b = mla_decode_reference(q, kv2, table2, lens, SCALE)
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_reference_causal_mask_between_draft_tokens() -> None:
    """Token j sees exactly seq_len - q_len + j + 1 positions: changing the last cache row moves
    only the last token's output."""
    gen = torch.Generator().manual_seed(2)
    q, kv, table, lens = make_inputs(gen, 6, 4, [70], torch.float32)
    base, _ = mla_decode_reference(q, kv, table, lens, SCALE)
    last = 69
    kv[int(table[0, last // PAGE_SIZE]), last % PAGE_SIZE] += 3.0
    moved, _ = mla_decode_reference(q, kv, table, lens, SCALE)
    assert torch.equal(moved[0, :3], base[0, :3])
    assert not torch.allclose(moved[0, 3], base[0, 3])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seq_lens": [0]}, "seq_lens\\[0\\] = 0 must be in \\[q_len=1"),
        ({"seq_lens": [10_000]}, "seq_lens\\[0\\] = 10000 must be in \\[q_len=1, block_table"),
        (
            {"table": [[7]]},
            "block_table\\[0, 0\\] = 7 is not a block of kv_cache \\(num_blocks=4\\)",
        ),
        ({"table": [[-1]]}, "block_table\\[0, 0\\] = -1 is not a block"),
        ({"totals": [9]}, "totals\\[0\\] = 9 must be >= seq_lens\\[0\\] = 10"),
        ({"dcp": (2, 2, 1), "totals": [20]}, "0 <= rank < world"),
        ({"dcp": (2, 0, 1)}, "totals \\(the global lengths\\) are required"),
        ({"q_shape": (1, 1, 6, 512)}, "q must be \\[batch, q_len, heads, 576\\]"),
        ({"kv_shape": (4, 32, 576)}, "kv_cache must be \\[num_blocks, 64, 576\\]"),
    ],
)
def test_reference_rejects_bad_inputs(change: dict[str, Any], message: str) -> None:
    gen = torch.Generator().manual_seed(3)
    q, kv, table, lens = make_inputs(gen, 6, 1, [10], torch.float32)
    if "seq_lens" in change:
        lens = torch.tensor(change["seq_lens"], dtype=torch.int32)
    if "q_shape" in change:
        q = torch.zeros(change["q_shape"])
    if "kv_shape" in change:
        kv = torch.zeros(change["kv_shape"])
    if "table" in change:
        kv = kv[:4]
        table = torch.tensor(change["table"], dtype=torch.int32)
    totals = torch.tensor(change["totals"], dtype=torch.int32) if "totals" in change else None
    with pytest.raises(ValueError, match=message):
        mla_decode_reference(
            q, kv, table, lens, SCALE, totals=totals, dcp=change.get("dcp", (1, 0, 1))
        )


def _partials(
    q: torch.Tensor,
    kv: torch.Tensor,
    table: torch.Tensor,
    seq_len: int,
    bounds: list[tuple[int, int]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per split: attention restricted to [start, end) (normalized) and its natural-log lse."""
    rows = gather_kv(kv, table, 0, seq_len, 1.0)
    q_len = q.shape[1]
    scores = torch.einsum("jhd,sd->jhs", q[0].float(), rows) * SCALE
    pos = torch.arange(seq_len)
    limit = seq_len - q_len + torch.arange(q_len)
    outs, lses = [], []
    for start, end in bounds:
        visible = (pos >= start) & (pos < end) & (pos[None, :] <= limit[:, None])
        s = scores.masked_fill(~visible[:, None, :], float("-inf"))
        lses.append(torch.logsumexp(s, dim=-1))
        outs.append(torch.softmax(s, dim=-1).nan_to_num(0.0) @ rows[:, :512])
    return torch.stack(outs), torch.stack(lses)


@pytest.mark.parametrize(
    ("seq_len", "q_len", "num_splits"),
    [(1000, 8, 7), (65, 1, 3), (64, 4, 5), (33, 2, 32), (8192, 8, 16)],
)
def test_merge_of_split_partials_equals_the_whole(
    seq_len: int, q_len: int, num_splits: int
) -> None:
    """The kernel's split boundaries (split_bounds, including empty splits) merged by LSE equal
    the reference over the whole context."""
    gen = torch.Generator().manual_seed(seq_len)
    q, kv, table, lens = make_inputs(gen, 6, q_len, [seq_len], torch.float32, q_dtype=torch.float32)
    bounds = [split_bounds(seq_len, num_splits, s) for s in range(num_splits)]
    outs, lses = _partials(q, kv, table, seq_len, bounds)
    out, lse = merge_partials(outs, lses)
    want_out, want_lse = mla_decode_reference(q, kv, table, lens, SCALE)
    torch.testing.assert_close(out, want_out[0], atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(lse, want_lse[0], atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("num_splits", [1, 2, 3, 7, 32, 129])
@pytest.mark.parametrize("seq_len", [1, 31, 32, 33, 64, 65, 1000, 131072])
def test_split_bounds_partition_the_context(seq_len: int, num_splits: int) -> None:
    bounds = [split_bounds(seq_len, num_splits, s) for s in range(num_splits)]
    covered = [p for start, end in bounds for p in range(start, max(start, end))]
    assert covered == list(range(seq_len))
    for start, _ in bounds:
        assert start % TILE_N == 0  # every split starts on a tile boundary


def test_merge_partials_ignores_empty_splits() -> None:
    outs = torch.randn(3, 2, 512, generator=torch.Generator().manual_seed(3))
    lses = torch.tensor([[0.5, -1.0], [float("-inf"), float("-inf")], [1.5, 2.0]])
    outs[1] = float("nan")  # an empty split's output is never read
    out, lse = merge_partials(outs, lses)
    w0 = torch.exp(lses[0] - lse)
    w2 = torch.exp(lses[2] - lse)
    torch.testing.assert_close(w0 + w2, torch.ones(2))
    torch.testing.assert_close(out, w0[:, None] * outs[0] + w2[:, None] * outs[2])
