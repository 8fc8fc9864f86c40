"""Step costs fitted from a calibration run: the sweep it sends, and the costs it recovers."""

import itertools
import re

import pytest

from kimi_operator.bench.calibration import (
    PASSES,
    batch_sizes,
    calibration_plan,
    fresh_lengths,
    prompt_lengths,
)
from kimi_operator.bench.results import (
    Profile,
    RequestRecord,
    Results,
    RunConfig,
    ServedConfig,
    ServerInfo,
    ServerMetrics,
    Summary,
)
from kimi_operator.plan import PlanError
from kimi_operator.plan.calibration import (
    Calibration,
    accepted_drafts,
    from_runs,
    prefill_points,
)
from kimi_operator.plan.fit import fit, fit_without_stalls


def test_the_sweep_runs_in_phases_each_after_the_last() -> None:
    plan = calibration_plan(largest_batch=8, longest_prompt=1024, output_tokens=32)
    assert batch_sizes(8) == [1, 2, 4, 8]
    assert batch_sizes(6) == [1, 2, 4, 6]
    assert prompt_lengths(1024) == [128, 256, 512, 1024]
    groups = [r.group for r in plan]
    # Decode: contexts 128 and 512, batches 1, 2, 4, 8: 2 x 15 requests a pass.
    assert groups[:3] == ["decode:b1:c128", "decode:b2:c128", "decode:b2:c128"]
    assert groups.count("decode:b8:c512") == 8 * PASSES
    # A pass: 30 decode requests, each lone prefill once, each prefix once (twice in the first
    # pass: its fill), one fresh count a length twice, and streams 0, 2 and 6, each with a
    # starter and a probe: 30 + 4 + 4 (+ 4) + 8 + 14.
    assert len(plan) == PASSES * (30 + 4 + 4 + 8 + 14) + 4
    assert (groups.count("prefill:p256"), groups.count("prefix:p256")) == (PASSES, PASSES + 1)
    assert groups.count("fresh:p256") == 2 * PASSES
    assert groups.count("streams:s2:probe") == PASSES
    s2 = plan[52:56]  # the first pass's, after its 50 and the no-streams starter and probe
    assert [r.group for r in s2] == ["streams:s2"] * 2 + ["streams:s2:starter", "streams:s2:probe"]
    assert [r.after for r in s2] == [(50, 51)] * 3 + [(54,)]
    assert (s2[0].output_tokens, s2[2].output_tokens, s2[3].prompt_tokens) == (64, 2, 128)
    assert plan[56].after == (52, 53, 54, 55)
    assert plan[56].group == "streams:s6"
    assert plan[64].group == "decode:b8:c128"  # the second pass: batches falling
    for request, previous in zip(plan[1:], plan, strict=False):
        if not str(request.group).startswith("streams") and (
            request.group != previous.group or str(request.group).startswith("prefix")
        ):
            assert previous.index in request.after  # a phase waits for the one before
    hit = [r for r in plan if r.group == "prefix:p256"][1]
    assert (hit.prompt_tokens, hit.shared_prefix_tokens) == (256, 240)


def test_a_measurements_repeats_are_a_pass_apart() -> None:
    """Every lone prefill, hit, fresh count and probe, and every decode phase, is taken once a pass,
    the passes one after the other: between two repeats of one, at least every lone prefill, hit,
    fresh count and probe runs (repeats one after the other share the machine's slow moments)."""
    plan = calibration_plan(largest_batch=8, longest_prompt=1024, output_tokens=32)
    groups = [str(r.group) for r in plan]
    labels = {group for group in groups if not group.startswith("decode:")}
    for label in ("prefill:p512", "decode:b4:c512", "streams:s6:probe", "prefix:p512"):
        # Where each of its phases starts (a decode phase: B requests in a row); a prefix's
        # hits, the first pass's fill left out.
        at = [i for i, group in enumerate(groups) if group == label != groups[i - 1]][-PASSES:]
        assert len(at) == PASSES, label
        for before, after in itertools.pairwise(at):
            assert labels <= set(groups[before : after + 1]), label


