"""benchmarks/autoscaling.py in a reduced run: a trace of its own (`--trace`, bench's format)
with a quiet start, a jump in load and a quiet end, on a small calibration, the quick sweep."""

import json
import random
from pathlib import Path

import pytest

from kimi_operator.bench.traces import TraceEntry, dump_trace
from tests.kimi_operator.test_slo_scaling import CALIBRATION, SLO
from tests.support.repo import load_script

SCRIPT = load_script(Path("benchmarks/autoscaling.py"))
QUIET_S, BUSY_S = 600, 1200


def jump() -> list[TraceEntry]:
    """Sessions of 20-token turns over a 4K-token context: 0.5 requests/s, then 8, then 0.5."""
    rng = random.Random(0)
    entries, t, session = [], 0.0, 0
    while t < 2 * QUIET_S + BUSY_S:
        busy = QUIET_S <= t < QUIET_S + BUSY_S
        session += rng.random() < 0.2
        entries.append(
            TraceEntry(
                start_s=round(t, 3),
                prompt_tokens=4000,
                output_tokens=20,
                prefix_group=f"s{session}",
                shared_prefix_tokens=2000,
            )
        )
        t += rng.expovariate(8.0 if busy else 0.5)
    return entries


def test_the_slo_scaler_meets_a_jump_sooner_than_a_reactive_target_without_running_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(SCRIPT, "builtin_calibration", lambda *_: CALIBRATION)
    monkeypatch.setattr(SCRIPT, "SLO", SLO)  # what that calibration's groups can meet
    trace, output = tmp_path / "jump.jsonl", tmp_path / "autoscaling.json"
    trace.write_text(dump_trace(jump()))

    assert SCRIPT.main(["--trace", str(trace), "--quick", "--output", str(output)]) == 0

    result = json.loads(output.read_text())
    slo, reactive, static = result["rows"]
    assert "slo" in capsys.readouterr().out
    assert static["slo_met_minutes_percent"] == 100.0  # sized for the busiest minute
    assert static["peak_groups"] > SCRIPT.MIN_GROUPS  # the jump needs more than the floor
    # The jump is met once groups asked for at once have started; one group a period is later.
    assert slo["slo_met_minutes_percent"] > reactive["slo_met_minutes_percent"]
    assert slo["flaps"] == 0
    # A step looks like a 5-minute ramp in the readings: its trend, carried for the start-up
    # time, would ask for many times the groups; the forecast's ceiling bounds that.
    assert slo["peak_groups"] <= 2 * static["peak_groups"]
