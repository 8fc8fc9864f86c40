"""A torch twin of the CuTe DSL kernels' schedule (kernel.py), tile by tile, with injectable bugs.

Split kernel: per split (``split_bounds``), tiles of 32 positions gathered through the page table;
scores in the log2 domain; the causal limit per row in local positions (``local_count``, as the
kernel's ``causal_limit``); the running max after each tile with the ``-inf`` guard; accumulators
rescaled at every tile (vectorized here: a tile's contribution weighted by 2^(its max - the last
max), the product of the later corrections); P.V only over each row's visible positions;
normalized partials and log2-sum-exps. Combine kernel:
``lse = log2 sum 2^lse_s``, ``out = sum 2^(lse_s - lse) out_s``.

``bug`` replaces one step with a plausible mistake, so that a check can be shown to fail it:
  no_rescale         the accumulators are not rescaled when the running max grows
  combine_exp        the combine weights the log2-domain partials with e^x instead of 2^x
  split_edge         each split drops its last position
  page_off_by_one    one logical page (the middle one) is read through the next table entry
  causal_off_by_one  every row sees one position past its causal limit
  unguarded_pv       P.V multiplies masked positions' V by 0 (0 x NaN is NaN)
"""

from __future__ import annotations

import math

import torch

from kimi_kernels.mla_decode.config import PAGE_SIZE, TILE_N, V_DIM, local_count, split_bounds

BUGS = (
    "no_rescale",
    "combine_exp",
    "split_edge",
    "page_off_by_one",
    "causal_off_by_one",
    "unguarded_pv",
)
LOG2E = math.log2(math.e)
NEG_INF = float("-inf")


def _split(  # noqa: PLR0917 (the kernel's arguments)
    ql: torch.Tensor,
    kv: torch.Tensor,
    pages: torch.Tensor,
    bounds: tuple[int, int],
    limit: torch.Tensor,
    kv_scale: float,
    bug: str | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    start, end = bounds
    if bug == "split_edge":
        end -= 1
    rows = ql.shape[0]
    tiles = max(0, -(-(end - start) // TILE_N))
    if tiles == 0:
        return torch.zeros(rows, V_DIM), torch.full((rows,), NEG_INF)
    # The split's tiles gathered through the page table (zeros past the end).
    pos = start + torch.arange(tiles * TILE_N)
    loaded = pos < end
    page_idx = pos.clamp_max(end - 1) // PAGE_SIZE
    if bug == "page_off_by_one":
        middle = pages.numel() // 2
        page_idx = torch.where(page_idx == middle, page_idx + 1, page_idx)
    k = kv[pages[page_idx.clamp_max(pages.numel() - 1)].long(), pos % PAGE_SIZE]
    k = torch.where(loaded[:, None], k.float() * kv_scale, 0.0)
    visible = loaded[None, :] & (pos[None, :] <= limit[:, None])  # [rows, positions]
    s = (ql @ k.T).masked_fill(~visible, NEG_INF).view(rows, tiles, TILE_N)
    # The running max after each tile, with the -inf guard (exponentiate against 0 then).
    m = torch.cummax(s.max(dim=2).values, dim=1).values  # [rows, tiles]
    base = torch.where(m == NEG_INF, 0.0, m)
    p = torch.exp2(s - base[..., None])
    # Rescaling by every later tile's correction = weighting tile t by 2^(base_t - base_last).
    weight = torch.exp2(base - base[:, -1:])
    total = (p.sum(dim=2) * weight).sum(dim=1)
    if bug != "no_rescale":
        p = p * weight[..., None]
    p = p.reshape(rows, -1)
    v = k[:, :V_DIM]
    if bug == "unguarded_pv":
        acc = p @ v  # masked positions multiplied by 0
    else:  # the kernel skips each row's masked positions (rows of one token share them)
        acc = torch.empty(rows, V_DIM)
        for lim in torch.unique(limit).tolist():
            group = limit == lim
            acc[group] = p[group] @ torch.where((pos <= lim)[:, None] & loaded[:, None], v, 0.0)
    seen = total > 0
    out = torch.where(seen[:, None], acc / total.clamp_min(1e-30)[:, None], 0.0)
    lse2 = torch.where(seen, m[:, -1] + torch.log2(total.clamp_min(1e-30)), NEG_INF)
    return out, lse2


def twin_decode(  # noqa: PLR0917 (the kernel's arguments)
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
    kv_scale: float,
    *,
    num_splits: int,
    bug: str | None = None,
    totals: torch.Tensor | None = None,
    dcp: tuple[int, int, int] = (1, 0, 1),
) -> tuple[torch.Tensor, torch.Tensor]:
    """What split + combine compute: ``out`` ``[B, Lq, H, 512]``, natural-log ``lse``."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"bug must be one of {BUGS}, got {bug!r}")
    batch, q_len, heads, _ = q.shape
    rows = q_len * heads
    globals_ = (seq_lens if totals is None else totals).tolist()
    out = torch.empty(batch, rows, V_DIM)
    lse = torch.empty(batch, rows)
    for b, seq_len in enumerate(seq_lens.tolist()):
        ql = q[b].float().reshape(rows, -1) * (softmax_scale * LOG2E)
        token = torch.arange(rows) // heads
        limit = torch.tensor(
            [local_count(globals_[b] - q_len + int(j) + 1, *dcp) - 1 for j in token]
        )
        if bug == "causal_off_by_one":
            limit = limit + 1
        parts = [
            _split(
                ql,
                kv_cache,
                block_table[b],
                split_bounds(seq_len, num_splits, s),
                limit,
                kv_scale,
                bug,
            )
            for s in range(num_splits)
        ]
        part_o = torch.stack([o for o, _ in parts])
        part_l = torch.stack([l2 for _, l2 in parts])  # [splits, rows]
        top = part_l.max(dim=0).values
        finite = top > NEG_INF
        top = torch.where(finite, top, 0.0)
        total = torch.exp2(part_l - top).sum(dim=0)
        row_lse = torch.where(finite, top + torch.log2(total), NEG_INF)
        weight = torch.exp2 if bug != "combine_exp" else torch.exp
        w = torch.where(finite, weight(part_l - row_lse), 0.0)
        out[b] = (w[..., None] * part_o).sum(dim=0)
        lse[b] = row_lse * math.log(2.0)
    return out.reshape(batch, q_len, heads, V_DIM), lse.reshape(batch, q_len, heads)