def test_fit_recovers_a_line_and_drops_a_negative_slope() -> None:
    xs = [(0.0, 100.0), (1.0, 300.0), (3.0, 100.0), (7.0, 900.0)]
    ys = [0.010 + 0.002 * a + 0.00001 * b for a, b in xs]
    intercept, (a, b) = fit(xs, ys)
    assert (intercept, a, b) == pytest.approx((0.010, 0.002, 0.00001))
    # Time falling with the second column is noise: that column is dropped, the rest refitted.
    intercept, (a, b) = fit([(0.0, 0.0), (1.0, 10.0), (2.0, 0.0)], [1.0, 1.5, 2.0])
    assert (intercept, a, b) == pytest.approx((1.0, 0.5, 0.0))
    # A column that never varies has nothing to fit.
    intercept, (a,) = fit([(5.0,), (5.0,)], [2.0, 4.0])
    assert (intercept, a) == pytest.approx((3.0, 0.0))


def test_a_stalled_request_is_left_out_of_the_fit() -> None:
    xs = [(float(x),) for x in (1, 2, 3, 4, 5, 6)]
    ys = [0.010 + 0.001 * x for (x,) in xs]
    stalled = [*ys[:1], 0.500, *ys[2:]]  # the second took 0.488 s longer: the server stalled
    assert fit(xs, stalled)[0] > 0.05  # one stall moves a plain fit's intercept fivefold
    intercept, (slope,) = fit_without_stalls(xs, stalled)
    assert (intercept, slope) == pytest.approx((0.010, 0.001))
    # Two stalls pull the first fit above every other point; both still go.
    twice = [*stalled[:4], 0.400, stalled[5]]
    intercept, (slope,) = fit_without_stalls(xs, twice)
    assert (intercept, slope) == pytest.approx((0.010, 0.001))
    # Faster than the line is no stall: a point 0.002 s below it stays (the fit moves).
    faster = [*ys[:1], ys[1] - 0.002, *ys[2:]]
    assert fit_without_stalls(xs, faster) == fit(xs, faster)


def record(
    index: int, group: str, prompt: int, ttft: float, *, gaps: list[float], tokens: int
) -> RequestRecord:
    times = [ttft]
    for gap in gaps:
        times.append(times[-1] + gap)
    return RequestRecord(
        index=index, group=group, request_id=None, scheduled_start_s=0.0, start_s=0.0,
        prompt_tokens=prompt, output_tokens=tokens * len(times), ttft_s=ttft, e2e_s=times[-1],
        decode_tokens_per_s=None, chunk_times_s=times, chunk_tokens=[tokens] * len(times),
        token_counts="per_chunk_usage", error=None,
    )  # fmt: skip


def run_of(
    records: list[RequestRecord], backend: str = "auto", profile: Profile = "calibration"
) -> Results:
    config = RunConfig(
        endpoint="http://127.0.0.1:1/v1", model="m", api="completions", profile=profile,
        concurrency=8, requests=len(records), warmup=0, prompt_tokens=1.0, output_tokens=1.0,
        ignore_eos=True, seed=0, trace=None, gpus=1, gpu_hour_price_usd=None, deployment=None,
        server=ServerInfo(decode_backend=backend), started_at="", tool_version="",
    )  # fmt: skip
    summary = Summary(
        requests_ok=len(records), requests_failed=0, output_tokens_total=0, prompt_tokens=None,
        duration_s=1.0, output_tokens_per_s=0.0, ttft_s=None, decode_tokens_per_s=None,
        itl_s=None, itl_chunk_s=None, e2e_s=None, tokens_per_chunk=None,
        cost_per_million_output_tokens_usd=None, cost_per_request_usd=None,
        server_metrics=ServerMetrics(reachable=False), errors={}, warnings=[],
    )  # fmt: skip
    return Results(config=config, summary=summary, requests=records)


