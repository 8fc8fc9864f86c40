"""One tiny FP8 MLA decode through each attention core vLLM 0.33.0's fast path serves with,
called as vLLM calls it, compared with ``mla_decode_reference`` (docs/preflight.md).

The cores (``vllm/models/kimi_k3/nvidia/specialized_decode/cutedsl/mla/prepared.py``,
``PreparedMla.stock_core``): ``tokenspeed`` is ``tokenspeed_mla``'s FP8 decode through vLLM's
``stock_decode`` (``cutedsl/mla/dcp.py``), used below 16 rows, for speculative verify and under
DCP; ``trtllm`` is FlashInfer's trtllm-gen MLA decode through vLLM's ``trtllm_decode``, from 16
rows. tokenspeed quantizes the softmax probabilities P to FP8 e4m3 before the P·V MMA
(``tokenspeed_mla/mla_decode_fp8.py``), which on random data costs a few percent of relative
error. The case is built so that a correct kernel is exact up to the BF16 rounding of its
output: cache entries are ±1, each query row has four ±1 entries (two in the latent part, two in
RoPE), so every score is an even integer in [-4, 4], and a softmax scale of ln 2 makes every
probability relative to any score of the row a power of two in [2^-8, 2^8], which e4m3 holds
exactly. A wrong page, head, scale or mask, or an empty output, is off by far more than the bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kimi_kernels.mla_decode.config import HEAD_DIM, PAGE_SIZE, V_DIM
from kimi_kernels.mla_decode.reference import mla_decode_reference, relative_l2_per_row
from kimi_kernels.preflight.checks import CoreResult

MAX_ERROR = 1e-2  # per-row relative L2 error against the reference
HEADS = 12  # 96 heads over TP 8 (TP 16 has 6)
SEQ_LENS = (70, 200)  # request 0 ends inside its second page, request 1 inside its fourth
TABLE_WIDTH = 4  # tokenspeed's TMA reads page-table rows of an even number of int32s
SOFTMAX_SCALE = math.log(2.0)
# vLLM's split-KV bound when the deployment sets none (PreparedMla: ``max_context or 1 << 17``).
MAX_SEQ = 1 << 17
QUERY_ENTRIES = 2  # ±1 entries per query row in each of the latent and the RoPE part


@dataclass(frozen=True)
class Case:
    """vLLM's layout: ``q`` FP8 [batch, 1, heads, 576], ``kv`` FP8 [pages, 64, 576], ``table``
    int32 [batch, TABLE_WIDTH] (shuffled pages), ``seq_lens`` int32 [batch]."""

    q: torch.Tensor
    kv: torch.Tensor
    table: torch.Tensor
    seq_lens: torch.Tensor


Core = Callable[[Case], torch.Tensor]  # -> BF16 [batch, 1, heads, 512]


def _signs(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 2, shape, generator=gen).float() * 2 - 1


def tiny_case(device: torch.device | str) -> Case:
    """The same case on any device (drawn on the CPU, then moved)."""
    gen = torch.Generator().manual_seed(0)
    batch = len(SEQ_LENS)
    pages = batch * TABLE_WIDTH
    kv = _signs((pages, PAGE_SIZE, HEAD_DIM), gen)
    q = torch.zeros(batch, 1, HEADS, HEAD_DIM)
    for b in range(batch):
        for h in range(HEADS):
            latent = torch.randperm(V_DIM, generator=gen)[:QUERY_ENTRIES]
            rope = V_DIM + torch.randperm(HEAD_DIM - V_DIM, generator=gen)[:QUERY_ENTRIES]
            dims = torch.cat([latent, rope])
            q[b, 0, h, dims] = _signs((len(dims),), gen)
    table = torch.randperm(pages, generator=gen).to(torch.int32).reshape(batch, TABLE_WIDTH)
    fp8 = torch.float8_e4m3fn
    return Case(
        q=q.to(fp8).to(device),
        kv=kv.to(fp8).to(device),
        table=table.to(device),
        seq_lens=torch.tensor(SEQ_LENS, dtype=torch.int32, device=device),
    )


def reference(case: Case) -> torch.Tensor:
    out, _ = mla_decode_reference(case.q, case.kv, case.table, case.seq_lens, SOFTMAX_SCALE)
    return out


def verdict(core: str, out: torch.Tensor, ref: torch.Tensor) -> tuple[float, str | None]:
    """(worst per-row error, None or the one-line reason the core's output is wrong)."""
    if out.shape != ref.shape:
        return math.inf, f"{core}: output shape {list(out.shape)}, want {list(ref.shape)}"
    errors = relative_l2_per_row(out, ref).nan_to_num(math.inf)
    worst = float(errors.max())
    if worst <= MAX_ERROR:
        return worst, None
    b, j, h = (int(i) for i in torch.unravel_index(errors.argmax(), errors.shape))
    bad = int((errors > MAX_ERROR).sum())
    return worst, (
        f"{core}: relative L2 error {worst:.3g} (limit {MAX_ERROR:g}) at request {b}, query "
        f"token {j}, head {h}; {bad} of {errors.numel()} rows over the limit"
    )


def tokenspeed(case: Case) -> torch.Tensor:
    from vllm.models.kimi_k3.nvidia.specialized_decode.cutedsl.mla.dcp import (  # noqa: PLC0415
        fill_splits,
        stock_decode,
    )

    batch, q_len, heads, _ = case.q.shape
    out = torch.empty(batch, q_len, heads, V_DIM, dtype=torch.bfloat16, device=case.q.device)
    split = fill_splits(batch * q_len, case.q.device)
    kv, scales = case.kv.view(torch.uint8), (SOFTMAX_SCALE, 1.0)
    stock_decode(case.q, kv, case.table, case.seq_lens, MAX_SEQ, scales, out, None, split)
    return out


def trtllm(case: Case) -> torch.Tensor:
    from vllm.models.kimi_k3.nvidia.specialized_decode.cutedsl.mla.prepared import (  # noqa: PLC0415
        trtllm_decode,
    )

    batch, q_len, heads, _ = case.q.shape
    out = torch.empty(batch, q_len, heads, V_DIM, dtype=torch.bfloat16, device=case.q.device)
    kv = case.kv.view(torch.uint8)
    trtllm_decode(case.q, kv, case.table, case.seq_lens, MAX_SEQ, (SOFTMAX_SCALE, 1.0), out)
    return out


CORES: dict[str, Core] = {"tokenspeed": tokenspeed, "trtllm": trtllm}


def check_cores(
    device: torch.device | str, cores: dict[str, Core] = CORES
) -> tuple[CoreResult, ...]:
    """Each core run once on ``device`` and judged against the reference."""
    case = tiny_case(device)
    ref = reference(case)
    results = []
    for name, core in cores.items():
        try:
            out = core(case)
            if out.is_cuda:
                torch.cuda.synchronize(out.device)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
            results.append(CoreResult(name, None, f"{name}: {reason}"))
            continue
        error, problem = verdict(name, out, ref)
        results.append(CoreResult(name, error, problem))
    return tuple(results)
