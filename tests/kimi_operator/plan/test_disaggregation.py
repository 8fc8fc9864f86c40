"""The disaggregated model (prefill groups handing the KV over to decode groups that only decode)
against schedules worked out by hand, and its comparison with aggregated groups."""

from typing import Any

import pytest

from kimi_operator.bench.profiles import PlannedRequest
from kimi_operator.bench.stats import decode_rate
from kimi_operator.plan import engine as engine_module
from kimi_operator.plan.calibration import from_runs
from kimi_operator.plan.costs import KvTransfer
from kimi_operator.plan.crossover import Crossover, Figures, Point, at_concurrency
from kimi_operator.plan.engine import EngineSpec, Live, Step
from kimi_operator.plan.memory import nixl_transfer
from kimi_operator.plan.simulate import Outcome, Topology, simulate
from tests.kimi_operator.plan.test_calibration import run_of, sweep
from tests.kimi_operator.plan.test_model import LATENCY, STOCK, request

# 0.002 a hand-over and 0.00001 a token the decode group does not hold.
TRANSFER = KvTransfer(fixed_s=0.002, per_token_s=0.00001)


def split(
    plan: list[PlannedRequest], uncached_tokens: int | None = None, decode_groups: int = 1
) -> Outcome:
    topology = Topology(
        groups=[EngineSpec(LATENCY, max_num_seqs=8, role="decode")] * decode_groups,
        prefill_groups=[EngineSpec(STOCK, max_num_seqs=8, role="prefill")],
        kv_transfer=TRANSFER,
        uncached_tokens=uncached_tokens,
    )
    return simulate(plan, topology, closed=False)


def test_a_lone_request_prefills_hands_over_and_decodes() -> None:
    (live,) = split([request(0, prompt=100, output=3)]).lives
    # The prefill server's way in, 0.030 - 0.020 = 0.010; its prefill step, 0.020 + 100 x 0.001
    # = 0.120 (to 0.130); the KV of 100 tokens, 0.002 + 100 x 0.00001 = 0.003, and the decode
    # server's way in, 0.010 (to 0.143); then a pure decode step, on the fast path: 0.010, which
    # computes the last prompt token and gives the first token at 0.153. Aggregated, it came at
    # 0.130 (test_model): the hand-over costs this request 0.023.
    ttft = 0.010 + 0.120 + 0.003 + 0.010 + 0.010
    assert live.token_times == pytest.approx([ttft, ttft + 0.010, ttft + 0.020])
    assert live.token_counts == [1, 1, 1]


def test_a_handed_over_requests_first_step_gives_one_token_then_drafts_count() -> None:
    decode = EngineSpec(LATENCY, max_num_seqs=8, draft_tokens=3, acceptance=2.0, role="decode")
    prefill = EngineSpec(STOCK, max_num_seqs=8, role="prefill")
    topology = Topology(groups=[decode], prefill_groups=[prefill], kv_transfer=TRANSFER)
    (live,) = simulate([request(0, prompt=100, output=8)], topology, closed=False).lives
    # The first decode-group step computes the last prompt token: one token, no drafts to verify
    # yet; then 1 + 2 accepted a step: 1, 3, 3, and the last 1 of 8.
    assert live.token_counts == [1, 3, 3, 1]


def test_the_decider_keeps_a_short_suffix_on_the_decode_group_and_hands_over_the_rest() -> None:
    a = request(0, prompt=100, output=1, group="g", shared_prefix_tokens=100)
    b = request(1, prompt=104, output=1, start=1.0, group="g", shared_prefix_tokens=100)
    c = request(2, prompt=200, output=1, start=2.0, group="g", shared_prefix_tokens=100)
    first, second, third = split([a, b, c], uncached_tokens=10).lives
    # A: nothing cached anywhere, 100 uncached > 10: handed over as the lone request above.
    assert first.token_times == pytest.approx([0.153])
    # B: the decode group took A's KV, so holds 96 of B's tokens (whole blocks of its 100
    # shared); 8 uncached <= 10: B prefills there, alone: way in 0.010, 0.020 + 8 x 0.001.
    assert second.token_times == pytest.approx([1.0 + 0.010 + 0.028])
    # C: 200 - 96 = 104 uncached > 10: to the prefill group, which holds 96 too (it computed
    # A): way in 0.010, prefill of 104, 0.124; the KV of the 104 the decode group lacks, 0.002
    # + 0.00104; way in 0.010; a decode step 0.010.
    assert third.token_times == pytest.approx([2.0 + 0.010 + 0.124 + 0.00304 + 0.010 + 0.010])