def sweep(tokens_per_chunk: int = 1, noise: tuple[float, ...] = (0.0,)) -> list[RequestRecord]:
    """A run whose decode steps cost 0.020 + 0.005 per further sequence and whose prefill costs
    0.050 + 0.0001 per prompt token computed + 0.00002 per token from the prefix cache (a
    context term of zero); each lone prefill and hit repeated once for each of `noise`, that
    much off its cost."""
    records: list[RequestRecord] = []
    for batch in (1, 2, 4, 8):
        step = 0.020 + 0.005 * (batch - 1)
        for _ in range(batch):
            records.append(
                record(
                    len(records),
                    f"decode:b{batch}:c64",
                    64,
                    0.1,
                    gaps=[step] * 9,
                    tokens=tokens_per_chunk,
                )
            )
    lone = [(512, "prefill:p512", 0.050 + 0.0512), (1024, "prefill:p1024", 0.050 + 0.1024)]
    for prompt, group, ttft in lone:
        for off in noise:
            records.append(record(len(records), group, prompt, ttft + off, gaps=[0.01], tokens=1))
    # The prefix group's first fills the cache; the hits take its 1008 shared tokens, all in
    # whole blocks, from the cache and compute 16.
    fill = record(len(records), "prefix:p1024", 1024, 0.050 + 0.1024, gaps=[0.01], tokens=1)
    records.append(fill)
    for off in noise:
        ttft = 0.050 + 0.0016 + 0.02016 + off
        records.append(record(len(records), "prefix:p1024", 1024, ttft, gaps=[0.01], tokens=1))
    return records


def fitted(results: Results, draft_tokens: int | None = None) -> Calibration:
    return from_runs([("cal", results)], "cal", draft_tokens)


def test_a_stock_run_fits_the_ordinary_path() -> None:
    calibration = fitted(run_of(sweep()))
    costs = calibration.costs
    assert costs.fast is None
    assert (costs.ordinary.fixed_s, costs.ordinary.per_sequence_s) == pytest.approx((0.020, 0.005))
    assert costs.ordinary.per_context_token_s == pytest.approx(0.0, abs=1e-12)
    prefill = (costs.prefill.fixed_s, costs.prefill.per_token_s, costs.prefill.per_cached_token_s)
    assert prefill == pytest.approx((0.050, 0.0001, 0.00002))
    assert (calibration.max_num_seqs, calibration.draft_tokens, calibration.gpus) == (8, 0, 1)


def test_attention_pairs_are_fitted_apart_from_tokens() -> None:
    """Lone prompts of 128-1024 tokens and hits computing 16 after the rest: each costs 0.050 +
    0.0001 a token computed + 0.00002 a token cached + 0.0000001 an attention pair (a lone
    1024-token prompt: 524,800 pairs, 0.05248 of its 0.20488). A straight line through them
    would put a 512-token prompt 7 ms long and a 1024-token one 4 ms short; the pairs' column
    recovers every cost."""
    records = [r for r in sweep() if str(r.group).startswith("decode:")]
    for prompt in (128, 256, 512, 1024):
        lone = 0.050 + 0.0001 * prompt + 0.0000001 * prompt * (prompt + 1) / 2
        cached = prompt - 16
        hit = 0.050 + 0.0016 + 0.00002 * cached + 0.0000001 * (16 * cached + 16 * 17 / 2)
        for group, ttft in ((f"prefill:p{prompt}", lone), (f"prefix:p{prompt}", lone)):
            records.append(record(len(records), group, prompt, ttft, gaps=[0.01], tokens=1))
        records.append(record(len(records), f"prefix:p{prompt}", prompt, hit, gaps=[], tokens=1))
    prefill = fitted(run_of(records)).costs.prefill
    assert (prefill.fixed_s, prefill.per_token_s) == pytest.approx((0.050, 0.0001))
    assert prefill.per_cached_token_s == pytest.approx(0.00002)
    assert prefill.per_attention_pair_s == pytest.approx(0.0000001)


def test_the_median_of_each_prefills_repeats_is_fitted() -> None:
    """Three of each lone prefill and hit, one 0.030 s late, one 0.002 s early, one on time: the
    medians are the costs (the 1024-token prefill's four, with the prefix group's first, have
    two on time). Their means (0.0093 late, 0.007 for the four) would fit a fixed cost of 0.062,
    the first of each alone 0.080; each request a point of its own (the fit before the repeats)
    misses too."""
    costs = fitted(run_of(sweep(noise=(0.030, -0.002, 0.0)))).costs
    prefill = (costs.prefill.fixed_s, costs.prefill.per_token_s, costs.prefill.per_cached_token_s)
    assert prefill == pytest.approx((0.050, 0.0001, 0.00002))


