"""Torch reference for Kimi K3's MLA decode (CPU and GPU), and the LSE merge of split partials.

Layout (vLLM's): ``q`` ``[batch, q_len, heads, 576]``; ``kv_cache`` ``[num_blocks, 64, 576]``
(fp8 e4m3, bf16 or fp32; value = stored x ``kv_scale``); K is the whole 576-value row, V its
first 512 values; ``block_table`` int32 ``[batch, max_blocks]`` (any page order);
``seq_lens`` int32 ``[batch]``, the context length including the ``q_len`` new tokens.
Query token ``j`` of request ``b`` sees cache positions ``0 .. seq_len - q_len + j``.
"""

from __future__ import annotations

import torch

from kimi_kernels.mla_decode.config import HEAD_DIM, PAGE_SIZE, V_DIM


def _check(
    q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor
) -> None:
    if q.dim() != 4 or q.shape[3] != HEAD_DIM:
        raise ValueError(f"q must be [batch, q_len, heads, {HEAD_DIM}], got {list(q.shape)}")
    if kv_cache.dim() != 3 or tuple(kv_cache.shape[1:]) != (PAGE_SIZE, HEAD_DIM):
        raise ValueError(
            f"kv_cache must be [num_blocks, {PAGE_SIZE}, {HEAD_DIM}], got {list(kv_cache.shape)}"
        )
    batch, q_len = q.shape[0], q.shape[1]
    if block_table.dim() != 2 or block_table.shape[0] != batch:
        raise ValueError(
            f"block_table must be [{batch}, max_blocks], got {list(block_table.shape)}"
        )
    if seq_lens.shape != (batch,):
        raise ValueError(f"seq_lens must be [{batch}], got {list(seq_lens.shape)}")
    lens = seq_lens.tolist()
    for b, n in enumerate(lens):
        if not q_len <= n <= block_table.shape[1] * PAGE_SIZE:
            raise ValueError(
                f"seq_lens[{b}] = {n} must be in [q_len={q_len}, "
                f"max_blocks*{PAGE_SIZE}={block_table.shape[1] * PAGE_SIZE}]"
            )


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
) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``out`` ``[batch, q_len, heads, 512]`` and ``lse`` ``[batch, q_len, heads]``.

    ``lse`` is the natural-log log-sum-exp of the scaled scores over the visible positions.
    """
    _check(q, kv_cache, block_table, seq_lens)
    batch, q_len, heads, _ = q.shape
    out = torch.empty(batch, q_len, heads, V_DIM, dtype=torch.float32, device=q.device)
    lse = torch.empty(batch, q_len, heads, dtype=torch.float32, device=q.device)
    for b, seq_len in enumerate(seq_lens.tolist()):
        kv = gather_kv(kv_cache, block_table, b, seq_len, kv_scale)  # [S, 576]
        scores = torch.einsum("jhd,sd->jhs", q[b].float(), kv) * softmax_scale
        pos = torch.arange(seq_len, device=q.device)
        limit = seq_len - q_len + torch.arange(q_len, device=q.device)
        visible = pos[None, :] <= limit[:, None]  # [q_len, S]
        scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
        lse[b] = torch.logsumexp(scores, dim=-1)
        out[b] = torch.einsum("jhs,sd->jhd", torch.softmax(scores, dim=-1), kv[:, :V_DIM])
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
