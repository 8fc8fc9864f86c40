"""The step model against schedules worked out by hand (the arithmetic is in each test)."""

import pytest

from kimi_operator.bench.profiles import PlannedRequest
from kimi_operator.plan.costs import DecodeCost, PrefillCost, StepCosts
from kimi_operator.plan.engine import EngineSpec
from kimi_operator.plan.simulate import Outcome, Topology, simulate

# Round numbers, so the schedules below can be added up by hand.
PREFILL = PrefillCost(fixed_s=0.010, per_token_s=0.001)
ORDINARY = DecodeCost(fixed_s=0.020, per_sequence_s=0.004, per_context_token_s=0.00001)
FAST = DecodeCost(fixed_s=0.010, per_sequence_s=0.001, per_context_token_s=0.0)
LATENCY = StepCosts(ordinary=ORDINARY, prefill=PREFILL, fast=FAST)
STOCK = StepCosts(ordinary=ORDINARY, prefill=PREFILL)


def request(index: int, prompt: int, output: int, start: float = 0.0, **more: object) -> PlannedRequest:
    return PlannedRequest(index, start, prompt, output, **more)  # type: ignore[arg-type]


def run(plan: list[PlannedRequest], spec: EngineSpec, closed: bool = False) -> Outcome:
    return simulate(plan, Topology(groups=[spec]), closed=closed)


def test_a_single_request_on_the_ordinary_path() -> None:
    outcome = run([request(0, prompt=100, output=4)], EngineSpec(STOCK, max_num_seqs=8))
    (live,) = outcome.lives
    # Prefill alone: 0.010 + 100 x 0.001 = 0.110. Then one decode step per token, context =
    # 100 prompt + tokens so far: 0.020 + 0.00001 x 101 = 0.02101, then 0.02102, 0.02103.
    assert live.token_times == pytest.approx([0.110, 0.13101, 0.15203, 0.17306])
    assert live.token_counts == [1, 1, 1, 1]
    assert live.finished_s == pytest.approx(0.17306)
    assert (outcome.decode_steps, outcome.fast_steps) == (3, 0)


def test_a_single_request_on_the_fast_path() -> None:
    outcome = run([request(0, prompt=100, output=4)], EngineSpec(LATENCY, max_num_seqs=8))
    (live,) = outcome.lives
    # Prefill 0.110 (a prefill step never runs the fast path), then 0.010 per pure decode step.
    assert live.token_times == pytest.approx([0.110, 0.120, 0.130, 0.140])
    assert (outcome.decode_steps, outcome.fast_steps) == (3, 3)


def test_a_prefill_that_lands_in_another_requests_decode() -> None:
    a = request(0, prompt=100, output=5)
    b = request(1, prompt=50, output=2, start=0.115)  # during A's first decode step
    outcome = run([a, b], EngineSpec(LATENCY, max_num_seqs=8))
    first, second = outcome.lives
    # 0 -> 0.110: A's prefill; A's token 1.
    # 0.110 -> 0.120: A decodes on the fast path (B is not there yet); A's token 2.
    # 0.120 -> 0.19102: B's prefill rides along with A's decode, so the step is mixed and
    #   ordinary: 0.020 + 0.00001 x 102 (A's context) + 50 x 0.001 = 0.07102. A's token 3,
    #   B's first token (TTFT 0.19102 - 0.115 = 0.07602).
    # 0.19102 -> 0.20202: both decode, 2 tokens <= 64, fast: 0.010 + 0.001 x 1 = 0.011.
    # 0.20202 -> 0.21202: A alone, fast.
    assert first.token_times == pytest.approx([0.110, 0.120, 0.19102, 0.20202, 0.21202])
    assert second.sent_s == pytest.approx(0.115)
    assert second.token_times == pytest.approx([0.19102, 0.20202])
    assert second.token_times[0] - second.sent_s == pytest.approx(0.07602)
    # Decode steps: the four after A's prefill; all but the mixed one on the fast path.
    assert (outcome.decode_steps, outcome.fast_steps) == (4, 3)


def drafted(count: int) -> Outcome:
    plan = [request(i, prompt=10, output=15) for i in range(count)]
    spec = EngineSpec(LATENCY, max_num_seqs=16, draft_tokens=7, acceptance=6.0)
    return run(plan, spec)


def test_a_batch_that_overflows_64_tokens_runs_the_ordinary_path() -> None:
    outcome = drafted(9)
    # 9 prompts of 10 in one prefill step: 0.010 + 90 x 0.001 = 0.100; 1 token each.
    # 9 x (1 + 7 drafts) = 72 tokens > 64: ordinary. Step 1: 0.020 + 8 x 0.004 + 0.00001 x
    # 9 x (10 + 1) = 0.05299, 7 tokens each (1 + 6 accepted). Step 2: context 9 x (10 + 8):
    # 0.05362, the last 7 tokens.
    for live in outcome.lives:
        assert live.token_times == pytest.approx([0.100, 0.15299, 0.20661])
        assert live.token_counts == [1, 7, 7]
    assert (outcome.decode_steps, outcome.fast_steps) == (2, 0)


