"""Random MLA decode inputs in vLLM's layout with a shuffled (non-contiguous) page table."""

from __future__ import annotations

import torch

from kimi_kernels.mla_decode.config import HEAD_DIM, PAGE_SIZE


def make_inputs(
    gen: torch.Generator,
    heads: int,
    q_len: int,
    seq_lens: list[int],
    kv_dtype: torch.dtype,
    *,
    q_dtype: torch.dtype = torch.bfloat16,
    spare_blocks: int = 3,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(q, kv_cache, block_table, seq_lens)``; every request's pages are drawn at random from
    one pool (plus unused spare blocks), so logical and physical page order differ."""
    batch = len(seq_lens)
    pages = [-(-n // PAGE_SIZE) for n in seq_lens]
    max_blocks = max(pages)
    num_blocks = sum(pages) + spare_blocks
    order = torch.randperm(num_blocks, generator=gen).to(torch.int32)
    table = torch.zeros(batch, max_blocks, dtype=torch.int32)
    used = 0
    for b, n in enumerate(pages):
        table[b, :n] = order[used : used + n]
        used += n
    kv = torch.randn(num_blocks, PAGE_SIZE, HEAD_DIM, generator=gen).to(kv_dtype)
    q = torch.randn(batch, q_len, heads, HEAD_DIM, generator=gen).to(q_dtype)
    return q, kv, table, torch.tensor(seq_lens, dtype=torch.int32)
