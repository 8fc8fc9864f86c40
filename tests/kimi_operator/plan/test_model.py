"""The step model against schedules worked out by hand (the arithmetic is in each test)."""

import pytest

from kimi_operator.bench.profiles import PlannedRequest
from kimi_operator.bench.results import TraceInfo
from kimi_operator.plan.calibration import Calibration
from kimi_operator.plan.configs import Configuration
from kimi_operator.plan.costs import DecodeCost, PrefillCost, StepCosts
from kimi_operator.plan.engine import EngineSpec
from kimi_operator.plan.predict import Workload, predict
from kimi_operator.plan.simulate import Outcome, Topology, simulate

# Round numbers, so the schedules below can be added up by hand. A lone request's TTFT is 0.030 +
# 0.001 per prompt token: 0.020 of it a step's fixed cost (the ordinary decode step's), 0.010 its
# way into the server, which delays its arrival at the scheduler.
PREFILL = PrefillCost(fixed_s=0.030, per_token_s=0.001)
ORDINARY = DecodeCost(fixed_s=0.020, per_sequence_s=0.004, per_context_token_s=0.00001)
FAST = DecodeCost(fixed_s=0.010, per_sequence_s=0.001, per_context_token_s=0.0)
LATENCY = StepCosts(ordinary=ORDINARY, prefill=PREFILL, fast=FAST)
STOCK = StepCosts(ordinary=ORDINARY, prefill=PREFILL)


def request(
    index: int, prompt: int, output: int, start: float = 0.0, **more: object
) -> PlannedRequest:
    return PlannedRequest(index, start, prompt, output, **more)  # type: ignore[arg-type]


def run(plan: list[PlannedRequest], spec: EngineSpec, closed: bool = False) -> Outcome:
    return simulate(plan, Topology(groups=[spec]), closed=closed)


def test_a_single_request_on_the_ordinary_path() -> None:
    outcome = run([request(0, prompt=100, output=4)], EngineSpec(STOCK, max_num_seqs=8))
    (live,) = outcome.lives
    # At the scheduler at 0.010; prefill alone: 0.020 + 100 x 0.001 = 0.120, to 0.130. Then one
    # decode step per token, context = 100 prompt + tokens so far: 0.020 + 0.00001 x 101 =
    # 0.02101, then 0.02102, 0.02103.
    assert live.token_times == pytest.approx([0.130, 0.15101, 0.17203, 0.19306])
    assert live.token_counts == [1, 1, 1, 1]
    assert live.finished_s == pytest.approx(0.19306)
    assert (outcome.decode_steps, outcome.fast_steps) == (3, 0)


def test_a_single_request_on_the_fast_path() -> None:
    outcome = run([request(0, prompt=100, output=4)], EngineSpec(LATENCY, max_num_seqs=8))
    (live,) = outcome.lives
    # First token at 0.130 (a prefill step never runs the fast path), then 0.010 per pure
    # decode step.
    assert live.token_times == pytest.approx([0.130, 0.140, 0.150, 0.160])
    assert (outcome.decode_steps, outcome.fast_steps) == (3, 3)


def test_a_prefill_that_lands_in_another_requests_decode() -> None:
    a = request(0, prompt=100, output=5)
    b = request(1, prompt=50, output=2, start=0.125)  # at the scheduler during A's first decode
    outcome = run([a, b], EngineSpec(LATENCY, max_num_seqs=8))
    first, second = outcome.lives
    # 0.010 -> 0.130: A's prefill; A's token 1.
    # 0.130 -> 0.140: A decodes on the fast path (B reaches the scheduler at 0.135); token 2.
    # 0.140 -> 0.21102: B's prefill rides along with A's decode, so the step is mixed and
    #   ordinary: 0.020 + 0.00001 x 102 (A's context) + 50 x 0.001 = 0.07102. A's token 3,
    #   B's first token (TTFT 0.21102 - 0.125 = 0.08602).
    # 0.21102 -> 0.22202: both decode, 2 tokens <= 64, fast: 0.010 + 0.001 x 1 = 0.011.
    # 0.22202 -> 0.23202: A alone, fast.
    assert first.token_times == pytest.approx([0.130, 0.140, 0.21102, 0.22202, 0.23202])
    assert second.sent_s == pytest.approx(0.125)
    assert second.token_times == pytest.approx([0.21102, 0.22202])
    assert second.token_times[0] - second.sent_s == pytest.approx(0.08602)
    # Decode steps: the four after A's prefill; all but the mixed one on the fast path.
    assert (outcome.decode_steps, outcome.fast_steps) == (4, 3)


