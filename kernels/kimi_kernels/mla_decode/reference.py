"""Torch reference for Kimi K3's MLA decode (CPU and GPU), and the LSE merge of split partials.

Layout (vLLM's): ``q`` ``[batch, q_len, heads, 576]``; ``kv_cache`` ``[num_blocks, 64, 576]``
(fp8 e4m3, bf16 or fp32; value = stored x ``kv_scale``); K is the whole 576-value row, V its
first 512 values; ``block_table`` int32 ``[batch, max_blocks]`` (any page order);
``seq_lens`` int32 ``[batch]``, the context length including the ``q_len`` new tokens.
Query token ``j`` of request ``b`` sees cache positions ``0 .. seq_len - q_len + j``; a masked
position contributes nothing, whatever its cache row holds (NaN included).

Decode context parallelism (``dcp=(world, rank, interleave)``, as vLLM passes it): the cache holds
this rank's shard, ``seq_lens`` are the local lengths and ``totals`` the global ones; local
position ``i`` is global position ``(i // I * world + rank) * I + i % I`` and the causal mask
compares global positions. Merging every rank's ``(out, lse)`` gives the unsharded result.
"""

from __future__ import annotations

import torch

from kimi_kernels.mla_decode.config import HEAD_DIM, PAGE_SIZE, V_DIM, check_dcp


def check_block_table(
    q_len: int,
    num_blocks: int,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    totals: torch.Tensor | None = None,
) -> int:
    """Every length in ``[q_len, max_blocks * 64]`` and every page it uses a block of the cache
    (one device sync); returns the longest length. Without it a kernel reads out of range."""
    cap = block_table.shape[1] * PAGE_SIZE
    lens = seq_lens.tolist()
    for b, n in enumerate(lens):
        if not q_len <= n <= cap:
            raise ValueError(
                f"seq_lens[{b}] = {n} must be in [q_len={q_len}, "
                f"block_table.shape[1]*{PAGE_SIZE}={cap}] (max_blocks={block_table.shape[1]})"
            )
    used = torch.arange(block_table.shape[1], device=block_table.device)[None, :]
    pages = (seq_lens.to(block_table.device)[:, None] + PAGE_SIZE - 1) // PAGE_SIZE
    bad = (used < pages) & ((block_table < 0) | (block_table >= num_blocks))
    if bool(bad.any()):
        b, i = (int(x) for x in bad.nonzero()[0])
        raise ValueError(
            f"block_table[{b}, {i}] = {int(block_table[b, i])} is not a block of kv_cache "
            f"(num_blocks={num_blocks}) but seq_lens[{b}] = {lens[b]} uses it"
        )
    if totals is not None:
        if totals.shape != seq_lens.shape:
            raise ValueError(f"totals must be [{len(lens)}], got {list(totals.shape)}")
        for b, (n, total) in enumerate(zip(lens, totals.tolist(), strict=True)):
            if total < max(n, q_len):
                raise ValueError(f"totals[{b}] = {total} must be >= seq_lens[{b}] = {n}, q_len")
    return int(max(lens))


def _check(
    q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor
) -> None:
    if q.dim() != 4 or q.shape[3] != HEAD_DIM:
        raise ValueError(f"q must be [batch, q_len, heads, {HEAD_DIM}], got {list(q.shape)}")
    if kv_cache.dim() != 3 or tuple(kv_cache.shape[1:]) != (PAGE_SIZE, HEAD_DIM):
        raise ValueError(
            f"kv_cache must be [num_blocks, {PAGE_SIZE}, {HEAD_DIM}], got {list(kv_cache.shape)}"
        )
    batch = q.shape[0]
    if block_table.dim() != 2 or block_table.shape[0] != batch:
        raise ValueError(
            f"block_table must be [{batch}, max_blocks], got {list(block_table.shape)}"
        )
    if seq_lens.shape != (batch,):
        raise ValueError(f"seq_lens must be [{batch}], got {list(seq_lens.shape)}")


def global_positions(n: int, dcp: tuple[int, int, int], device: torch.device) -> torch.Tensor:
    """The global positions of a rank's first ``n`` local cache positions."""
    world, rank, interleave = dcp
    i = torch.arange(n, device=device)
    return (i // interleave * world + rank) * interleave + i % interleave


def gather_kv(
    kv_cache: torch.Tensor, block_table: torch.Tensor, b: int, seq_len: int, kv_scale: float
) -> torch.Tensor:
    """Request ``b``'s first ``seq_len`` cache rows in position order, dequantized to float32."""
    pages = block_table[b, : -(-seq_len // PAGE_SIZE)].long()
    rows = kv_cache[pages].reshape(-1, HEAD_DIM)[:seq_len]
    return rows.float() * kv_scale


def mla_decode_reference(  # noqa: PLR0917 (the signature vLLM-style callers use)
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
    kv_scale: float = 1.0,
    *,
    totals: torch.Tensor | None = None,
    dcp: tuple[int, int, int] = (1, 0, 1),
) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``out`` ``[batch, q_len, heads, 512]`` and ``lse`` ``[batch, q_len, heads]``.

    ``lse`` is the natural-log log-sum-exp of the scaled scores over the visible positions
    (``-inf``, with a zero ``out``, for a DCP rank that holds none of them).
    """
    _check(q, kv_cache, block_table, seq_lens)
    batch, q_len, heads, _ = q.shape
    check_block_table(q_len, kv_cache.shape[0], block_table, seq_lens, totals)
    check_dcp(dcp, totals)
    globals_ = seq_lens if totals is None else totals
    out = torch.zeros(batch, q_len, heads, V_DIM, dtype=torch.float32, device=q.device)
    lse = torch.full((batch, q_len, heads), float("-inf"), dtype=torch.float32, device=q.device)
    for b, (seq_len, total) in enumerate(zip(seq_lens.tolist(), globals_.tolist(), strict=True)):
        kv = gather_kv(kv_cache, block_table, b, seq_len, kv_scale)  # [S, 576]
        pos = global_positions(seq_len, dcp, q.device)
        for j in range(q_len):
            visible = kv[pos <= total - q_len + j]  # a prefix: masked rows are never read
            if visible.shape[0] == 0:
                continue
            scores = q[b, j].float() @ visible.T * softmax_scale  # [heads, n]
            lse[b, j] = torch.logsumexp(scores, dim=-1)
            out[b, j] = torch.softmax(scores, dim=-1) @ visible[:, :V_DIM]
    return out, lse


def merge_partials(outs: torch.Tensor, lses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge split partials: ``outs`` ``[splits, ..., 512]`` (each normalized over its own
    positions) and natural-log ``lses`` ``[splits, ...]``; a split with no position has
    ``lse = -inf`` and weight 0. Returns the whole's ``(out, lse)``: what the combine kernel does.
    """
    lse = torch.logsumexp(lses, dim=0)
    weights = torch.exp(lses - lse.unsqueeze(0)).nan_to_num(0.0)
    out = (weights.unsqueeze(-1) * outs.nan_to_num(0.0)).sum(dim=0)
    return out, lse


def relative_l2_per_row(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Per-row ||out - ref||_2 / ||ref||_2 over the last dimension, in float64.

    A max-abs bound passes a near-zero output; this one does not (a zero output scores 1.0).
    """
    out64 = out.detach().to(torch.float64)
    ref64 = ref.detach().to(torch.float64)
    err = torch.linalg.vector_norm(out64 - ref64, dim=-1)
    scale = torch.linalg.vector_norm(ref64, dim=-1).clamp_min(torch.finfo(torch.float64).tiny)
    return err / scale
