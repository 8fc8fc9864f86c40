"""The parts of benchmarks/slo_capacity_cpu.py that need no server: the model's sustainable rate
(`slo_scaling.sustainable_rate`, what the script sets beside the measured one) and the sweep's
crossing."""

import itertools
import math
from dataclasses import replace
from pathlib import Path

import pytest

from kimi_operator.plan.capacity import RATE_ROUNDING, Load
from kimi_operator.slo_scaling import Slo, sustainable_rate
from tests.kimi_operator.test_slo_scaling import HIT, OUTPUT, PROMPT, scaler
from tests.support.repo import load_script

SCRIPT = load_script(Path("benchmarks/slo_capacity_cpu.py"))
LOAD = Load(1.0, PROMPT, OUTPUT, HIT)


def test_the_rate_found_meets_the_slo_and_the_next_rate_up_misses_it() -> None:
    for slo in (Slo(ttft_seconds=1.0), Slo(decode_tokens_per_s=60.0), Slo(1.0, 90, 60.0, 90)):
        s = scaler(slo)
        rate = sustainable_rate(s, LOAD)
        assert 0 < rate < math.inf, slo
        at = replace(LOAD, request_rate_per_s=rate)
        above = replace(LOAD, request_rate_per_s=rate * (1 + RATE_ROUNDING))
        assert slo.met(s.figures(at, 1)), slo
        assert not slo.met(s.figures(above, 1)), slo


def test_a_looser_slo_never_sustains_less() -> None:
    ttfts, decodes = (0.5, 1.0, 4.0), (80.0, 60.0, 30.0)  # each looser than the one before
    rates = {
        (t, d): sustainable_rate(scaler(Slo(t, 90, d, 90)), LOAD)
        for t, d in itertools.product(ttfts, decodes)
    }
    for (t, d), rate in rates.items():
        looser = [(lt, ld) for lt, ld in rates if lt >= t and ld <= d]
        assert all(rates[key] >= rate for key in looser), (t, d, rates)
    assert rates[(ttfts[-1], decodes[-1])] > rates[(ttfts[0], decodes[0])]


def test_an_slo_a_lone_request_misses_sustains_nothing_and_no_target_any_rate() -> None:
    assert sustainable_rate(scaler(Slo(ttft_seconds=1e-4)), LOAD) == 0.0
    assert sustainable_rate(scaler(Slo()), LOAD) == math.inf


def test_the_prediction_is_interpolated_between_the_grid_rates_as_the_sweep_is() -> None:
    """The model's crossing, found as the measured one is: past the grid's last rate met (what
    the scaler itself sizes on), short of its first missed."""
    for slo in (Slo(ttft_seconds=1.0), Slo(decode_tokens_per_s=60.0)):
        s = scaler(slo)
        grid = sustainable_rate(s, LOAD)
        predicted = SCRIPT.predicted_rate(s, LOAD)
        assert grid < predicted < grid * (1 + RATE_ROUNDING), slo
        below = s.figures(replace(LOAD, request_rate_per_s=grid), 1)
        above = s.figures(replace(LOAD, request_rate_per_s=grid * (1 + RATE_ROUNDING)), 1)
        # The TTFT side: on its log margin, the crossing's share of the step is the margin's.
        if slo.ttft_seconds is not None:
            inside, outside = math.log(1.0 / below.ttft_s), math.log(1.0 / above.ttft_s)
            share = (predicted - grid) / (grid * RATE_ROUNDING)
            assert share == pytest.approx(inside / (inside - outside))
    assert SCRIPT.predicted_rate(scaler(Slo()), LOAD) == math.inf


def row(rate: float, margin: float) -> dict[str, object]:
    return {"rate": rate, "met": margin >= 0, "margin": margin}


def test_the_sweep_crosses_between_the_last_rate_met_and_the_first_missed() -> None:
    rows = [row(1.0, 0.3), row(2.0, 0.1), row(3.0, -0.1), row(4.5, 0.05), row(6.0, -1.0)]
    assert SCRIPT.crossing(rows) == pytest.approx(2.5)  # a rate met above a miss: noise, not used
    assert SCRIPT.crossing([row(1.0, 0.1), row(2.0, 0.2)]) is None
    assert SCRIPT.crossing([row(1.0, -0.1)]) is None


class Server:
    """A server whose TTFT p90 and decode rate at P90 are functions of the rate, replayed."""

    def __init__(self) -> None:
        self.rates: list[float] = []
        self.seeds: list[str] = []

    def bench(self, argv: list[str]) -> int:
        self.seeds.append(argv[argv.index("--seed") + 1])
        return 0

    def measured(self, _results: Path) -> dict[str, object]:
        rate = self.rates[-1]
        return {
            "ttft_s": 0.1 * math.exp(rate / 2.5),  # 0.5 s at 4.02 requests/s
            "decode_tok_s": 80.0 / rate,  # 40 tok/s at 2 requests/s
            "counted": 90, "errors": 0, "bursts": 0, "late_start_max_s": 0.0,
        }  # fmt: skip


def test_one_sweep_crosses_every_slo_and_bisects_each(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server = Server()
    trace = SCRIPT.trace

    def traced(rate: float) -> object:
        server.rates.append(rate)
        return trace(rate)

    monkeypatch.setattr(SCRIPT, "trace", traced)
    monkeypatch.setattr(SCRIPT, "cli", server.bench)
    monkeypatch.setattr(SCRIPT, "measured", server.measured)
    rows = SCRIPT.sweep([], scaler(Slo(ttft_seconds=1.0)), 1.0, tmp_path)
    interactive = SCRIPT.crossing(SCRIPT.verdicts(rows, "interactive"))
    first_token = SCRIPT.crossing(SCRIPT.verdicts(rows, "first token"))
    assert interactive == pytest.approx(2.0, rel=0.05)  # the decode rate binds first
    assert first_token == pytest.approx(4.02, rel=0.05)
    # Up by 1.5x from 1 until both missed (1, 1.5, 2.25, 3.375, 5.06), two bisections each.
    assert server.rates[:5] == pytest.approx([1.0, 1.5, 2.25, 3.375, 5.0625])
    assert len(server.rates) == 5 + 2 * SCRIPT.REFINE
    assert len(set(server.seeds)) == len(server.seeds)  # each rate's prompts its own
