"""The GPU check's pass/fail rule (check.verdict on needle inputs) proven on the CPU against the
kernels' schedule twin: it passes the correct schedule and fails each injected bug, including
errors that touch a handful of positions in a 128K context. Also the masked-NaN and DCP behaviour
the kernel implements, through the same twin and the reference."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch

from kimi_kernels.mla_decode import merge_partials, mla_decode_reference
from kimi_kernels.mla_decode.check import (
    make_inputs,
    needle_positions,
    plant_needles,
    verdict,
)
from kimi_kernels.mla_decode.config import PAGE_SIZE, choose_config, choose_num_splits, local_count
from kimi_kernels.mla_decode.reference import global_positions, relative_l2_per_row
from tests.kimi_kernels.mla_decode.schedule_twin import twin_decode

Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
Case = tuple[Inputs, int, tuple[torch.Tensor, torch.Tensor]]  # inputs, splits, reference
SCALE = 1.0 / math.sqrt(192.0)
KV_SCALE = 0.5
# Bugs a correct-looking output can hide (unguarded_pv needs NaN in the cache: its own test).
SILENT_BUGS = ("no_rescale", "combine_exp", "split_edge", "page_off_by_one", "causal_off_by_one")


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Small tensors: one thread is 16x faster than a thread pool on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def needle_case(heads: int, q_len: int, seq_lens: list[int], seed: int) -> tuple[Inputs, int]:
    """Sharp inputs (q x 2) with needles planted where the heuristic's splits begin and end."""
    gen = torch.Generator().manual_seed(seed)
    inputs = make_inputs(gen, heads, q_len, seq_lens, torch.float8_e4m3fn, q_scale=2.0)
    q, kv, table, _ = inputs
    config = choose_config("fp8_e4m3", heads * q_len)
    splits = choose_num_splits(len(seq_lens), heads * q_len, max(seq_lens), config, 132)
    for b, n in enumerate(seq_lens):
        pairs = needle_positions(n, q_len, splits)
        plant_needles(gen, q, kv, table, b, pairs, (SCALE, KV_SCALE))
    return inputs, splits


@pytest.fixture(scope="module")
def long_case() -> Case:
    """One 128K request (6 heads, 2 tokens): a page is 0.05% of it, a split's edge 0.001%."""
    inputs, splits = needle_case(6, 2, [131072], seed=5)
    return inputs, splits, mla_decode_reference(*inputs, SCALE, KV_SCALE)


@pytest.fixture(scope="module")
def short_case() -> Case:
    """Three requests of different lengths, 12 heads x 4 tokens (several row groups)."""
    inputs, splits = needle_case(12, 4, [1000, 200, 4], seed=6)
    return inputs, splits, mla_decode_reference(*inputs, SCALE, KV_SCALE)