def test_a_speculating_run_needs_its_draft_count_and_splits_the_paths() -> None:
    results = run_of(sweep(tokens_per_chunk=8), backend="latency_specialized")
    with pytest.raises(PlanError, match="--calibration-drafts"):
        fitted(results)
    calibration = fitted(results, 7)
    assert calibration.acceptance == pytest.approx(7.0)
    # 8 x (1 + 7) = 64 fits the fast path, so every measured batch did: no ordinary figures.
    assert calibration.costs.fast is not None
    assert "no batch over the fast path" in calibration.notes[0]
    # With 15 drafts, 16 tokens a sequence: batches 1, 2 and 4 fit 64, batch 8 does not.
    costs = fitted(results, 15).costs
    assert costs.fast is not None
    assert (costs.fast.fixed_s, costs.fast.per_sequence_s) == pytest.approx((0.020, 0.005))
    # One ordinary batch: its step time is all there is to fit (0.020 + 7 x 0.005).
    assert (costs.ordinary.fixed_s, costs.ordinary.per_sequence_s) == pytest.approx((0.055, 0.0))


def two_steps_a_chunk_at_the_end() -> list[RequestRecord]:
    """`sweep()` whose decode streams' last four steps arrive as two chunks of two tokens (8
    chunks, 10 tokens): an API server that fell behind the engine."""
    records = sweep()
    for r in records:
        if r.group and r.group.startswith("decode:"):
            step = r.chunk_times_s[1] - r.chunk_times_s[0]
            times = [*r.chunk_times_s[:6], r.chunk_times_s[5] + 2 * step, r.chunk_times_s[9]]
            r.chunk_times_s, r.chunk_tokens = times, [1] * 6 + [2, 2]
    return records


def test_chunks_that_carry_two_steps_do_not_slow_or_speculate_the_steps() -> None:
    """A busy API server falls behind the engine and sends two steps' tokens in one chunk: the
    gap before such a chunk is two steps long. With the server's metrics read (no speculative-
    decoding counters: it does not speculate), a step is one token's time, not a chunk's."""
    records = two_steps_a_chunk_at_the_end()
    results = run_of(records)
    with pytest.raises(PlanError, match="--calibration-drafts"):  # chunks alone: 1.5 a step
        fitted(results)
    results.summary.server_metrics = ServerMetrics(reachable=True)
    calibration = fitted(results)
    costs = calibration.costs.ordinary
    assert (costs.fixed_s, costs.per_sequence_s) == pytest.approx((0.020, 0.005))
    assert calibration.acceptance == 0.0
    # A speculating server's counters give its tokens per step (1 + 2.5 accepted drafts here).
    speculating = ServerMetrics(reachable=True, spec_decode_acceptance_length=3.5)
    results.summary.server_metrics = speculating
    calibration = fitted(results, 3)
    assert calibration.acceptance == pytest.approx(2.5)
    assert calibration.costs.ordinary.fixed_s == pytest.approx(0.020 * 3.5)


def test_probes_among_streams_give_the_way_in_per_stream() -> None:
    """The sweep's costs: a lone request's way in is 0.050 - 0.020 = 0.030, a 128-token probe's
    prefill 0.0128. Its modelled TTFT among S streams of 64 tokens: alone 0.050 + 0.0128 = 0.0628;
    among 2, half a step of 2 (0.025 / 2) and a step of 2 with its prefill (0.0378): 0.0803;
    among 6, 0.045 / 2 and 0.0578: 0.1103. Probes that took 0.004 a stream longer give 0.004.
    Each is probed three times, off by the noise below: the median of each is on time, where the
    means (0.0097, 0.0003, 0.003 late) would tilt the line to 0.0031 a stream, the first probes
    (0.030, -0.002, 0 late) to a negative slope: none."""
    records = sweep()
    noise = {0: (0.030, 0.0, -0.001), 2: (-0.002, 0.0, 0.003), 6: (0.0, 0.012, -0.003)}
    for streams, modelled in ((0, 0.0628), (2, 0.0803), (6, 0.1103)):
        for off in noise[streams]:
            for _ in range(streams):
                group = f"streams:s{streams}"
                records.append(record(len(records), group, 64, 0.1, gaps=[], tokens=1))
            ttft = modelled + 0.004 * streams + off
            probe = record(len(records), f"streams:s{streams}:probe", 128, ttft, gaps=[], tokens=1)
            records.append(probe)
    assert fitted(run_of(records)).costs.per_stream_s == pytest.approx(0.004)
    # A calibration from before the probes: nothing to fit, no term.
    assert fitted(run_of(sweep())).costs.per_stream_s == 0.0