def steps_by_role(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Step]]:
    seen: dict[str, list[Step]] = {"both": [], "prefill": [], "decode": []}
    finish = engine_module.Engine.finish

    def recording(self: engine_module.Engine, step: Step, now: float) -> list[Live]:
        seen[self.spec.role].append(step)
        return finish(self, step, now)

    monkeypatch.setattr(engine_module.Engine, "finish", recording)
    return seen


def busy(count: int = 40) -> list[PlannedRequest]:
    """Prompts of 300-1,000 tokens, answers of 5-50, arriving every 20 ms over two sessions'
    prefixes: prefills keep landing while others decode."""
    return [
        request(
            i, prompt=300 + 17 * i, output=5 + i, start=0.02 * i,
            group=f"s{i % 2}", shared_prefix_tokens=200,
        )
        for i in range(count)
    ]  # fmt: skip


def test_decode_groups_never_step_prefill_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = steps_by_role(monkeypatch)
    outcome = split(busy(), decode_groups=2)
    assert all(live.finished_s is not None for live in outcome.lives)
    assert seen["decode"]
    assert all(not step.prefill for step in seen["decode"])
    assert all(not step.decode for step in seen["prefill"])  # and prefill groups only prefill
    # ...so every decode step fits the fast path (8 rows of 1 token at most).
    assert outcome.fast_steps == outcome.decode_steps == len(seen["decode"])
    # The same requests on two aggregated groups: prefills ride along with decodes.
    seen["both"].clear()
    topology = Topology(groups=[EngineSpec(LATENCY, max_num_seqs=8)] * 2)
    simulate(busy(), topology, closed=False)
    assert any(step.prefill and step.decode for step in seen["both"])


def lone_decode_rate(topology: Topology, load: int) -> float:
    """The decode rate of one request of 200 tokens while `load` prefills of 2,000 tokens
    (one token out each) arrive every 0.1 s from 0.2 s on."""
    plan = [request(0, prompt=100, output=200)] + [
        request(i, prompt=2000, output=1, start=0.1 + 0.1 * i) for i in range(1, load + 1)
    ]
    live = simulate(plan, topology, closed=False).lives[0]
    times = [t - live.sent_s for t in live.token_times]
    rate = decode_rate(times, live.token_counts, 200)
    assert rate is not None
    return rate


def test_under_prefill_load_aggregated_decoding_slows_and_disaggregated_does_not() -> None:
    aggregated = Topology(groups=[EngineSpec(LATENCY, max_num_seqs=8)])
    disaggregated = Topology(
        groups=[EngineSpec(LATENCY, max_num_seqs=8, role="decode")],
        prefill_groups=[EngineSpec(LATENCY, max_num_seqs=8, role="prefill")],
        kv_transfer=TRANSFER,
    )
    # Alone: 199 fast steps of 0.010 on either.
    assert lone_decode_rate(aggregated, 0) == pytest.approx(100.0)
    assert lone_decode_rate(disaggregated, 0) == pytest.approx(100.0)
    # Aggregated, each 2,000-token prefill rides in a decode step: 0.020 + 2.0 s, not 0.010.
    assert lone_decode_rate(aggregated, 10) < 0.5 * 100.0
    # Disaggregated, the prefills run elsewhere; a handed-over request joins a step or two as a
    # row of its own (0.001 more each): the rate stays within 2%.
    assert lone_decode_rate(disaggregated, 10) > 0.98 * 100.0