@pytest.mark.parametrize(
    ("seq_lens", "q_len", "heads", "num_splits"),
    [
        ([1], 1, 6, 1),
        ([63, 8], 8, 6, 2),
        ([65], 8, 12, 4),
        ([100, 30], 8, 6, 16),
        ([1000], 3, 12, 7),
    ],
)
def test_twin_matches_the_reference(
    seq_lens: list[int], q_len: int, heads: int, num_splits: int
) -> None:
    """The twin is the kernels' algorithm: float32 agreement with the reference, empty splits,
    row groups and requests of different lengths included."""
    gen = torch.Generator().manual_seed(sum(seq_lens) * 31 + num_splits)
    inputs = make_inputs(gen, heads, q_len, seq_lens, torch.float8_e4m3fn)
    out, lse = twin_decode(*inputs, SCALE, 0.75, num_splits=num_splits)
    want_out, want_lse = mla_decode_reference(*inputs, SCALE, 0.75)
    torch.testing.assert_close(out, want_out, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lse, want_lse, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("case", ["long_case", "short_case"])
def test_verdict_passes_the_correct_schedule(case: str, request: pytest.FixtureRequest) -> None:
    fixture: Case = request.getfixturevalue(case)
    inputs, splits, (ref_out, ref_lse) = fixture
    out, lse = twin_decode(*inputs, SCALE, KV_SCALE, num_splits=splits)
    result = verdict(out.to(torch.bfloat16), lse, ref_out, ref_lse)  # the kernel writes bf16
    print(f"\n{case} correct: {result}")  # kernels/NOTES.md's table (pytest -s)
    assert result["ok"], result
    assert result["max_rel_l2"] < 5e-3  # bf16 rounding, well inside the bound


@pytest.mark.parametrize("bug", SILENT_BUGS)
@pytest.mark.parametrize("case", ["long_case", "short_case"])
def test_verdict_fails_each_injected_bug(
    case: str, bug: str, request: pytest.FixtureRequest
) -> None:
    fixture: Case = request.getfixturevalue(case)
    inputs, splits, (ref_out, ref_lse) = fixture
    if bug == "causal_off_by_one" and inputs[0].shape[1] == 1:
        pytest.skip("one token: nothing past the limit")
    out, lse = twin_decode(*inputs, SCALE, KV_SCALE, num_splits=splits, bug=bug)
    result = verdict(out.to(torch.bfloat16), lse, ref_out, ref_lse)
    print(f"\n{case} {bug}: {result}")
    assert not result["ok"], (bug, result)
    assert result["max_rel_l2"] > 0.05, (bug, result)  # not a borderline failure


def test_a_needle_dominates_its_row_and_stays_out_of_rows_that_cannot_see_it() -> None:
    """What the check relies on: a visible needle carries most of its row's attention; one past
    token 0's causal limit, aimed at it (a leaked mask would hand it the row), leaves token 0's
    output exactly as it was."""
    gen = torch.Generator().manual_seed(7)
    q, kv, table, lens = make_inputs(gen, 6, 3, [500], torch.float8_e4m3fn, q_scale=2.0)
    plant_needles(gen, q, kv, table, 0, [(300, 0)], (SCALE, KV_SCALE))
    before, _ = mla_decode_reference(q, kv, table, lens, SCALE, KV_SCALE)
    key = kv[int(table[0, 300 // PAGE_SIZE]), 300 % PAGE_SIZE].float() * KV_SCALE
    assert float(q[0, 0, 0].float() @ key) * SCALE == pytest.approx(24.0, rel=0.05)
    assert float(relative_l2_per_row(before[0, 0, 0], key[:512])) < 0.05
    plant_needles(gen, q, kv, table, 0, [(498, 0)], (SCALE, KV_SCALE))  # token 0 sees <= 497
    after, _ = mla_decode_reference(q, kv, table, lens, SCALE, KV_SCALE)
    hidden = kv[int(table[0, 498 // PAGE_SIZE]), 498 % PAGE_SIZE].float() * KV_SCALE
    assert float(q[0, 0, 0].float() @ hidden) * SCALE == pytest.approx(24.0, rel=0.05)
    assert torch.equal(after[0, 0], before[0, 0])


def test_relative_l2_scores_a_zero_output_one() -> None:
    ref = torch.randn(3, 512, generator=torch.Generator().manual_seed(0))
    assert torch.equal(
        relative_l2_per_row(torch.zeros(3, 512), ref), torch.ones(3, dtype=torch.float64)
    )
    # `ref * 1.01` rounds each element to float32 (about 6e-8 relative): 0.01 to within 1e-5,
    # not pytest.approx's default 1e-6, which a clean-clone CI run's random draw missed.
    scaled = float(relative_l2_per_row(ref * 1.01, ref).max())
    assert scaled == pytest.approx(0.01, rel=1e-5)


def test_masked_nan_rows_do_not_reach_rows_that_cannot_see_them() -> None:
    """A NaN cache row at the last position (visible only to the last draft token): every other
    token's output stays finite and right in the reference and the twin; multiplying the masked V
    by 0 instead of skipping it (the former kernel) turns those rows into NaN."""
    gen = torch.Generator().manual_seed(8)
    q, kv, table, lens = make_inputs(gen, 6, 4, [100], torch.float8_e4m3fn)
    clean, _ = mla_decode_reference(q, kv, table, lens, SCALE, KV_SCALE)
    last = 99
    kv[int(table[0, last // PAGE_SIZE]), last % PAGE_SIZE] = float("nan")
    ref_out, _ = mla_decode_reference(q, kv, table, lens, SCALE, KV_SCALE)
    torch.testing.assert_close(ref_out[0, :3], clean[0, :3], atol=0, rtol=0)
    assert torch.isnan(ref_out[0, 3]).all()  # the last token does see it
    out, _ = twin_decode(q, kv, table, lens, SCALE, KV_SCALE, num_splits=2)
    torch.testing.assert_close(out[0, :3], ref_out[0, :3], atol=1e-4, rtol=1e-4)
    bad, _ = twin_decode(q, kv, table, lens, SCALE, KV_SCALE, num_splits=2, bug="unguarded_pv")
    assert torch.isnan(bad[0, :3]).all()


def shard(
    kv: torch.Tensor, table: torch.Tensor, total: int, dcp: tuple[int, int, int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s DCP shard of request 0's first ``total`` positions: its own cache (pages
    in reverse physical order) and block table, and its local length."""
    n = local_count(total, *dcp)
    rows = kv[table[0].long()].reshape(-1, kv.shape[-1])[global_positions(n, dcp, kv.device)]
    pages = max(1, -(-n // PAGE_SIZE))
    local = torch.zeros(pages * PAGE_SIZE, kv.shape[-1], dtype=kv.dtype)
    local[:n] = rows
    local = local.reshape(pages, PAGE_SIZE, -1).flip(0)
    local_table = torch.arange(pages - 1, -1, -1, dtype=torch.int32)[None]
    return local, local_table, torch.tensor([n], dtype=torch.int32)


@pytest.mark.parametrize(("world", "interleave"), [(4, 1), (2, 64), (8, 16)])
def test_dcp_shards_merge_to_the_unsharded_result(world: int, interleave: int) -> None:
    """Draft tokens under DCP: every rank's masked partial (global positions, as vLLM passes
    totals and (world, rank, interleave)) merged by LSE equals attention over the whole cache;
    the twin (the kernel's local-limit arithmetic) matches the reference on every rank."""
    total, q_len = 333, 4
    gen = torch.Generator().manual_seed(world * 100 + interleave)
    q, kv, table, lens = make_inputs(gen, 6, q_len, [total], torch.float8_e4m3fn)
    want_out, want_lse = mla_decode_reference(q, kv, table, lens, SCALE, KV_SCALE)
    outs, lses = [], []
    totals = torch.tensor([total], dtype=torch.int32)
    for rank in range(world):
        dcp = (world, rank, interleave)
        local, local_table, local_len = shard(kv, table, total, dcp)
        if int(local_len) < q_len:
            continue  # vLLM's local lengths can be shorter than q_len; the kernels require q_len
        out, lse = mla_decode_reference(
            q, local, local_table, local_len, SCALE, KV_SCALE, totals=totals, dcp=dcp
        )
        twin = twin_decode(
            q, local, local_table, local_len, SCALE, KV_SCALE, num_splits=3, totals=totals, dcp=dcp
        )
        torch.testing.assert_close(twin[0], out, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(twin[1], lse, atol=1e-4, rtol=1e-4)
        outs.append(out)
        lses.append(lse)
    merged_out, merged_lse = merge_partials(torch.stack(outs), torch.stack(lses))
    torch.testing.assert_close(merged_out, want_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(merged_lse, want_lse, atol=1e-5, rtol=1e-5)
