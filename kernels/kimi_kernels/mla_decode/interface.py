"""Host side of the CuTe DSL MLA decode: input checks, the compile cache, and ``mla_decode``.

Kernels are compiled ahead of time from fake tensors whose shapes and strides are all dynamic
(only the innermost stride is the static 1), so one compilation per (kernel, ``SplitConfig``,
arch) serves every batch, q_len, head count, context length, split count and block table width:
that triple is the whole compile-cache key (``compile_split``/``compile_combine``). The same
function compiles on a machine without a GPU (``cute.compile(..., options="--gpu-arch ...")``),
which the CPU compile-only matrix relies on.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import torch
from cutlass import cute
from cutlass.cute.runtime import from_dlpack

from kimi_kernels.mla_decode.config import (
    ARCH_BY_CAPABILITY,
    ARCHS,
    HEAD_DIM,
    MAX_Q_LEN,
    PAGE_SIZE,
    V_DIM,
    SplitConfig,
    check_dcp,
    choose_config,
    choose_num_splits,
    workspace_floats,
)
from kimi_kernels.mla_decode.kernel import MLADecodeCombine, MLADecodeSplitKV
from kimi_kernels.mla_decode.reference import check_block_table

ALIGN = 16  # bytes; every kernel argument is compiled with assumed_align=ALIGN
NO_DCP = (1, 0, 1)  # DCP (world, rank, interleave) without decode context parallelism
_TORCH_KV_DTYPES = {torch.float8_e4m3fn: "fp8_e4m3", torch.bfloat16: "bf16"}


@dataclass(frozen=True)
class DecodeShape:
    batch: int
    q_len: int
    heads: int
    kv_dtype: str

    @property
    def rows(self) -> int:
        return self.q_len * self.heads


def check_inputs(
    q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor
) -> DecodeShape:
    """Validate ``mla_decode``'s tensors (metadata only: no device sync); raise precise errors."""
    if q.dim() != 4 or q.shape[3] != HEAD_DIM:
        raise ValueError(f"q must be [batch, q_len, heads, {HEAD_DIM}], got {list(q.shape)}")
    if q.dtype != torch.bfloat16:
        raise ValueError(f"q must be bfloat16, got {q.dtype}")
    batch, q_len, heads, _ = q.shape
    if not 1 <= q_len <= MAX_Q_LEN:
        raise ValueError(f"q_len must be 1..{MAX_Q_LEN} (1 + up to 7 draft tokens), got {q_len}")
    if kv_cache.dim() != 3 or tuple(kv_cache.shape[1:]) != (PAGE_SIZE, HEAD_DIM):
        raise ValueError(
            f"kv_cache must be [num_blocks, {PAGE_SIZE}, {HEAD_DIM}], got {list(kv_cache.shape)}"
        )
    if kv_cache.dtype not in _TORCH_KV_DTYPES:
        raise ValueError(f"kv_cache must be float8_e4m3fn or bfloat16, got {kv_cache.dtype}")
    if block_table.dim() != 2 or block_table.shape[0] != batch:
        raise ValueError(
            f"block_table must be [{batch}, max_blocks], got {list(block_table.shape)}"
        )
    if seq_lens.shape != (batch,):
        raise ValueError(f"seq_lens must be [{batch}], got {list(seq_lens.shape)}")
    for name, t in (("block_table", block_table), ("seq_lens", seq_lens)):
        if t.dtype != torch.int32:
            raise ValueError(f"{name} must be int32, got {t.dtype}")
    named = (("q", q), ("kv_cache", kv_cache), ("block_table", block_table), ("seq_lens", seq_lens))
    for name, t in named:
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have a contiguous last dimension")
        if t.data_ptr() % ALIGN:
            raise ValueError(
                f"{name} must start on a {ALIGN}-byte boundary (the kernels assume it)"
            )
    devices = {t.device for t in (q, kv_cache, block_table, seq_lens)}
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        raise ValueError(f"all tensors must be on one CUDA device, got {sorted(map(str, devices))}")
    return DecodeShape(batch, q_len, heads, _TORCH_KV_DTYPES[kv_cache.dtype])


