"""plan/capacity.py: one group's share of a load, the workload it is simulated on, and the
search from a guess that the SLO autoscaler shares with `plan --target`."""

import sys
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from kimi_operator.plan import capacity
from kimi_operator.plan.capacity import (
    SESSIONS_MODELLED,
    WINDOW_REQUESTS,
    Load,
    Predicted,
    predicted,
    workload,
)
from kimi_operator.plan.configs import Disaggregated
from kimi_operator.plan.costs import StepCosts
from kimi_operator.plan.simulate import Topology
from kimi_operator.plan.target import fewest
from tests.kimi_operator.test_slo_scaling import CALIBRATION, CONFIG


class Needs:
    """A count's answer: at least `need` groups meet; remembers what it was asked."""

    def __init__(self, need: int) -> None:
        self.need = need
        self.asked: list[int] = []

    def __call__(self, groups: int) -> bool:
        self.asked.append(groups)
        return groups >= self.need


@pytest.mark.parametrize("most", [1, 2, 7, 64])
@pytest.mark.parametrize("start", [0, 1, 3, 64, 100])
def test_the_search_from_any_guess_finds_the_fewest(most: int, start: int) -> None:
    for need in range(1, most + 2):
        meets = Needs(need)
        assert fewest(meets, most, start) == (need if need <= most else None)
        assert all(1 <= groups <= most for groups in meets.asked)


def test_a_guess_that_is_right_costs_two_answers() -> None:
    meets = Needs(5)
    assert fewest(meets, 64, 5) == 5
    assert sorted(meets.asked) == [4, 5]


def test_a_load_on_n_groups_is_its_share_on_one() -> None:
    load = Load(8.0, 5000.0, 30.0, 0.6, sessions=40.0)
    assert load.share(4) == Load(8.0 / 2, 5000.0, 30.0, 0.6, sessions=20.0).share(2)
    assert load.share(1).sessions == SESSIONS_MODELLED  # more change only the cold starts
    on_four = predicted(CONFIG, CALIBRATION, load, 4)
    assert on_four.groups == 4
    assert (
        on_four.ttft_s
        == predicted(CONFIG, CALIBRATION, Load(4.0, 5000.0, 30.0, 0.6, 20.0), 2).ttft_s
    )


def test_the_workload_has_the_loads_rate_lengths_and_cache_hits() -> None:
    share = Load(2.0, 5000.0, 30.0, 0.6, sessions=4.0).share(1)
    plan = workload(share)
    assert len(plan) == WINDOW_REQUESTS
    assert len({r.group for r in plan}) == 4
    span = plan[-1].start_s - plan[0].start_s
    assert (len(plan) - 1) / span == pytest.approx(2.0, rel=0.25)  # Poisson, from a fixed seed
    prompts = sum(r.prompt_tokens for r in plan)
    assert prompts / len(plan) == pytest.approx(5000.0, rel=0.1)
    assert sum(r.output_tokens for r in plan) / len(plan) == pytest.approx(30.0, rel=0.1)
    # Every turn after a session's first finds its session's prefix cached.
    assert sum(r.shared_prefix_tokens for r in plan) / prompts == pytest.approx(0.6, rel=0.1)
    assert workload(share) == plan  # the same load, the same requests


def test_more_groups_never_serve_a_load_slower() -> None:
    load = Load(40.0, 4000.0, 20.0, 0.5)
    figures = [predicted(CONFIG, CALIBRATION, load, groups) for groups in range(1, 9)]
    ttfts = [f.ttft_s[90] for f in figures]
    rates = [f.decode_tok_s[90] for f in figures]
    assert ttfts == sorted(ttfts, reverse=True)
    assert rates == sorted(rates)
    assert ttfts[0] > 5 * ttfts[-1]  # one group drowns in what eight serve


class Counted:
    """Stands in for the simulator: remembers its runs (the cache's misses)."""

    def __init__(self) -> None:
        self.asked: list[tuple[Topology, StepCosts, Load]] = []

    @property
    def runs(self) -> int:
        return len(self.asked)

    def __call__(self, group: Topology, costs: StepCosts, share: Load) -> Predicted:
        self.asked.append((group, costs, share))
        return Predicted(groups=1, ttft_s={90: 1.0}, decode_tok_s={90: 50.0}, queued_s=0.0)


def test_the_answer_is_cached_by_one_groups_shape_not_the_counts_or_the_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = Counted()
    monkeypatch.setattr(capacity, "_simulated", runs)
    monkeypatch.setattr(capacity, "_cache", OrderedDict())
    load = Load(3.0, 5000.0, 30.0, 0.6)
    split = CONFIG.model_copy(update={"disaggregated": Disaggregated(prefill_replicas=1)})
    for replicas, name in [(1, "k3"), (5, "k3"), (9, "other"), (2, "k3")]:
        aggregated = CONFIG.model_copy(update={"replicas": replicas, "name": name})
        more = Disaggregated(prefill_replicas=replicas)
        disaggregated = split.model_copy(update={"replicas": 3, "disaggregated": more})
        for config in (aggregated, disaggregated):
            predicted(config, CALIBRATION, load, 2)
    assert runs.runs == 2  # one shape aggregated, one disaggregated


def test_a_calibration_that_prices_a_group_differently_is_not_answered_from_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = Counted()
    monkeypatch.setattr(capacity, "_simulated", runs)
    monkeypatch.setattr(capacity, "_cache", OrderedDict())
    load = Load(3.0, 5000.0, 30.0, 0.6)
    predicted(CONFIG, CALIBRATION, load, 1)
    # The same name and step costs, a prefix cache of larger blocks (fewer tokens hit): another.
    predicted(CONFIG, replace(CALIBRATION, block_tokens=4 * CALIBRATION.block_tokens), load, 1)
    assert runs.runs == 2


def test_threads_sharing_a_small_cache_all_get_their_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reconciles run in several threads (controller/loop.py); one evicting another's answer
    between its look-up and its use must not fail it."""
    monkeypatch.setattr(capacity, "_simulated", Counted())
    monkeypatch.setattr(capacity, "_cache", OrderedDict())
    monkeypatch.setattr(capacity, "CACHE_SIZE", 1)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        with ThreadPoolExecutor(8) as pool:
            answers = list(
                pool.map(
                    lambda i: predicted(CONFIG, CALIBRATION, Load(1.0 + i % 4, 5000, 30, 0.6), 1),
                    range(20_000),
                )
            )
    finally:
        sys.setswitchinterval(interval)
    assert len(answers) == 20_000
