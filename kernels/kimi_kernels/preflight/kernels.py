"""The preflight's GPU checks: a CuTe DSL smoke kernel and ``mla_decode`` against the reference.

Each returns ``None`` when the check passed, else a one-line reason.
"""

from __future__ import annotations

import math

import cuda.bindings.driver as cuda
import torch
from cutlass import cute
from cutlass.cute.runtime import from_dlpack

SMOKE_THREADS = 128


class SmokeKernel:
    """``out[i] = 2 * i + 1`` for one CTA: proves the DSL compiles, loads and launches here."""

    @cute.jit
    def __call__(self, out: cute.Tensor, stream: cuda.CUstream) -> None:
        self.kernel(out).launch(grid=[1, 1, 1], block=[SMOKE_THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, out: cute.Tensor) -> None:
        tidx, _, _ = cute.arch.thread_idx()
        out[tidx] = tidx * 2 + 1


def check_dsl() -> str | None:
    try:
        out = torch.full((SMOKE_THREADS,), -1, dtype=torch.int32, device="cuda")
        stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
        fn = cute.compile(SmokeKernel(), from_dlpack(out), stream)
        fn(from_dlpack(out), stream)
        torch.cuda.synchronize()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    want = torch.arange(SMOKE_THREADS, dtype=torch.int32, device="cuda") * 2 + 1
    if not torch.equal(out, want):
        return f"wrong result: {out[:8].tolist()} ... (want {want[:8].tolist()} ...)"
    return None


def check_mla_decode() -> str | None:
    """A small FP8 case (6 heads, 2 query tokens, shuffled pages) against the torch reference."""
    from kimi_kernels.mla_decode import mla_decode, mla_decode_reference  # noqa: PLC0415

    gen = torch.Generator(device="cuda").manual_seed(0)
    seq_lens = torch.tensor([70, 130], dtype=torch.int32, device="cuda")
    blocks = 6
    order = torch.randperm(blocks, generator=gen, device="cuda").to(torch.int32)
    table = torch.stack([order[:3], order[3:]])
    kv = torch.randn(blocks, 64, 576, generator=gen, device="cuda").to(torch.float8_e4m3fn)
    q = torch.randn(2, 2, 6, 576, generator=gen, device="cuda").to(torch.bfloat16)
    scale = 1.0 / math.sqrt(192.0)
    try:
        out, lse = mla_decode(q, kv, table, seq_lens, scale, 0.5)
        torch.cuda.synchronize()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    ref_out, ref_lse = mla_decode_reference(q, kv, table, seq_lens, scale, 0.5)
    out_err = (out.float() - ref_out).abs().max().item()
    lse_err = (lse - ref_lse).abs().max().item()
    if not (out_err <= 2e-2 and lse_err <= 1e-3):
        return (
            f"max |out - reference| = {out_err:.3g} (limit 2e-2), "
            f"max |lse - reference| = {lse_err:.3g} (limit 1e-3)"
        )
    return None