def test_each_running_request_lengthens_a_new_ones_way_in() -> None:
    a = request(0, prompt=100, output=5)
    b = request(1, prompt=50, output=2, start=0.125)
    costs = StepCosts(ordinary=ORDINARY, prefill=PREFILL, per_stream_s=0.020)
    first, second = run([a, b], EngineSpec(costs, max_num_seqs=8)).lives
    # A arrives with nothing running: at the scheduler at 0.010, token 1 at 0.130; its first
    # decode step, 0.020 + 0.00001 x 101, ends at 0.15101. B arrives at 0.125 with A running: its
    # way in is 0.010 + 0.020 = 0.030, to 0.155, so it misses the step that starts at 0.15101
    # (A alone, context 102: to 0.17203) and rides along with the next: 0.020 + 0.00103 +
    # 50 x 0.001 = 0.07103, to 0.24306. TTFT 0.11806 (without the term: 0.09703, at 0.22203).
    assert first.token_times[:4] == pytest.approx([0.130, 0.15101, 0.17203, 0.24306])
    assert second.token_times[0] - second.sent_s == pytest.approx(0.11806)


def test_a_step_of_a_token_count_not_run_lately_costs_more() -> None:
    """vLLM's CPU build makes a matmul for each token count it meets and keeps the last 32."""
    costs = StepCosts(ordinary=ORDINARY, prefill=PREFILL, new_shape_s=0.005)
    spec = EngineSpec(costs, max_num_seqs=8)
    # One after the other, each answered before the next arrives: 100 tokens (new), 100 again
    # (kept), 33 other counts, then 100 (pushed out by them: new again).
    counts = [100, 100, *range(200, 233), 100]
    plan = [request(i, prompt=n, output=1, start=float(i)) for i, n in enumerate(counts)]
    outcome = run(plan, spec)
    ttfts = [live.token_times[0] - live.sent_s for live in outcome.lives]
    # Alone: 0.010 way in + 0.020 + 0.001 a token, and 0.005 when the count is new.
    assert ttfts[:2] == pytest.approx([0.135, 0.130])
    assert ttfts[2:-1] == pytest.approx([0.035 + 0.001 * n for n in range(200, 233)])
    assert ttfts[-1] == pytest.approx(0.135)
    # A decode step's count is its batch, run before by any group that has served: never new.
    (live,) = run([request(0, prompt=100, output=3)], spec).lives
    assert live.token_times == pytest.approx([0.135, 0.15601, 0.17703])


def drafted(count: int) -> Outcome:
    plan = [request(i, prompt=10, output=15) for i in range(count)]
    spec = EngineSpec(LATENCY, max_num_seqs=16, draft_tokens=7, acceptance=6.0)
    return run(plan, spec)


def test_a_batch_that_overflows_64_tokens_runs_the_ordinary_path() -> None:
    outcome = drafted(9)
    # 9 prompts of 10 in one prefill step from 0.010: 0.020 + 90 x 0.001 = 0.110; 1 token each.
    # 9 x (1 + 7 drafts) = 72 tokens > 64: ordinary. Step 1: 0.020 + 8 x 0.004 + 0.00001 x
    # 9 x (10 + 1) = 0.05299, 7 tokens each (1 + 6 accepted). Step 2: context 9 x (10 + 8):
    # 0.05362, the last 7 tokens.
    for live in outcome.lives:
        assert live.token_times == pytest.approx([0.120, 0.17299, 0.22661])
        assert live.token_counts == [1, 7, 7]
    assert (outcome.decode_steps, outcome.fast_steps) == (2, 0)


