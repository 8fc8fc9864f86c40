"""Host-side configuration of the MLA decode kernels: shapes, dispatch, the split heuristic.

Pure Python (no torch, no CuTe DSL): the decisions here are unit-tested on any machine.

Dispatch: the split kernel is specialised on the KV cache dtype and on the CTA's row tile
(``num_warps x rows_per_warp`` query rows, query row = (draft token, head)); everything else
(batch, q_len, heads, context lengths, number of splits, block table width) is a run-time value.
``DISPATCH_CONFIGS`` lists every configuration ``choose_config`` can return: the compile-only
matrix compiles exactly these.

Split heuristic (``choose_num_splits``). Status: derived from a model, NOT yet fitted on
measurements (no GPU was available when it was written; ``benchmarks/mla_decode_gpu.py`` sweeps
the split count per shape so that the constants below can be fitted, and ``kernels/NOTES.md``
records the data once measured). The model: a launch takes whole waves of ``SMs x resident CTAs
per SM`` CTAs (a partly filled last wave costs a full one); without splitting there are
``batch x row_groups`` CTAs (2 to 192 for Kimi K3's shapes), far fewer than the 132 (H200) /
148-160 (GB300) SMs x 2, so the context is split into the count that minimises waves x work per
CTA; each split must still cover ``MIN_TILES_PER_SPLIT`` tiles of 32 positions so that staging
the queries and the combine's extra read of the partials stay small next to the split's own
work; the partial workspace (``batch x splits x rows x 2 KiB``) is capped at
``MAX_WORKSPACE_BYTES``.

Decode context parallelism (DCP, vLLM's ``cp_kv_cache_interleave_size``): rank ``r`` of ``W``
holds global positions in blocks of ``I``, block ``k`` of the rank being global block
``k * W + r``; vLLM passes the local lengths and the global ones (``dcp_tot_seq_lens``).
``local_count`` is how many of a rank's positions lie below a global position.
"""

from __future__ import annotations

from dataclasses import dataclass

HEAD_DIM = 576  # 512 latent (kv_lora_rank) + 64 rope
V_DIM = 512
PAGE_SIZE = 64
TILE_N = 32
KV_DTYPES = frozenset({"fp8_e4m3", "bf16"})
SUPPORTED_HEADS = (6, 12, 96)  # per GPU: TP16, TP8, decode context parallel (all heads)
MAX_Q_LEN = 8  # 1 + up to 7 DSpark draft tokens
MAX_SPLITS = 128
MIN_TILES_PER_SPLIT = 4  # >= 128 cache positions per split
MAX_WORKSPACE_BYTES = 256 << 20
SMEM_SLACK = 1024
SMEM_PER_SM = 227 * 1024  # usable shared memory per SM, sm_90a and sm_100a/sm_103a
ARCHS = ("sm_90a", "sm_100a", "sm_103a")
ARCH_BY_CAPABILITY = {(9, 0): "sm_90a", (10, 0): "sm_100a", (10, 3): "sm_103a"}