def test_a_batch_of_64_tokens_runs_the_fast_path() -> None:
    outcome = drafted(8)
    # 8 x 8 = 64 tokens: fast, 0.010 + 7 x 0.001 = 0.017 a step after the 0.090 prefill.
    for live in outcome.lives:
        assert live.token_times == pytest.approx([0.090, 0.107, 0.124])
    assert (outcome.decode_steps, outcome.fast_steps) == (2, 2)


def test_fractional_acceptance_carries_over_between_steps() -> None:
    spec = EngineSpec(LATENCY, max_num_seqs=8, draft_tokens=3, acceptance=2.5)
    (live,) = run([request(0, prompt=10, output=10)], spec).lives
    # 1 at prefill, then 3.5 a step: totals 4.5, 8, 10 (capped): whole tokens 4, 8, 10.
    assert live.token_counts == [1, 3, 4, 2]


def test_a_closed_turn_waits_for_its_answer_and_reuses_the_cached_prefix() -> None:
    first = request(0, prompt=100, output=2, group="g", shared_prefix_tokens=80, task="t")
    second = request(
        1, prompt=120, output=1, group="g", shared_prefix_tokens=100, task="t", after=(0,),
        think_s=1.0,
    )
    a, b = run([first, second], EngineSpec(LATENCY, max_num_seqs=8), closed=True).lives
    # First: prefill 0.110, one fast decode step 0.010: done at 0.120.
    assert a.finished_s == pytest.approx(0.120)
    # Second: sent 1.0 s after that answer; 80 of its 100 shared tokens are cached (5 whole
    # 16-token blocks), so it computes 40: 0.010 + 0.040 = 0.050.
    assert b.sent_s == pytest.approx(1.120)
    assert b.token_times == pytest.approx([1.170])


def test_without_prefix_caching_the_whole_prompt_is_computed() -> None:
    first = request(0, prompt=100, output=1, group="g", shared_prefix_tokens=100)
    second = request(1, prompt=100, output=1, start=1.0, group="g", shared_prefix_tokens=100)
    spec = EngineSpec(LATENCY, max_num_seqs=8, prefix_caching=False)
    _, b = run([first, second], spec).lives
    assert b.token_times == pytest.approx([1.110])
    _, cached = run([first, second], EngineSpec(LATENCY, max_num_seqs=8)).lives
    # Cached: 99 of 100 at most (the last prompt token is always computed), 96 in whole
    # blocks: 4 tokens, 0.014.
    assert cached.token_times == pytest.approx([1.014])


def test_chunked_prefill_and_the_sequence_limit() -> None:
    plan = [request(0, prompt=300, output=1), request(1, prompt=10, output=1)]
    spec = EngineSpec(STOCK, max_num_seqs=1, max_batched_tokens=200)
    a, b = run(plan, spec).lives
    # A's prompt in chunks of 200 and 100 (0.210, 0.110); B waits for A's seat: 0.020.
    assert a.token_times == pytest.approx([0.320])
    assert b.token_times == pytest.approx([0.340])


def test_disaggregated_prefill_hands_over_after_the_transfer() -> None:
    prefill = EngineSpec(STOCK, max_num_seqs=8, role="prefill")
    decode = EngineSpec(LATENCY, max_num_seqs=8, role="decode")
    topology = Topology(groups=[decode], prefill_groups=[prefill], kv_transfer_s=0.005)
    outcome = simulate([request(0, prompt=100, output=3)], topology, closed=False)
    (live,) = outcome.lives
    # Prefill 0.110 on the prefill group, KV arrives 0.005 later with the first token; the
    # decode group then decodes alone on the fast path: 0.010 a step.
    assert live.token_times == pytest.approx([0.115, 0.125, 0.135])
    assert (outcome.decode_steps, outcome.fast_steps) == (2, 2)


def test_round_robin_and_prefix_routing() -> None:
    plan = [
        request(i, prompt=100, output=1, start=float(i), group="g", shared_prefix_tokens=100)
        for i in range(3)
    ]
    spec = EngineSpec(STOCK, max_num_seqs=8)
    sticky = simulate(plan, Topology(groups=[spec, spec], routing="prefix"), closed=False)
    spread = simulate(plan, Topology(groups=[spec, spec], routing="round-robin"), closed=False)
    # By prefix: one group serves all three; the second and third hit 96 cached tokens (0.014).
    assert [live.token_times[0] - live.sent_s for live in sticky.lives] == pytest.approx(
        [0.110, 0.014, 0.014]
    )
    # Round robin: the second lands on the other group, whose cache is empty.
    assert [live.token_times[0] - live.sent_s for live in spread.lives] == pytest.approx(
        [0.110, 0.110, 0.014]
    )