def test_a_batch_of_64_tokens_runs_the_fast_path() -> None:
    outcome = drafted(8)
    # 8 x 8 = 64 tokens: fast, 0.010 + 7 x 0.001 = 0.017 a step after the prefill (0.010 +
    # 0.020 + 0.080).
    for live in outcome.lives:
        assert live.token_times == pytest.approx([0.110, 0.127, 0.144])
    assert (outcome.decode_steps, outcome.fast_steps) == (2, 2)


def test_fractional_acceptance_carries_over_between_steps() -> None:
    spec = EngineSpec(LATENCY, max_num_seqs=8, draft_tokens=3, acceptance=2.5)
    (live,) = run([request(0, prompt=10, output=10)], spec).lives
    # 1 at prefill, then 3.5 a step: totals 4.5, 8, 10 (capped): whole tokens 4, 8, 10.
    assert live.token_counts == [1, 3, 4, 2]


def test_a_closed_turn_waits_for_its_answer_and_reuses_the_cached_prefix() -> None:
    first = request(0, prompt=100, output=2, group="g", shared_prefix_tokens=80, task="t")
    second = request(
        1,
        prompt=120,
        output=1,
        group="g",
        shared_prefix_tokens=100,
        task="t",
        after=(0,),
        think_s=1.0,
    )
    a, b = run([first, second], EngineSpec(LATENCY, max_num_seqs=8), closed=True).lives
    # First: first token at 0.130, one fast decode step 0.010: done at 0.140.
    assert a.finished_s == pytest.approx(0.140)
    # Second: sent 1.0 s after that answer; 80 of its 100 shared tokens are cached (5 whole
    # 16-token blocks), so it computes 40: 0.030 + 0.040 = 0.070.
    assert b.sent_s == pytest.approx(1.140)
    assert b.token_times == pytest.approx([1.210])


def test_tokens_from_the_cache_cost_what_the_calibration_says() -> None:
    first = request(0, prompt=100, output=1, group="g", shared_prefix_tokens=100)
    second = request(1, prompt=100, output=1, start=1.0, group="g", shared_prefix_tokens=100)
    prefill = PrefillCost(fixed_s=0.030, per_token_s=0.001, per_cached_token_s=0.0001)
    costs = StepCosts(ordinary=ORDINARY, prefill=prefill)
    _, b = run([first, second], EngineSpec(costs, max_num_seqs=8)).lives
    # 96 tokens from the cache (0.0096), 4 computed (0.004), 0.030 a lone request's fixed cost.
    assert b.token_times == pytest.approx([1.0436])


def test_without_prefix_caching_the_whole_prompt_is_computed() -> None:
    first = request(0, prompt=100, output=1, group="g", shared_prefix_tokens=100)
    second = request(1, prompt=100, output=1, start=1.0, group="g", shared_prefix_tokens=100)
    spec = EngineSpec(LATENCY, max_num_seqs=8, prefix_caching=False)
    _, b = run([first, second], spec).lives
    assert b.token_times == pytest.approx([1.130])
    _, cached = run([first, second], EngineSpec(LATENCY, max_num_seqs=8)).lives
    # Cached: 99 of 100 at most (the last prompt token is always computed), 96 in whole
    # blocks: 4 tokens, 0.034.
    assert cached.token_times == pytest.approx([1.034])


def test_chunked_prefill_and_the_sequence_limit() -> None:
    plan = [request(0, prompt=300, output=1), request(1, prompt=10, output=1)]
    spec = EngineSpec(STOCK, max_num_seqs=1, max_batched_tokens=200)
    a, b = run(plan, spec).lives
    # From 0.010, A's prompt in chunks of 200 and 100 (0.220, 0.120); B waits for A's seat:
    # 0.020 + 0.010.
    assert a.token_times == pytest.approx([0.350])
    assert b.token_times == pytest.approx([0.380])


