"""Inputs and the pass/fail rule shared by the CPU tests and the GPU check.

Why needles: with random Gaussian keys and queries the attention is nearly uniform, the true
output is about 0.015 in magnitude at every context length, and an error confined to a few
positions (a dropped page, a split's last position, a leaked draft token) moves it by less than
bf16 rounding. ``make_inputs(..., q_scale=...)`` sharpens every row's attention and
``plant_needles`` writes keys that dominate chosen rows' attention at chosen positions: dropping
one changes that row's output completely, and a needle planted just past a row's causal limit
takes it over if the mask leaks. ``verdict`` then bounds each row's relative L2 error.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kimi_kernels.mla_decode.config import HEAD_DIM, PAGE_SIZE, split_bounds
from kimi_kernels.mla_decode.reference import relative_l2_per_row

OUT_REL_L2 = 1e-2  # per (request, token, head) row; bf16 rounding alone is about 2e-3
LSE_ATOL = 1e-3
NEEDLE_SCORE = 24.0  # scaled score of a needle for its row (natural log units)


def make_inputs(
    gen: torch.Generator,
    heads: int,
    q_len: int,
    seq_lens: list[int],
    kv_dtype: torch.dtype,
    *,
    q_dtype: torch.dtype = torch.bfloat16,
    spare_blocks: int = 3,
    q_scale: float = 1.0,
    device: str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(q, kv_cache, block_table, seq_lens)`` in vLLM's layout; every request's pages are drawn
    at random from one pool (plus unused spare blocks), so logical and physical order differ."""
    batch = len(seq_lens)
    pages = [-(-n // PAGE_SIZE) for n in seq_lens]
    num_blocks = sum(pages) + spare_blocks
    order = torch.randperm(num_blocks, generator=gen, device=device).to(torch.int32)
    table = torch.zeros(batch, max(pages), dtype=torch.int32, device=device)
    used = 0
    for b, n in enumerate(pages):
        table[b, :n] = order[used : used + n]
        used += n
    kv = torch.randn(num_blocks, PAGE_SIZE, HEAD_DIM, generator=gen, device=device).to(kv_dtype)
    q = torch.randn(batch, q_len, heads, HEAD_DIM, generator=gen, device=device) * q_scale
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    return q.to(q_dtype), kv, table, lens


def needle_positions(seq_len: int, q_len: int, num_splits: int) -> list[tuple[int, int]]:
    """``(position, token)`` pairs: token ``token``'s rows get a needle at ``position``.

    Visible needles at the first and last position, the first and last position of every split
    (up to 8 splits, spread over the context) and of a page in the middle; for every draft token
    but the last a needle one position past its causal limit (invisible to it).
    """
    last = seq_len - q_len  # the first token's causal limit
    mid = (seq_len // 2) // PAGE_SIZE * PAGE_SIZE
    visible = {0, last, mid, min(last, mid + PAGE_SIZE - 1)}
    bounds = [split_bounds(seq_len, num_splits, s) for s in range(num_splits)]
    step = max(1, math.ceil(num_splits / 8))
    for start, end in bounds[::step]:
        if start < end:
            visible.update((start, end - 1))
    pairs = [(p, 0) for p in sorted(visible) if p <= last]
    pairs += [(seq_len - q_len + j + 1, j) for j in range(q_len - 1)]
    return pairs


def plant_needles(  # noqa: PLR0917 (the decode inputs and where to plant)
    gen: torch.Generator,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    b: int,
    pairs: list[tuple[int, int]],
    scales: tuple[float, float],
) -> None:
    """Write, in place, needle keys at request ``b``'s positions. The key at ``position`` scores
    ``NEEDLE_SCORE`` (after ``softmax_scale``) for one head's query row of token ``token`` (a
    different head each time): that row's share of the query plus random values orthogonal to
    it, so every needle has its own V and dropping any one of them moves the row's output."""
    softmax_scale, kv_scale = scales
    heads = q.shape[2]
    for n, (pos, token) in enumerate(pairs):
        row = q[b, token, n % heads].float()
        noise = torch.randn(row.shape, generator=gen, device=row.device)
        noise -= (noise @ row) / (row @ row) * row
        key = noise + row * (NEEDLE_SCORE / (softmax_scale * float(row @ row)))
        page = int(block_table[b, pos // PAGE_SIZE])
        kv_cache[page, pos % PAGE_SIZE] = (key / kv_scale).to(kv_cache.dtype)


def verdict(
    out: torch.Tensor, lse: torch.Tensor, ref_out: torch.Tensor, ref_lse: torch.Tensor
) -> dict[str, Any]:
    """Pass iff no NaN, every row's relative L2 error <= ``OUT_REL_L2`` and every LSE within
    ``LSE_ATOL``; the worst row's figures either way."""
    rel = relative_l2_per_row(out.float(), ref_out)
    same = lse.float() == ref_lse  # both -inf: a DCP rank that sees none of the positions
    lse_err = torch.where(same, 0.0, (lse.float() - ref_lse).abs()).nan_to_num(math.inf)
    nan = bool(torch.isnan(out).any() or torch.isnan(lse).any())
    worst = int(rel.nan_to_num(math.inf).flatten().argmax())
    return {
        "ok": (not nan) and bool((rel <= OUT_REL_L2).all()) and bool((lse_err <= LSE_ATOL).all()),
        "nan": nan,
        "max_rel_l2": float(rel.nan_to_num(math.inf).max()),
        "worst_row": [int(i) for i in torch.unravel_index(torch.tensor(worst), rel.shape)],
        "max_lse_err": float(lse_err.max()),
    }
