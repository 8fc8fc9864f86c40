"""The preflight's CuTe DSL smoke kernel: ``None`` when it compiled, ran and was right, else a
one-line reason."""

from __future__ import annotations

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