def test_attention_pairs_cost_each_chunk_against_what_came_before() -> None:
    first = request(0, prompt=100, output=1, group="g", shared_prefix_tokens=100)
    second = request(1, prompt=300, output=1, start=1.0, group="g", shared_prefix_tokens=100)
    prefill = PrefillCost(fixed_s=0.030, per_token_s=0.001, per_attention_pair_s=0.000001)
    costs = StepCosts(ordinary=ORDINARY, prefill=prefill)
    a, b = run([first, second], EngineSpec(costs, max_num_seqs=8, max_batched_tokens=150)).lives
    # The first: 100 tokens, each attending to those before it and itself: 100 x 101 / 2 = 5050
    # pairs, 0.00505; at the scheduler at 0.010, 0.020 + 0.100 + 0.00505: to 0.13505.
    assert a.token_times == pytest.approx([0.13505])
    # The second takes 96 tokens from the cache (costing nothing here) and computes 204 in
    # chunks of 150 and 54: 150 x 96 + 150 x 151 / 2 = 25725 pairs, then 54 x 246 + 54 x 55 / 2
    # = 14769. From 1.010: 0.020 + 0.150 + 0.025725 = 0.195725, then 0.020 + 0.054 + 0.014769 =
    # 0.088769.
    assert b.token_times == pytest.approx([1.010 + 0.195725 + 0.088769])


def test_round_robin_and_prefix_routing() -> None:
    plan = [
        request(i, prompt=100, output=1, start=float(i), group="g", shared_prefix_tokens=100)
        for i in range(3)
    ]
    spec = EngineSpec(STOCK, max_num_seqs=8)
    sticky = simulate(plan, Topology(groups=[spec, spec], routing="prefix"), closed=False)
    spread = simulate(plan, Topology(groups=[spec, spec], routing="round-robin"), closed=False)
    # By prefix: one group serves all three; the second and third hit 96 cached tokens (0.034).
    assert [live.token_times[0] - live.sent_s for live in sticky.lives] == pytest.approx(
        [0.130, 0.034, 0.034]
    )
    # Round robin: the second lands on the other group, whose cache is empty.
    assert [live.token_times[0] - live.sent_s for live in spread.lives] == pytest.approx(
        [0.130, 0.130, 0.034]
    )


def test_sessions_that_start_together_spread_over_the_groups() -> None:
    plan = [request(i, prompt=100, output=1, group=f"s{i}") for i in range(2)]
    spec = EngineSpec(STOCK, max_num_seqs=8)
    outcome = simulate(plan, Topology(groups=[spec, spec], routing="prefix"), closed=False)
    # Each group prefills one prompt alone (0.130); on one group both would take 0.230.
    assert [live.token_times for live in outcome.lives] == [[0.130], [0.130]]


def test_hits_are_whole_blocks_and_the_plan_reports_its_hit_rate_as_vllm_counts_it() -> None:
    """A session's second turn resends its first turn's 300 tokens and 45 more; the server keeps
    128-token blocks (vLLM's CPU build), so the cache gives 256 of them, not the 288 of
    16-token blocks; the plan's prefix-cache hit rate is what vLLM's counters give, tokens found
    over tokens looked up: 256 of 300 + 345."""
    first = request(0, prompt=300, output=1, group="g", shared_prefix_tokens=300, task="t")
    second = request(
        1, prompt=345, output=1, group="g", shared_prefix_tokens=300, task="t", after=(0,)
    )
    for block, cached in ((128, 256), (16, 288)):
        spec = EngineSpec(STOCK, max_num_seqs=8, block_tokens=block)
        a, b = run([first, second], spec, closed=True).lives
        assert (a.cached, b.cached) == (0, cached)
        assert b.token_times[0] - b.sent_s == pytest.approx(0.030 + 0.001 * (345 - cached))
    calibration = Calibration(
        name="cpu", origin="given", gpus=1, backend="auto", draft_tokens=0, acceptance=0.0,
        max_num_seqs=8, costs=STOCK, model="m", block_tokens=128,
    )  # fmt: skip
    config = Configuration(name="one", gpus=1, backend="auto")
    trace = TraceInfo(source="t.jsonl", sha256="0", entries=2, seed=None)
    results = predict(config, calibration, Workload([first, second], True, trace, 1.0))
    assert results.summary.server_metrics.prefix_cache_hit_rate == pytest.approx(256 / 645)
