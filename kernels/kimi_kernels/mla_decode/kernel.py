"""CuTe DSL kernels for Kimi K3's MLA decode: a split-KV attention kernel and its LSE combine.

Two kernels, one class each (the flash_attn/cute and quack layout): static configuration in
``__init__``, ``can_implement`` with precise errors, a ``@cute.jit`` launcher (``__call__``) and a
``@cute.kernel`` body (``kernel``).

Data (vLLM's layout, see ``reference.py``): ``q`` ``[B, Lq, H, 576]`` bf16; ``kv_cache``
``[num_blocks, 64, 576]`` FP8 e4m3 (or bf16) with a per-tensor scale; K is the whole row, V its
first 512 values; ``block_table`` ``[B, max_blocks]`` int32 in any page order; ``seq_lens``
``[B]``. Query row ``r`` of request ``b`` is token ``j = r // H``, head ``h = r % H``; it sees cache
positions ``0 .. seq_len - Lq + j`` (the causal draft-token mask). Under decode context
parallelism the cache is this rank's shard, ``seq_lens`` the local lengths, and the mask is in
global positions (``totals`` and ``dcp = (world, rank, interleave)``, as vLLM passes them).

Split kernel (``MLADecodeSplitKV``), grid ``(num_splits, row_groups, B)``: a CTA owns ``M`` query
rows (``num_warps * rows_per_warp``) of one request and one contiguous range of its context.
Per tile of 32 cache positions it gathers the rows through the page table, dequantizes them in
the kernel (FP8 e4m3 -> f32, times ``kv_scale``) into shared memory (row stride 577 floats: the
odd stride makes both the per-lane-token and the per-lane-column reads bank-conflict free), then
each warp computes its rows' scores with one cache position per lane, applies the mask, runs the
online softmax in the log2 domain, and accumulates P.V with 16 of the 512 output columns per lane.
It writes a normalized partial output and the partial log2-sum-exp per (split, row).

Combine kernel (``MLADecodeCombine``), grid ``(rows, B)``: merges the splits' partials
(``lse = log2 sum_s 2^lse_s``, ``out = sum_s 2^(lse_s - lse) out_s``), writes bf16 ``out`` and the
natural-log ``lse``. A split that saw no position has ``lse_s = -inf`` and weight 0.

This is a SIMT kernel (CUDA-core FMAs, no tensor-core MMA): see ``kernels/NOTES.md`` for what that
means against the memory floor and what is unverified without a GPU.
"""

from __future__ import annotations

import math
from typing import Any

import cuda.bindings.driver as cuda
import cutlass
from cutlass import Float32, Int32, cute

from kimi_kernels.mla_decode.config import (
    HEAD_DIM,
    KV_DTYPES,
    PAGE_SIZE,
    TILE_N,
    V_DIM,
    SplitConfig,
)

LOG2E = math.log2(math.e)
LN2 = math.log(2.0)
NEG_INF = -math.inf
WARP = 32
SMEM_STRIDE = HEAD_DIM + 1  # 577 floats per staged row: bank-conflict free both ways
COLS_PER_LANE = V_DIM // WARP  # 16 output columns per lane
COMBINE_THREADS = 128
COMBINE_COLS = V_DIM // COMBINE_THREADS  # 4 columns per thread

_CUTE_KV_DTYPES: dict[str, Any] = {
    "fp8_e4m3": cutlass.Float8E4M3FN,
    "bf16": cutlass.BFloat16,
}


@cute.jit
def split_range(seq_len: Int32, num_splits: Int32, split: Int32) -> tuple[Int32, Int32]:
    """Cache positions ``[start, end)`` of ``split``: contiguous, a multiple of TILE_N long
    (the last one shorter, trailing ones empty). Host twin: ``config.split_bounds``."""
    per_split = (seq_len + num_splits - 1) // num_splits
    chunk = (per_split + TILE_N - 1) // TILE_N * TILE_N
    start = split * chunk
    return start, cutlass.min(start + chunk, seq_len)


@cute.jit
def local_count(global_len: Int32, world: Int32, rank: Int32, interleave: Int32) -> Int32:
    """How many of this DCP rank's positions hold global positions ``< global_len``.
    Host twin: ``config.local_count`` (vLLM's ``get_dcp_local_seq_lens``)."""
    base = global_len // interleave // world * interleave
    rest = global_len - base * world - rank * interleave
    return base + cutlass.min(cutlass.max(rest, Int32(0)), interleave)