def test_the_sweep_sends_token_counts_it_runs_nowhere_else() -> None:
    plan = calibration_plan(largest_batch=8, longest_prompt=1024, output_tokens=32, seed=7)
    fresh = [r for r in plan if str(r.group).startswith("fresh:")]
    others = {r.prompt_tokens for r in plan if r not in fresh}
    lengths = (128, 256, 512, 1024)
    a_pass = [f"fresh:p{p}" for p in lengths for _ in "12"]  # each count twice
    assert [r.group for r in fresh] == a_pass * PASSES
    counts = [r.prompt_tokens for r in fresh]
    assert counts[::2] == counts[1::2]  # each count twice in a row: new, then run before
    assert len(set(counts)) == 12
    assert not set(counts) & others
    for request in fresh:
        longest = int(str(request.group).removeprefix("fresh:p"))
        assert longest * 3 // 4 <= request.prompt_tokens < longest
        assert request.prompt_tokens % 2
        assert request.after == (request.index - 1,)  # alone: after the one before
    # Another seed, other counts: a second sweep on the same server meets counts new to it.
    assert fresh_lengths(1024, 8) != fresh_lengths(1024, 7)


def test_each_fresh_counts_first_over_its_second_is_what_a_new_step_shape_costs() -> None:
    """Pairs 4 ms apart (one 30 ms, a stall the median leaves out; one whose second was lost),
    whatever their distance from the prefill fit (0.050 + 0.0001 a token): 0.004; without
    them, nothing."""
    records = sweep()
    pairs = [(901, 0.004, 0.0), (777, 0.030, 0.010), (641, 0.009, 0.005), (555, 0.003, -0.001)]
    for prompt, first, second in pairs:
        for off in (first, second):
            ttft = 0.050 + 0.0001 * prompt + off
            records.append(record(len(records), "fresh:p1024", prompt, ttft, gaps=[], tokens=1))
    records.append(record(len(records), "fresh:p1024", 451, 0.5, gaps=[], tokens=1))
    assert fitted(run_of(records)).costs.new_shape_s == pytest.approx(0.004)
    assert fitted(run_of(sweep())).costs.new_shape_s == 0.0


def test_one_lengths_first_use_costs_do_not_set_what_every_new_count_costs() -> None:
    """A sweep as a freshly started server gave it: three lengths' counts 0.003-0.012 late the first
    time, the longest's 0.109-0.127 (a first use there only), and two pairs of each short length
    lost to bursts: the median of the six pairs left falls between the two (0.0575), the median
    of each length's median is the short lengths' cost."""
    records = sweep()
    firsts = {
        "fresh:p256": (0.011, 0.007, 0.003),
        "fresh:p512": (0.005, 0.011, 0.006),
        "fresh:p1024": (0.012, 0.010, 0.005),
        "fresh:p2048": (0.109, 0.117, 0.127),
    }
    lost = {(group, index) for group in list(firsts)[:3] for index in (0, 1)}  # in bursts
    for group, offs in firsts.items():
        longest = int(group.removeprefix("fresh:p"))
        for index, off in enumerate(offs):
            count = longest - 2 * index - 1
            for late, burst in ((off, False), (0.0, (group, index) in lost)):
                ttft = 0.050 + 0.0001 * count + late
                fresh = record(len(records), group, count, ttft, gaps=[], tokens=1)
                records.append(fresh.model_copy(update={"burst": burst}))
    assert fitted(run_of(records)).costs.new_shape_s == pytest.approx(0.0055)


