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


def row(rate: float, margin: float) -> dict[str, object]:
    return {"rate": rate, "met": margin >= 0, "margin": margin}


def test_the_sweep_crosses_between_the_last_rate_met_and_the_first_missed() -> None:
    rows = [row(1.0, 0.3), row(2.0, 0.1), row(3.0, -0.1), row(4.5, 0.05), row(6.0, -1.0)]
    assert SCRIPT.crossing(rows) == pytest.approx(2.5)  # a rate met above a miss: noise, not used
    assert SCRIPT.crossing([row(1.0, 0.1), row(2.0, 0.2)]) is None
    assert SCRIPT.crossing([row(1.0, -0.1)]) is None