@cute.jit
def causal_limit(  # noqa: PLR0917 (inlined into the kernel)
    total: Int32,
    q_len: Int32,
    heads: Int32,
    row: Int32,
    world: Int32,
    rank: Int32,
    interleave: Int32,
) -> Int32:
    """The last local cache position query row ``row`` (token ``row // heads``) may see: token
    ``j`` sees global positions ``<= total - q_len + j`` (``total``: the global length)."""
    return local_count(total - q_len + row // heads + 1, world, rank, interleave) - 1


class MLADecodeSplitKV:
    """Split-KV attention over a paged FP8/BF16 MLA cache; writes per-split partials."""

    def __init__(self, config: SplitConfig) -> None:
        self.config = config
        self.kv_dtype = _CUTE_KV_DTYPES[config.kv_dtype]
        self.num_warps = config.num_warps
        self.rows_per_warp = config.rows_per_warp
        self.rows_per_cta = config.rows_per_cta
        self.num_threads = config.num_warps * WARP

    @staticmethod
    def can_implement(config: SplitConfig) -> None:
        """Raise ValueError naming the first unsupported field of ``config``."""
        if config.kv_dtype not in KV_DTYPES:
            raise ValueError(
                f"kv_dtype {config.kv_dtype!r} is not supported; use one of {sorted(KV_DTYPES)}"
            )
        if config.num_warps not in (2, 4, 8):
            raise ValueError(f"num_warps must be 2, 4 or 8, got {config.num_warps}")
        if config.rows_per_warp not in (1, 2, 4):
            raise ValueError(f"rows_per_warp must be 1, 2 or 4, got {config.rows_per_warp}")

    def smem_bytes(self) -> int:
        return self.config.smem_bytes

    @cute.jit
    def __call__(  # noqa: PLR0917 (the DSL passes kernel arguments positionally)
        self,
        g_q: cute.Tensor,  # [B, Lq, H, 576] bf16
        g_kv: cute.Tensor,  # [num_blocks, 64, 576] fp8 e4m3 / bf16
        g_table: cute.Tensor,  # [B, max_blocks] int32
        g_seq_lens: cute.Tensor,  # [B] int32, this rank's lengths
        g_totals: cute.Tensor,  # [B] int32, the global lengths (= g_seq_lens without DCP)
        g_o_part: cute.Tensor,  # [B, splits, Lq*H, 512] f32
        g_lse_part: cute.Tensor,  # [B, splits, Lq*H] f32, log2 domain
        softmax_scale: Float32,
        kv_scale: Float32,
        cp_world: Int32,  # DCP world, rank, interleave: 1, 0, 1 without DCP
        cp_rank: Int32,
        cp_interleave: Int32,
        stream: cuda.CUstream,
    ) -> None:
        batch = g_q.shape[0]
        rows = g_q.shape[1] * g_q.shape[2]
        num_splits = g_lse_part.shape[1]
        row_groups = (rows + self.rows_per_cta - 1) // self.rows_per_cta
        self.kernel(
            g_q,
            g_kv,
            g_table,
            g_seq_lens,
            g_totals,
            g_o_part,
            g_lse_part,
            softmax_scale * LOG2E,
            kv_scale,
            cp_world,
            cp_rank,
            cp_interleave,
        ).launch(
            grid=[num_splits, row_groups, batch],
            block=[self.num_threads, 1, 1],
            smem=self.smem_bytes(),
            stream=stream,
        )

    @cute.kernel
    def kernel(  # noqa: PLR0915, PLR0917 (one kernel body; positional kernel arguments)
        self,
        g_q: cute.Tensor,
        g_kv: cute.Tensor,
        g_table: cute.Tensor,
        g_seq_lens: cute.Tensor,
        g_totals: cute.Tensor,
        g_o_part: cute.Tensor,
        g_lse_part: cute.Tensor,
        scale_log2: Float32,
        kv_scale: Float32,
        cp_world: Int32,
        cp_rank: Int32,
        cp_interleave: Int32,
    ) -> None:
        tidx, _, _ = cute.arch.thread_idx()
        split, group, b = cute.arch.block_idx()
        warp = tidx // WARP
        lane = tidx % WARP
        q_len = g_q.shape[1]
        heads = g_q.shape[2]
        rows = q_len * heads
        num_splits = g_lse_part.shape[1]
        row0 = group * self.rows_per_cta

        smem = cutlass.memory.SmemAllocator()
        s_kv = smem.allocate_tensor(
            Float32, cute.make_layout((TILE_N, HEAD_DIM), stride=(SMEM_STRIDE, 1)), 16
        )
        s_q = smem.allocate_tensor(
            Float32, cute.make_layout((self.rows_per_cta, HEAD_DIM), stride=(SMEM_STRIDE, 1)), 16
        )

        # This split's contiguous range of the context, a multiple of TILE_N long.
        seq_len = g_seq_lens[b]
        start, end = split_range(seq_len, num_splits, split)

        # Stage the CTA's query rows, pre-scaled into the log2 domain (zero rows past the end).
        for r in cutlass.range_constexpr(self.rows_per_warp):
            local = warp * self.rows_per_warp + r
            row = row0 + local
            j = row // heads
            h = row - j * heads
            for c in cutlass.range_constexpr(HEAD_DIM // WARP):
                d = lane + c * WARP
                val = Float32(0.0)
                if row < rows:
                    val = g_q[b, j, h, d].to(Float32) * scale_log2
                s_q[local, d] = val

        # Per row of this warp: running max (log2), running sum, 16 accumulator columns per lane.
        row_max = cute.make_rmem_tensor((self.rows_per_warp,), Float32)
        row_sum = cute.make_rmem_tensor((self.rows_per_warp,), Float32)
        acc = cute.make_rmem_tensor((self.rows_per_warp, COLS_PER_LANE), Float32)
        # The causal limit of each row: the last visible cache position.
        limit = cute.make_rmem_tensor((self.rows_per_warp,), Int32)
        for r in cutlass.range_constexpr(self.rows_per_warp):
            row_max[r] = Float32(NEG_INF)
            row_sum[r] = Float32(0.0)
            row = row0 + warp * self.rows_per_warp + r
            limit[r] = causal_limit(
                g_totals[b], q_len, heads, row, cp_world, cp_rank, cp_interleave
            )
            if row >= rows:
                limit[r] = Int32(-1)
            for i in cutlass.range_constexpr(COLS_PER_LANE):
                acc[r, i] = Float32(0.0)

        for t0 in cutlass.range(start, end, TILE_N):
            cute.arch.sync_threads()
            # Gather TILE_N cache rows through the page table and dequantize them.
            for t in cutlass.range(TILE_N // self.num_warps):
                tok = warp * (TILE_N // self.num_warps) + t
                pos = t0 + tok
                page = Int32(0)
                if pos < end:
                    page = g_table[b, pos // PAGE_SIZE]
                for c in cutlass.range_constexpr(HEAD_DIM // WARP):
                    d = lane + c * WARP
                    val = Float32(0.0)
                    if pos < end:
                        val = g_kv[page, pos % PAGE_SIZE, d].to(Float32) * kv_scale
                    s_kv[tok, d] = val
            cute.arch.sync_threads()

            # Scores: lane = cache position t0 + lane, one register per row.
            score = cute.make_rmem_tensor((self.rows_per_warp,), Float32)
            for r in cutlass.range_constexpr(self.rows_per_warp):
                score[r] = Float32(0.0)
            for d in cutlass.range(HEAD_DIM, unroll=8):
                k = s_kv[lane, d]
                for r in cutlass.range_constexpr(self.rows_per_warp):
                    score[r] += s_q[warp * self.rows_per_warp + r, d] * k

            # Mask, online softmax (log2 domain), rescale the accumulators.
            pos = t0 + lane
            prob = cute.make_rmem_tensor((self.rows_per_warp,), Float32)
            for r in cutlass.range_constexpr(self.rows_per_warp):
                s = score[r]
                if pos >= end:
                    s = Float32(NEG_INF)
                if pos > limit[r]:
                    s = Float32(NEG_INF)
                tile_max = cute.arch.warp_reduction_max(s)
                new_max = cute.arch.fmax(row_max[r], tile_max)
                # A row with nothing visible yet keeps max -inf; exponentiate against 0 then.
                base = new_max
                if new_max == Float32(NEG_INF):
                    base = Float32(0.0)
                p = cute.math.exp2(s - base, approx=True, ftz=True)
                corr = cute.math.exp2(row_max[r] - base, approx=True, ftz=True)
                row_sum[r] = row_sum[r] * corr + cute.arch.warp_reduction_sum(p)
                row_max[r] = new_max
                prob[r] = p
                for i in cutlass.range_constexpr(COLS_PER_LANE):
                    acc[r, i] = acc[r, i] * corr

            # P.V: lane owns columns lane + 32 i; probabilities broadcast by shuffle. A row
            # skips the positions it may not see (warp-uniform test) rather than multiplying
            # their V by 0: the cache row of a masked position may hold NaN, and 0 x NaN is NaN.
            for t in cutlass.range(TILE_N, unroll=4):
                pt = cute.make_rmem_tensor((self.rows_per_warp,), Float32)
                for r in cutlass.range_constexpr(self.rows_per_warp):
                    pt[r] = cute.arch.shuffle_sync(prob[r], t)
                for i in cutlass.range_constexpr(COLS_PER_LANE):
                    v = s_kv[t, lane + i * WARP]
                    for r in cutlass.range_constexpr(self.rows_per_warp):
                        if t0 + t <= limit[r]:
                            acc[r, i] += pt[r] * v

        # Normalized partial output and its log2-sum-exp (-inf and zeros when nothing was seen).
        for r in cutlass.range_constexpr(self.rows_per_warp):
            row = row0 + warp * self.rows_per_warp + r
            if row < rows:
                total = row_sum[r]
                inv = Float32(0.0)
                lse = Float32(NEG_INF)
                if total > Float32(0.0):
                    inv = cute.arch.rcp_approx(total)
                    lse = row_max[r] + cute.math.log2(total, approx=True, ftz=True)
                for i in cutlass.range_constexpr(COLS_PER_LANE):
                    g_o_part[b, split, row, lane + i * WARP] = acc[r, i] * inv
                if lane == 0:
                    g_lse_part[b, split, row] = lse


class MLADecodeCombine:
    """Merges split-KV partials by log-sum-exp; writes bf16 ``out`` and natural-log ``lse``."""

    def __init__(self) -> None:
        self.num_threads = COMBINE_THREADS

    @staticmethod
    def can_implement(num_splits: int) -> None:
        if num_splits < 1:
            raise ValueError(f"num_splits must be >= 1, got {num_splits}")

    @cute.jit
    def __call__(
        self,
        g_o_part: cute.Tensor,  # [B, splits, Lq*H, 512] f32
        g_lse_part: cute.Tensor,  # [B, splits, Lq*H] f32 log2
        g_out: cute.Tensor,  # [B, Lq, H, 512] bf16
        g_lse: cute.Tensor,  # [B, Lq, H] f32 natural log
        stream: cuda.CUstream,
    ) -> None:
        rows = g_out.shape[1] * g_out.shape[2]
        self.kernel(g_o_part, g_lse_part, g_out, g_lse).launch(
            grid=[rows, g_out.shape[0], 1], block=[self.num_threads, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(
        self, g_o_part: cute.Tensor, g_lse_part: cute.Tensor, g_out: cute.Tensor, g_lse: cute.Tensor
    ) -> None:
        tidx, _, _ = cute.arch.thread_idx()
        row, b, _ = cute.arch.block_idx()
        heads = g_out.shape[2]
        num_splits = g_lse_part.shape[1]

        lse_max = Float32(NEG_INF)
        for s in cutlass.range(num_splits):
            lse_max = cute.arch.fmax(lse_max, g_lse_part[b, s, row])
        total = Float32(0.0)
        if lse_max != Float32(NEG_INF):
            for s in cutlass.range(num_splits):
                total += cute.math.exp2(g_lse_part[b, s, row] - lse_max, approx=True, ftz=True)
        lse = Float32(NEG_INF)
        if total > Float32(0.0):
            lse = lse_max + cute.math.log2(total, approx=True, ftz=True)

        acc = cute.make_rmem_tensor((COMBINE_COLS,), Float32)
        for i in cutlass.range_constexpr(COMBINE_COLS):
            acc[i] = Float32(0.0)
        if total > Float32(0.0):
            for s in cutlass.range(num_splits):
                w = cute.math.exp2(g_lse_part[b, s, row] - lse, approx=True, ftz=True)
                for i in cutlass.range_constexpr(COMBINE_COLS):
                    acc[i] += w * g_o_part[b, s, row, tidx + i * COMBINE_THREADS]
        j = row // heads
        h = row % heads
        for i in cutlass.range_constexpr(COMBINE_COLS):
            g_out[b, j, h, tidx + i * COMBINE_THREADS] = acc[i].to(g_out.element_type)
        if tidx == 0:
            g_lse[b, j, h] = lse * LN2