def test_a_run_of_another_profile_is_refused() -> None:
    with pytest.raises(PlanError, match="a 'agentic' run, not a calibration"):
        fitted(run_of(sweep(), profile="agentic"))


def test_sweeps_of_one_deployment_fit_as_one_their_repeats_pooled() -> None:
    """Two sweeps, the first's three repeats of each prefill and hit 0.030 late (the machine was
    slow through it), the second's five on time but one: alone the first fits a fixed cost 0.030
    high, and the median of the two fits (their mean) 0.015 high; the eight repeats of each point
    pooled have the on-time median."""
    slow = run_of(sweep(noise=(0.030, 0.030, 0.030)))
    quick = run_of(sweep(noise=(0.0, -0.002, 0.0, 0.0, 0.0)))
    assert fitted(slow).costs.prefill.fixed_s == pytest.approx(0.080)
    assert fitted(quick).costs.prefill.fixed_s == pytest.approx(0.050)
    pooled = from_runs([("slow", slow), ("quick", quick)], "both", None)
    prefill = pooled.costs.prefill
    assert (prefill.fixed_s, prefill.per_token_s) == pytest.approx((0.050, 0.0001))
    assert prefill.per_cached_token_s == pytest.approx(0.00002)
    assert (pooled.name, pooled.origin) == ("both", "measured: slow, quick")


def test_each_pooled_sweeps_first_prefix_request_fills_the_cache() -> None:
    """Each sweep's prefix group starts with a fill: the second sweep's first is no hit (its
    prompt's 1008 shared tokens are not in the cache of the first sweep's server state). One hit
    each, 0.004 late in the first: the hits' median is their mean, 0.002 late."""
    points = prefill_points([sweep(noise=(0.004,)), sweep()])
    hits = {(computed, cached): ttft for computed, cached, ttft in points}
    assert hits[(16, 1008)] == pytest.approx(0.050 + 0.0016 + 0.02016 + 0.002)
    assert hits[(1024, 0)] == pytest.approx(0.050 + 0.1024)  # the fills, with the lone prefills


@pytest.mark.parametrize(
    ("other", "says"),
    [
        (
            run_of(sweep(), backend="latency_specialized"),
            "its decode backend is 'latency_specialized', not 'auto'",
        ),
        (run_of(sweep(), profile="agentic"), "b: a 'agentic' run, not a calibration"),
    ],
)
def test_sweeps_of_different_deployments_are_not_pooled(other: Results, says: str) -> None:
    with pytest.raises(PlanError, match=re.escape(says)):
        from_runs([("a", run_of(sweep())), ("b", other)], "a", None)


def test_fewer_drafts_accept_what_the_measured_rate_gives_not_all_of_them() -> None:
    # 6 of 7 accepted: each draft with a rate r where r + r^2 + ... + r^7 = 6 (r about 0.961).
    rate = 0.96145
    assert sum(rate**k for k in range(1, 8)) == pytest.approx(6.0, abs=2e-3)
    assert accepted_drafts(6.0, 7, 3) == pytest.approx(rate + rate**2 + rate**3, abs=2e-3)
    assert accepted_drafts(6.0, 7, 3) < 3.0  # not every one of the three
    assert accepted_drafts(6.0, 7, 7) == pytest.approx(6.0)
    assert accepted_drafts(2.0, 4, 4) == pytest.approx(2.0)
    assert accepted_drafts(4.0, 4, 2) == 2.0  # all accepted: all of fewer too
    assert accepted_drafts(0.0, 0, 7) == 0.0  # no speculation measured: none assumed


def test_without_the_servers_metrics_a_run_without_drafts_counts_a_token_a_step() -> None:
    """Chunks that carry two steps, and no metrics to say the server does not speculate: the
    user says so (--calibration-drafts 0) and a step is one token's time; without it, the error
    says what could not be told apart."""
    records = two_steps_a_chunk_at_the_end()
    results = run_of(records)  # metrics unreachable
    says = r"metrics were not read .* \(0 when it does not speculate\)"
    with pytest.raises(PlanError, match=says):
        fitted(results)
    calibration = fitted(results, 0)
    costs = calibration.costs.ordinary
    assert (costs.fixed_s, costs.per_sequence_s) == pytest.approx((0.020, 0.005))
    assert calibration.acceptance == 0.0


