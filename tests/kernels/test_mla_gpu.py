"""mla_decode on a GPU against the torch reference (skipped without an NVIDIA GPU).

The full sweep and the timings are ``benchmarks/mla_decode_gpu.py``; this is the quick check.
"""

from __future__ import annotations

import math

import pytest
import torch

from kimi_kernels.mla_decode import mla_decode, mla_decode_reference
from tests.kernels.mla_inputs import make_inputs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]
SCALE = 1.0 / math.sqrt(192.0)


def _poison_allocator() -> None:
    """Fill freed memory with NaN (small and large pools) so that torch.empty in mla_decode hands
    back poisoned buffers."""
    small = [torch.full((1 << 18,), float("nan"), device="cuda") for _ in range(32)]
    large = torch.full((64 << 20,), float("nan"), device="cuda")
    del small, large


@pytest.mark.parametrize("kv_dtype", [torch.float8_e4m3fn, torch.bfloat16])
@pytest.mark.parametrize(
    ("heads", "q_len", "seq_lens", "num_splits"),
    [
        (6, 1, [1], None),
        (12, 8, [63, 64, 65], None),
        (96, 8, [1000], 5),
        (6, 4, [8192, 17], 16),
    ],
)
def test_matches_reference(kv_dtype, heads, q_len, seq_lens, num_splits):
    gen = torch.Generator().manual_seed(sum(seq_lens) + heads)
    q, kv, table, lens = (
        t.cuda() for t in make_inputs(gen, heads, q_len, seq_lens, kv_dtype, spare_blocks=5)
    )
    _poison_allocator()
    out, lse = mla_decode(q, kv, table, lens, SCALE, 0.5, num_splits=num_splits)
    torch.cuda.synchronize()
    ref_out, ref_lse = mla_decode_reference(q, kv, table, lens, SCALE, 0.5)
    assert out.dtype == torch.bfloat16
    assert lse.dtype == torch.float32
    torch.testing.assert_close(out.float(), ref_out, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-3)