@dataclass(frozen=True, order=True)
class SplitConfig:
    """Everything that changes the split kernel's code (the compile-cache key, with the arch)."""

    kv_dtype: str
    num_warps: int
    rows_per_warp: int

    @property
    def rows_per_cta(self) -> int:
        return self.num_warps * self.rows_per_warp

    @property
    def smem_bytes(self) -> int:
        # staged cache tile + staged query rows (f32, row stride 577), plus alignment slack
        return (TILE_N + self.rows_per_cta) * (HEAD_DIM + 1) * 4 + SMEM_SLACK

    @property
    def ctas_per_sm(self) -> int:
        return max(1, SMEM_PER_SM // self.smem_bytes)


# Row tiles (num_warps, rows_per_warp): 8 rows (6 heads x 1 token), 16 rows (everything bigger,
# in several row groups). A 32-row tile of 8 warps x 4 rows spilled on sm_90a (ptxas held it at
# 128 registers), so more rows per CTA would need a different accumulator split (NOTES.md).
ROW_TILES = ((4, 2), (4, 4))
DISPATCH_CONFIGS = tuple(
    SplitConfig(kv_dtype, num_warps, rows_per_warp)
    for kv_dtype in sorted(KV_DTYPES)
    for num_warps, rows_per_warp in ROW_TILES
)


def choose_config(kv_dtype: str, rows: int) -> SplitConfig:
    """The smallest row tile that holds ``rows`` query rows, else the largest tile."""
    if kv_dtype not in KV_DTYPES:
        raise ValueError(
            f"kv cache dtype {kv_dtype!r} is not supported; use one of {sorted(KV_DTYPES)}"
        )
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    for num_warps, rows_per_warp in ROW_TILES:
        if rows <= num_warps * rows_per_warp:
            return SplitConfig(kv_dtype, num_warps, rows_per_warp)
    num_warps, rows_per_warp = ROW_TILES[-1]
    return SplitConfig(kv_dtype, num_warps, rows_per_warp)


def row_groups(rows: int, config: SplitConfig) -> int:
    return -(-rows // config.rows_per_cta)


def _wave_cost(ctas: int, splits: int, wave: int) -> float:
    """A launch's time in units of one unsplit CTA: whole waves (a partly filled last wave takes
    as long as a full one) of CTAs that each do ``1 / splits`` of the work."""
    return -(-ctas * splits // wave) / splits


def choose_num_splits(
    batch: int, rows: int, max_seq_len: int, config: SplitConfig, num_sms: int
) -> int:
    """Split count for one launch (same for every request; shorter requests get empty splits).

    The count with the lowest :func:`_wave_cost` within the caps, the smallest on a tie: with 48
    CTAs on 132 SMs x 2, 11 splits (528 CTAs, two full waves, cost 2/11), never 6 (288 CTAs: a
    24-CTA tail wave, cost 2/6, 1.8x as long).
    """
    if batch < 1 or rows < 1 or num_sms < 1:
        raise ValueError(f"batch, rows and num_sms must be >= 1, got {batch}, {rows}, {num_sms}")
    if max_seq_len < 1:
        raise ValueError(f"max_seq_len must be >= 1, got {max_seq_len}")
    ctas = batch * row_groups(rows, config)
    wave = num_sms * config.ctas_per_sm
    tiles = -(-max_seq_len // TILE_N)
    enough_work = max(1, tiles // MIN_TILES_PER_SPLIT)
    workspace_cap = max(1, MAX_WORKSPACE_BYTES // (batch * rows * V_DIM * 4))
    cap = min(enough_work, workspace_cap, MAX_SPLITS)
    return min(range(1, cap + 1), key=lambda s: (_wave_cost(ctas, s, wave), s))


def split_bounds(seq_len: int, num_splits: int, split: int) -> tuple[int, int]:
    """The cache positions ``[start, end)`` split ``split`` covers (what the kernel computes)."""
    per_split = -(-seq_len // num_splits)
    chunk = -(-per_split // TILE_N) * TILE_N
    start = split * chunk
    return start, min(start + chunk, seq_len)


def check_dcp(dcp: tuple[int, int, int], totals: object) -> None:
    """``dcp`` is ``(world, rank, interleave)`` with ``0 <= rank < world``, ``interleave >= 1``;
    a sharded cache (world > 1) needs the global lengths ``totals``."""
    world, rank, interleave = dcp
    if not 0 <= rank < world or interleave < 1:
        raise ValueError(
            f"dcp (world, rank, interleave) needs 0 <= rank < world and interleave >= 1, got {dcp}"
        )
    if world > 1 and totals is None:
        raise ValueError("totals (the global lengths) are required with dcp world > 1")


def local_count(global_len: int, world: int, rank: int, interleave: int) -> int:
    """How many of rank ``rank``'s cache positions hold global positions ``< global_len`` (vLLM's
    ``get_dcp_local_seq_lens``; the kernel's ``local_limit`` is its ``@cute.jit`` twin)."""
    base = global_len // interleave // world * interleave
    return base + min(max(global_len - base * world - rank * interleave, 0), interleave)


def workspace_floats(batch: int, rows: int, num_splits: int) -> int:
    """float32 elements of the split kernel's partials: outputs ``[batch, splits, rows, 512]``,
    then log2-sum-exps ``[batch, splits, rows]``."""
    return batch * num_splits * rows * (V_DIM + 1)