def _fake(dtype: Any, rank: int) -> Any:
    """A fake tensor of ``rank`` dynamic dims, 64-bit dynamic strides, innermost stride 1."""
    shape = tuple(cute.sym_int() for _ in range(rank))
    stride = (*(cute.sym_int64() for _ in range(rank - 1)), 1)
    return cute.runtime.make_fake_tensor(dtype, shape, stride=stride, assumed_align=ALIGN)


def _options(arch: str, dump_dir: str | None) -> str:
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    opts = f"--gpu-arch {arch}"
    if dump_dir is not None:
        opts += f" --keep-ptx --keep-cubin --dump-dir {dump_dir}"
    return opts


def split_fakes(config: SplitConfig) -> list[Any]:
    """Fake tensors for the split kernel: q, kv_cache, block_table, seq_lens, totals, o_part,
    lse_part."""
    kv = MLADecodeSplitKV(config).kv_dtype
    return [
        _fake(cutlass.BFloat16, 4),
        _fake(kv, 3),
        _fake(cutlass.Int32, 2),
        _fake(cutlass.Int32, 1),
        _fake(cutlass.Int32, 1),
        _fake(cutlass.Float32, 4),
        _fake(cutlass.Float32, 3),
    ]


def combine_fakes() -> list[Any]:
    """Fake tensors for the combine kernel: o_part, lse_part, out, lse."""
    return [
        _fake(cutlass.Float32, 4),
        _fake(cutlass.Float32, 3),
        _fake(cutlass.BFloat16, 4),
        _fake(cutlass.Float32, 3),
    ]


@functools.cache
def compile_split(config: SplitConfig, arch: str, dump_dir: str | None = None) -> Any:
    """Compile (once per key) the split kernel for ``config`` on ``arch``."""
    MLADecodeSplitKV.can_implement(config)
    return cute.compile(
        MLADecodeSplitKV(config),
        *split_fakes(config),
        cutlass.Float32(1.0),
        cutlass.Float32(1.0),
        *(cutlass.Int32(x) for x in NO_DCP),
        cute.runtime.make_fake_stream(),
        options=_options(arch, dump_dir),
    )


@functools.cache
def compile_combine(arch: str, dump_dir: str | None = None) -> Any:
    """Compile (once per arch) the combine kernel."""
    return cute.compile(
        MLADecodeCombine(),
        *combine_fakes(),
        cute.runtime.make_fake_stream(),
        options=_options(arch, dump_dir),
    )


def device_arch(device: torch.device) -> str:
    cap = torch.cuda.get_device_capability(device)
    if cap not in ARCH_BY_CAPABILITY:
        raise RuntimeError(
            f"no MLA decode kernel for compute capability {cap[0]}.{cap[1]}; "
            f"supported: {sorted(ARCH_BY_CAPABILITY)}"
        )
    return ARCH_BY_CAPABILITY[cap]


def to_cute(t: torch.Tensor) -> Any:
    """The runtime view of a torch tensor, with the layout dynamism the fakes were compiled for."""
    if t.dtype == torch.float8_e4m3fn:
        ct = from_dlpack(t.view(torch.uint8), assumed_align=ALIGN)
        ct.element_type = cutlass.Float8E4M3FN
    else:
        ct = from_dlpack(t, assumed_align=ALIGN)
    return ct.mark_layout_dynamic(leading_dim=t.dim() - 1)


