"""The preflight's decode through vLLM's MLA attention cores (kimi_kernels.preflight.attention):
the case, the comparison and the verdicts on the CPU with stand-in cores; vLLM's real cores on
an SM100/SM103 GPU."""

from __future__ import annotations

import math

import pytest
import torch

from kimi_kernels.mla_decode.config import V_DIM
from kimi_kernels.mla_decode.reference import gather_kv, mla_decode_reference
from kimi_kernels.preflight.attention import (
    MAX_ERROR,
    SOFTMAX_SCALE,
    Case,
    check_cores,
    reference,
    tiny_case,
    verdict,
)
from kimi_kernels.preflight.checks import CoreResult

FP8 = torch.float8_e4m3fn


def fp8_kernel(case: Case, scale: float = SOFTMAX_SCALE, stale_max: bool = False) -> torch.Tensor:
    """What an FP8 MLA decode kernel computes (tokenspeed_mla/mla_decode_fp8.py): FP32 scores of
    FP8 Q and K, P = exp2((s - m) * scale * log2 e) quantized to e4m3 before the P·V MMA, FP32
    row sums of the unquantized P, BF16 output. ``stale_max``: m lags the row max (the kernel
    skips rescaling while the max grew by at most 8 in log2 units)."""
    batch, q_len, heads, _ = case.q.shape
    out = torch.zeros(batch, q_len, heads, V_DIM)
    for b, n in enumerate(case.seq_lens.tolist()):
        kv = gather_kv(case.kv, case.table, b, n, 1.0)
        s = torch.einsum("jhd,sd->jhs", case.q[b].float(), kv)
        m = s.amin(-1, keepdim=True) if stale_max else s.amax(-1, keepdim=True)
        p = torch.exp2((s - m) * scale * math.log2(math.e))
        pv = torch.einsum("jhs,sd->jhd", p.to(FP8).float(), kv[:, :V_DIM])
        out[b] = pv / p.sum(-1, keepdim=True)
    return out.to(torch.bfloat16)


@pytest.fixture(scope="module")
def case() -> Case:
    return tiny_case("cpu")


@pytest.fixture(scope="module")
def ref(case: Case) -> torch.Tensor:
    return reference(case)


def test_the_case(case: Case) -> None:
    """vLLM's layout and dtypes; shuffled distinct pages in rows of an even width; every score
    an even integer in [-4, 4], so that ln 2 scaling makes every P a power of two."""
    assert case.q.dtype == case.kv.dtype == FP8
    assert case.q.shape == (2, 1, 12, 576)
    assert case.kv.shape == (8, 64, 576)
    assert case.table.dtype == case.seq_lens.dtype == torch.int32
    assert case.table.shape[1] % 2 == 0
    assert sorted(case.table.flatten().tolist()) == list(range(8))
    assert case.table.flatten().tolist() != list(range(8))
    assert set(torch.unique(case.kv.float()).tolist()) == {-1.0, 1.0}
    for b, n in enumerate(case.seq_lens.tolist()):
        kv = gather_kv(case.kv, case.table, b, n, 1.0)
        scores = torch.einsum("jhd,sd->jhs", case.q[b].float(), kv)
        assert set(torch.unique(scores).tolist()) <= {-4.0, -2.0, 0.0, 2.0, 4.0}
    assert torch.equal(tiny_case("cpu").q.view(torch.uint8), case.q.view(torch.uint8))


@pytest.mark.parametrize("stale_max", [False, True])
def test_an_fp8_kernel_is_exact_on_it_up_to_bf16(
    case: Case, ref: torch.Tensor, stale_max: bool
) -> None:
    error, problem = verdict("fp8", fp8_kernel(case, stale_max=stale_max), ref)
    assert problem is None
    assert error == verdict("bf16", ref.to(torch.bfloat16), ref)[0]
    assert error < MAX_ERROR / 4


def test_on_random_data_the_same_kernel_misses_the_bound(case: Case) -> None:
    """Why the case is built so: random FP8 data costs an FP8-P kernel more than the bound."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(case.q.shape, generator=gen).to(FP8)
    kv = torch.randn(case.kv.shape, generator=gen).to(FP8)
    noisy = Case(q, kv, case.table, case.seq_lens)
    scale = 1 / math.sqrt(192)
    want, _ = mla_decode_reference(q, kv, case.table, case.seq_lens, scale)
    error, problem = verdict("fp8", fp8_kernel(noisy, scale), want)
    assert error > MAX_ERROR
    assert problem is not None


def test_a_zero_output_scores_one(ref: torch.Tensor) -> None:
    assert verdict("tokenspeed", torch.zeros_like(ref, dtype=torch.bfloat16), ref) == (
        1.0,
        "tokenspeed: relative L2 error 1 (limit 0.01) at request 0, query token 0, head 0; "
        "24 of 24 rows over the limit",
    )


def test_one_wrong_row_is_named(ref: torch.Tensor) -> None:
    out = ref.clone()
    out[1, 0, 5] = ref[1, 0, 4]
    error, problem = verdict("trtllm", out, ref)
    assert error > 0.5
    assert problem is not None
    assert problem.endswith("at request 1, query token 0, head 5; 1 of 24 rows over the limit")


def test_nan_and_shape(ref: torch.Tensor) -> None:
    out = ref.clone()
    out[0, 0, 3, 7] = math.nan
    error, problem = verdict("tokenspeed", out, ref)
    assert error == math.inf
    assert problem is not None
    assert "at request 0, query token 0, head 3; 1 of 24 rows" in problem
    assert verdict("tokenspeed", ref[:, :, :6], ref) == (
        math.inf,
        "tokenspeed: output shape [2, 1, 6, 512], want [2, 1, 12, 512]",
    )


def _pages_in_order(case: Case) -> torch.Tensor:
    """A core that ignores the page table."""
    table = torch.arange(case.table.numel(), dtype=torch.int32).reshape(case.table.shape)
    return fp8_kernel(Case(case.q, case.kv, table, case.seq_lens))


def _broken(_: Case) -> torch.Tensor:
    raise RuntimeError("tokenspeed_mla requires PyTorch, CUDA bindings\nand more")


def test_check_cores_judges_each_core() -> None:
    results = check_cores(
        "cpu",
        {
            "fp8": fp8_kernel,
            "wrong-scale": lambda c: fp8_kernel(c, scale=1 / math.sqrt(192)),
            "pages-in-order": _pages_in_order,
            "broken": _broken,
        },
    )
    assert [(r.core, r.problem is None) for r in results] == [
        ("fp8", True),
        ("wrong-scale", False),
        ("pages-in-order", False),
        ("broken", False),
    ]
    errors = [r.error for r in results]
    assert errors[0] is not None
    assert errors[0] < MAX_ERROR / 4
    assert errors[1] is not None
    assert errors[1] > 0.1
    assert errors[2] is not None
    assert errors[2] > 0.1
    assert results[3] == CoreResult(
        "broken", None, "broken: RuntimeError: tokenspeed_mla requires PyTorch, CUDA bindings"
    )


def _sm100_family() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10


@pytest.mark.gpu
@pytest.mark.skipif(not _sm100_family(), reason="vLLM's MLA cores need an SM100/SM103 GPU")
def test_vllms_cores_on_this_gpu() -> None:
    results = check_cores("cuda")
    assert [r.core for r in results] == ["tokenspeed", "trtllm"]
    for result in results:
        assert result.problem is None, result
        assert result.error is not None, result
        assert result.error < MAX_ERROR / 4, result
