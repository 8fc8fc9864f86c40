"""plan/capacity.py: one group's share of a load, the workload it is simulated on, and the
search from a guess that the SLO autoscaler shares with `plan --target`."""

import pytest

from kimi_operator.plan.capacity import (
    SESSIONS_MODELLED,
    WINDOW_REQUESTS,
    Load,
    predicted,
    workload,
)
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