def partition_workspace(
    workspace: torch.Tensor, batch: int, rows: int, num_splits: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The split kernel's ``o_part`` ``[B, splits, rows, 512]`` and ``lse_part``
    ``[B, splits, rows]``: views of the front of a caller-owned float32 ``workspace``."""
    need = workspace_floats(batch, rows, num_splits)
    if workspace.dtype != torch.float32 or workspace.dim() != 1 or not workspace.is_contiguous():
        raise ValueError(
            f"workspace must be a contiguous 1-D float32 tensor, got {workspace.dtype} "
            f"{list(workspace.shape)}"
        )
    if workspace.numel() < need:
        raise ValueError(
            f"workspace has {workspace.numel()} floats; batch {batch} x {num_splits} splits x "
            f"{rows} rows needs {need} (config.workspace_floats)"
        )
    if workspace.data_ptr() % ALIGN:
        raise ValueError(f"workspace must start on a {ALIGN}-byte boundary")
    n_out = batch * num_splits * rows * V_DIM
    o_part = workspace[:n_out].view(batch, num_splits, rows, V_DIM)
    return o_part, workspace[n_out:need].view(batch, num_splits, rows)


def mla_decode(  # noqa: PLR0917 (the reference's positional signature)
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
    kv_scale: float = 1.0,
    *,
    workspace: torch.Tensor | None = None,
    num_splits: int | None = None,
    max_seq_len: int | None = None,
    totals: torch.Tensor | None = None,
    dcp: tuple[int, int, int] = NO_DCP,
    check_lengths: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MLA decode on the GPU: bf16 ``out`` ``[B, Lq, H, 512]`` and f32 ``lse`` ``[B, Lq, H]``.

    Same arguments and meaning as ``mla_decode_reference`` (``totals``/``dcp``: decode context
    parallelism). ``workspace``: float32, at least ``config.workspace_floats(B, Lq*H, splits)``,
    owned by the caller and reused across calls (without one, each call allocates its partials).
    ``check_lengths`` (one device sync) refuses lengths outside the block table and pages outside
    the cache; a CUDA graph capture must pass False, a fixed ``num_splits`` (or ``max_seq_len``)
    and a workspace.
    """
    shape = check_inputs(q, kv_cache, block_table, seq_lens)
    if not math.isfinite(softmax_scale) or not math.isfinite(kv_scale):
        raise ValueError(f"scales must be finite, got {softmax_scale}, {kv_scale}")
    check_dcp(dcp, totals)
    totals = seq_lens if totals is None else totals
    if totals.dtype != torch.int32 or totals.shape != seq_lens.shape:
        raise ValueError(f"totals must be int32 [{shape.batch}], got {totals.dtype} {totals.shape}")
    if check_lengths:
        longest = check_block_table(shape.q_len, kv_cache.shape[0], block_table, seq_lens, totals)
        max_seq_len = max_seq_len or longest
    config = choose_config(shape.kv_dtype, shape.rows)
    if num_splits is None:
        if max_seq_len is None:
            max_seq_len = int(seq_lens.max().item())
        props = torch.cuda.get_device_properties(q.device)
        num_splits = choose_num_splits(
            shape.batch, shape.rows, max_seq_len, config, props.multi_processor_count
        )
    MLADecodeCombine.can_implement(num_splits)
    arch = device_arch(q.device)
    split_fn = compile_split(config, arch)
    combine_fn = compile_combine(arch)

    dev = q.device
    if workspace is None:
        workspace = torch.empty(
            workspace_floats(shape.batch, shape.rows, num_splits), dtype=torch.float32, device=dev
        )
    o_part, lse_part = partition_workspace(workspace, shape.batch, shape.rows, num_splits)
    out = torch.empty(
        shape.batch, shape.q_len, shape.heads, V_DIM, dtype=torch.bfloat16, device=dev
    )
    lse = torch.empty(shape.batch, shape.q_len, shape.heads, dtype=torch.float32, device=dev)
    stream = cuda.CUstream(torch.cuda.current_stream(dev).cuda_stream)
    split_fn(
        to_cute(q),
        to_cute(kv_cache),
        to_cute(block_table),
        to_cute(seq_lens),
        to_cute(totals),
        to_cute(o_part),
        to_cute(lse_part),
        cutlass.Float32(softmax_scale),
        cutlass.Float32(kv_scale),
        *(cutlass.Int32(x) for x in dcp),
        stream,
    )
    combine_fn(to_cute(o_part), to_cute(lse_part), to_cute(out), to_cute(lse), stream)
    return out, lse