def block_sweep(block: int) -> list[RequestRecord]:
    """`sweep()`'s decode phases, then lone prompts of 256-2048 tokens and their prefix groups
    (a fill and a hit each) on a server whose prefix cache keeps `block`-token blocks: a hit
    takes the shared prefix (all but 16 tokens) in whole blocks and computes the rest. Each
    costs 0.050 + 0.0001 a token computed + 0.00002 a token cached + 0.0000001 a pair."""
    records = [r for r in sweep() if str(r.group).startswith("decode:")]
    for prompt in (256, 512, 1024, 2048):
        shared = prompt - 16
        cached = shared - shared % block
        computed = prompt - cached
        lone = 0.050 + 0.0001 * prompt + 0.0000001 * prompt * (prompt + 1) / 2
        pairs = computed * cached + computed * (computed + 1) / 2
        hit = 0.050 + 0.0001 * computed + 0.00002 * cached + 0.0000001 * pairs
        for group, ttft in ((f"prefill:p{prompt}", lone), (f"prefix:p{prompt}", lone)):
            records.append(record(len(records), group, prompt, ttft, gaps=[0.01], tokens=1))
        records.append(record(len(records), f"prefix:p{prompt}", prompt, hit, gaps=[], tokens=1))
    return records


def test_hits_are_whole_blocks_of_the_servers_own_size() -> None:
    """vLLM's CPU build keeps 128-token blocks: a 1024-token hit computes 128 tokens after 896
    cached, not 16 after 1008. Fitted in the server's blocks (its vllm:cache_config_info, which
    bench records as served.block_size) the costs come back; in 16-token blocks the hits' 112
    computed tokens too many are charged to the cached ones and the fixed cost (1.6x and +13%
    here)."""
    results = run_of(block_sweep(128))
    results.summary.server_metrics = ServerMetrics(
        reachable=True, served=ServedConfig(block_size=128)
    )
    calibration = fitted(results)
    assert calibration.block_tokens == 128
    prefill = calibration.costs.prefill
    assert (prefill.fixed_s, prefill.per_token_s) == pytest.approx((0.050, 0.0001))
    assert prefill.per_cached_token_s == pytest.approx(0.00002)
    assert prefill.per_attention_pair_s == pytest.approx(0.0000001)
    results.summary.server_metrics = ServerMetrics(reachable=True)  # no block size reported
    sixteen = fitted(results)
    assert sixteen.block_tokens == 16
    assert sixteen.costs.prefill.per_cached_token_s > 1.5 * 0.00002
    assert sixteen.costs.prefill.fixed_s > 1.1 * 0.050


def test_requests_whose_tokens_came_in_bursts_are_left_out_of_the_fit() -> None:
    """A client too busy to read stamps a stream's tail at once: bench marks it a burst. Its
    gaps of 0 fitted a decode step of 0 ms for its phase, and its late first token a slow
    prefill; left out, the fit is the clean one, and a note says how many went."""
    clean = fitted(run_of(sweep(noise=(0.0, 0.0))))
    records = sweep(noise=(0.0, 0.0))
    starved = next(r for r in records if r.group == "decode:b1:c64")
    starved.chunk_times_s = [starved.ttft_s or 0.0] * len(starved.chunk_times_s)
    late = next(r for r in records if r.group == "prefill:p512")
    late.ttft_s = 0.400
    for r in (starved, late):
        r.burst = True
    left_out = fitted(run_of(records))
    assert left_out.costs.ordinary.fixed_s == pytest.approx(clean.costs.ordinary.fixed_s)
    assert left_out.costs.prefill.fixed_s == pytest.approx(clean.costs.prefill.fixed_s)
    note = left_out.notes[0]
    assert note.startswith(f"cal: 2 of {len(records)} requests left out of the fit")
    for r in (starved, late):  # counted in, the same records move both fits
        r.burst = False
    unmarked = fitted(run_of(records)).costs
    assert unmarked.ordinary.fixed_s < 0.9 * clean.costs.ordinary.fixed_s
    assert unmarked.prefill != clean.costs.prefill