def test_the_built_in_hand_over_is_the_kv_bytes_over_nvlink() -> None:
    """13,824 bytes a token (24 MLA layers x 576 one-byte entries, whole on every rank) and the
    KDA state's share of a GPU (69 layers x 96 heads x (128 x 128 x 4 + 3 x 128 x 3 x 2) bytes
    over 8 ranks) at an assumed 450 GB/s a GPU: half of NVLink 5's 900 GB/s one way."""
    transfer = nixl_transfer(8)
    assert transfer.per_token_s == pytest.approx(24 * 576 / 450e9)
    state = 69 * 96 * (128 * 128 * 4 + 3 * 128 * 3 * 2) / 8
    assert transfer.fixed_s == pytest.approx(state / 450e9)
    # A 15K-token turn: about 0.6 ms; its prefill alone takes over a second on the built-ins.
    assert transfer.seconds(15_000) == pytest.approx(0.000586, abs=1e-5)


def test_nixls_measured_transfer_time_prices_a_token_handed_over() -> None:
    results = run_of(sweep())
    metrics = results.summary.server_metrics
    metrics.kv_transfer_time_s = 0.004
    metrics.external_prompt_fraction = 0.5
    prompts = [r.prompt_tokens or 0 for r in results.requests]
    calibration = from_runs([("cal", results)], "cal", None)
    assert calibration.kv_transfer is not None
    # The mean transfer over the mean prompt's handed-over half.
    handed = sum(prompts) / len(prompts) * 0.5
    assert calibration.kv_transfer.per_token_s == pytest.approx(0.004 / handed)
    assert from_runs([("cal", run_of(sweep()))], "cal", None).kv_transfer is None


def point(sessions: int, disaggregated: tuple[float, float, float], aggregated: Any) -> Point:
    def figures(values: tuple[float, float, float]) -> Figures:
        p50, p90, cost = values
        return Figures(p50, p90, cost, None, None, None)

    return Point(sessions, figures(disaggregated), figures(aggregated))


@pytest.mark.parametrize(
    ("points", "says"),
    [
        (
            [point(1, (10, 12, 1.0), (9, 11, 0.9)), point(8, (20, 25, 0.5), (21, 26, 0.55)),
             point(32, (40, 50, 0.3), (50, 60, 0.4))],
            "wins from 8 concurrent sessions on task completion (p50 and p90); wins from 8 "
            "concurrent sessions on cost per task",
        ),
        (
            [point(1, (10, 12, 1.0), (9, 11, 0.9)), point(8, (20, 27, 0.5), (21, 26, 0.55)),
             point(32, (40, 50, 0.5), (50, 60, 0.4))],
            "wins from 32 concurrent sessions on task completion (p50 and p90); wins on cost "
            "per task only at 8 of the 1-32 sessions tried",
        ),
        (
            [point(1, (10, 12, 1.0), (9, 11, 0.9)), point(4, (10, 12, 1.0), (10, 12, 1.0))],
            "never wins on task completion (p50 and p90) in the range tried (1-4 sessions); "
            "never wins on cost per task in the range tried (1-4 sessions)",
        ),
    ],
)  # fmt: skip
def test_the_crossover_is_where_disaggregated_wins_from_on(points: list[Point], says: str) -> None:
    crossover = Crossover("p1d1", "tp8x2", 16, points)
    assert crossover.line() == f"Disaggregated p1d1 against aggregated tp8x2 (16 GPUs each): {says}"


def test_concurrency_takes_the_traces_sessions_in_turn_all_at_once() -> None:
    plan = [
        request(0, 100, 1, start=5.0, group="a", task="a"),
        request(1, 100, 1, start=6.0, group="b", task="b"),
        request(2, 150, 1, start=7.0, group="a", task="a", after=(0,)),
    ]
    scaled = at_concurrency(plan, 3)

    def summary(r: PlannedRequest) -> tuple[Any, ...]:
        return (r.index, r.start_s, r.task, r.group, r.after, r.prompt_tokens)

    assert [summary(r) for r in scaled] == [
        (0, 0.0, "a", "a", (), 100),
        (1, 2.0, "a", "a", (0,), 150),
        (2, 0.0, "b", "b", (), 100),
        (3, 0.0, "a~1", "a~1", (), 100),  # the first session again: a new one, its own prefix
        (4, 2.0, "a~1", "a~1", (3,), 150),
    ]
    assert [r.task for r in at_concurrency(plan, 1)] == ["a", "a"]
