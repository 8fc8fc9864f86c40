"""How many sessions a GB300 group of Kimi K3 holds in HBM, and the plan saying when a trace's
open sessions do not fit."""

import json
import math
from pathlib import Path

import pytest

from kimi_operator.bench.results import Results, TaskRecord
from kimi_operator.plan.costs import DecodeCost, PrefillCost, StepCosts
from kimi_operator.plan.memory import fit, group_memory, open_sessions, recompute_seconds
from tests.kimi_operator.plan.test_calibration import run_of
from tests.support.bench import Cli

# The facts, as docs/weights.md and the K3 kernels give them: 24 MLA layers of 512 + 64 one-byte
# entries a token; 69 KDA layers of 96 heads, each a 128 x 128 FP32 state and a 3-step BF16 window
# over 3 x 128 channels; 288 GB at 90%, a 1.497 TB checkpoint, a 12 GB reserve.
KV_PER_TOKEN = 24 * 576
STATE_PER_SESSION = 69 * (96 * 128 * 128 * 4 + 3 * 96 * 128 * 3 * 2)


def test_a_tp8_group_holds_what_its_hbm_leaves_after_the_weights() -> None:
    tp8, tp16 = group_memory(8), group_memory(16)
    assert tp8.kv_bytes_per_token == KV_PER_TOKEN  # the latent is whole on every rank
    assert tp8.state_bytes_per_session == STATE_PER_SESSION / 8  # KDA heads split over ranks
    free8 = 288e9 * 0.9 - 1.497e12 / 8 - 12e9  # about 60 GB a GPU
    assert tp8.free_bytes == free8
    assert tp8.sessions(32768) == int(free8 // (32768 * KV_PER_TOKEN + STATE_PER_SESSION / 8))
    assert tp8.sessions(32768) == 117
    # Twice the GPUs: half the weights each, so far more room, and half the state.
    assert tp16.sessions(32768) == int(
        (288e9 * 0.9 - 1.497e12 / 16 - 12e9) // (32768 * KV_PER_TOKEN + STATE_PER_SESSION / 16)
    )
    assert tp16.sessions(131072) > 2 * tp8.sessions(131072)


def tasks_open(spans: list[tuple[float, float]]) -> Results:
    results = run_of([])
    results.tasks = [
        TaskRecord(
            task=f"t{i}", requests=[], requests_failed=0, requests_not_sent=0, completed=True,
            start_s=start, completion_s=end - start, prompt_tokens=0, output_tokens=0,
            ttft_sum_s=0.0,
        )
        for i, (start, end) in enumerate(spans)
    ]  # fmt: skip
    return results


def test_open_sessions_is_the_most_at_one_moment() -> None:
    assert open_sessions(tasks_open([(0, 10), (2, 5), (4, 6), (7, 9)])) == 3  # at 4-5
    assert open_sessions(tasks_open([(0, 1), (1, 2), (2, 3)])) == 1  # one ends as one starts
    assert open_sessions(tasks_open([])) == 0


def test_the_plan_says_when_a_traces_sessions_do_not_fit(cli: Cli, tmp_path: Path) -> None:
    """40 sessions of 120K tokens at once on one TP8 group, which holds about 34 of them."""
    trace = tmp_path / "long.jsonl"
    turns = []
    for session in range(40):
        for turn in range(2):
            line = {
                "start_s": 0, "prompt_tokens": 120_000 + 500 * turn, "output_tokens": 16,
                "prefix_group": f"s{session}", "shared_prefix_tokens": 120_000 * turn,
                "id": f"s{session}-{turn}", "session": f"s{session}",
            }  # fmt: skip
            if turn:
                line |= {"after": f"s{session}-0", "think_s": 1.0}
            turns.append(json.dumps(line) + "\n")
    trace.write_text("".join(turns))
    config = tmp_path / "c.yaml"
    config.write_text("configurations: [{name: tp8, gpus: 8, replicas: 1}]\n")
    run = cli("plan", "--trace", str(trace), "--config", str(config), "--gpu-hour-price", "1",
              "--output", str(tmp_path / "p"))  # fmt: skip
    assert run.code == 0, run.err
    held = group_memory(8).sessions(120_516)
    assert held < 40
    (entry,) = json.loads((tmp_path / "p" / "plan.json").read_text())["configurations"]
    memory = entry.pop("memory")
    recomputed = memory.pop("returning_recomputed_s")
    # The rest in the CPU tier: each GPU keeps its share of each session there as in HBM.
    per_session = 120_516 * KV_PER_TOKEN + STATE_PER_SESSION / 8
    assert memory == {
        "sessions_held": held,
        "longest_context_tokens": 120_516,
        "open_sessions_per_group": 40,
        "fits": False,
        "sessions_in_tier": 40 - held,
        "tier_per_gpu_gib": math.ceil((40 - held) * per_session / 2**30),
        "returning_from_tier_s": per_session / 200e9,
    }
    assert recomputed > 10 * memory["returning_from_tier_s"]
    assert f"up to 40 sessions are open per group and a group holds {held}" in run.err
    gib = memory["tier_per_gpu_gib"]
    assert f"spec.kvCache.cpuOffload.perGPU {gib}Gi would hold the other {40 - held}" in run.err


def test_a_returning_turn_recomputed_costs_its_prefill_alone() -> None:
    costs = StepCosts(
        ordinary=DecodeCost(0.01, 0.0, 0.0),
        prefill=PrefillCost(fixed_s=0.1, per_token_s=1e-4, per_attention_pair_s=1e-9),
    )
    # 1,000 tokens: 0.1 s, 1,000 x 0.1 ms, and 1,000 x 1,001 / 2 causal pairs x 1 ns.
    assert recompute_seconds(costs, 1000) == pytest.approx(0.1 + 0.1 + 500_500e-9)


def test_a_trace_that_fits_needs_no_tier() -> None:
    costs = StepCosts(ordinary=DecodeCost(0.01, 0.0, 0.0), prefill=PrefillCost(0.1, 1e-4))
    small = fit(8, 32768, 10, 1, costs)
    assert small.fits
    assert (small.sessions_in_tier, small.tier_per_gpu_gib) == (0, 0)
    # 200 sessions of 32K on two TP8 groups: 100 each, 117 held.
    assert fit(8, 32768, 200, 2, costs).sessions_in_tier == 0
    assert fit(8, 32768, 200, 1, costs).sessions_in_tier == 200 - 117
