"""`kimi-operator plan` with disaggregated configurations: the comparison with aggregated ones in
plan.json and report.md, each role's calibration, and an emitted `spec.prefill` that validates."""

import json
from pathlib import Path

import yaml

from kimi_operator.bench.results import RequestRecord
from tests.kimi_operator.plan.test_calibration import run_of, sweep
from tests.kimi_operator.plan.test_cli import SAMPLES, plan, trace, write
from tests.support.bench import Cli

__all__ = ["trace"]  # the fixture

ONE_GPU_SPLIT = "configurations: [{name: split, gpus: 1, disaggregated: {prefillReplicas: 1}}]\n"


def calibration(tmp_path: Path, name: str, records: list[RequestRecord]) -> str:
    (tmp_path / name).mkdir()
    (tmp_path / name / "results.json").write_text(run_of(records).model_dump_json())
    return str(tmp_path / name)


def test_a_calibration_plans_a_disaggregated_shape_against_its_aggregated_twin(
    cli: Cli, trace: Path, tmp_path: Path
) -> None:
    measured = calibration(tmp_path, "cpu", sweep())
    out = tmp_path / "p"
    data = plan(cli, trace, out, "--calibration", measured)
    entries = {entry["name"]: entry for entry in data["configurations"]}
    split, twin = entries["gb300-tp8-p1d1"], entries["gb300-tp8x2-latency"]
    assert split["configuration"]["disaggregated"]["prefillReplicas"] == 1
    assert (split["gpus"], twin["gpus"]) == (16, 16)  # both roles' GPUs are paid for
    assert split["prefill_calibration"] == split["calibration"]  # no --prefill-calibration
    assert split["kv_transfer"]["source"].startswith("assumed")
    (crossover,) = data["disaggregation"]["crossovers"]
    assert (crossover["disaggregated"], crossover["aggregated"]) == (
        "gb300-tp8-p1d1",
        "gb300-tp8x2-latency",
    )
    assert [p["sessions"] for p in crossover["points"]] == [1, 2, 4, 8, 16, 32, 64]
    for p in crossover["points"]:
        d, a = p["disaggregated"], p["aggregated"]
        assert p["faster"] == (
            d["task_completion_p50_s"] < a["task_completion_p50_s"]
            and d["task_completion_p90_s"] < a["task_completion_p90_s"]
        )
        assert p["cheaper"] == (d["cost_per_task_usd"] < a["cost_per_task_usd"])
        assert d["fast_path_fraction"] == 1.0  # its decode group only decodes
    # More sessions on the same GPUs: tasks take longer, on both.
    first, last = crossover["points"][0], crossover["points"][-1]
    for side in ("disaggregated", "aggregated"):
        assert last[side]["task_completion_p90_s"] > first[side]["task_completion_p90_s"]
    line = crossover["line"]
    assert line.startswith(
        "Disaggregated gb300-tp8-p1d1 against aggregated gb300-tp8x2-latency (16 GPUs each): "
    )
    assert "on task completion (p50 and p90)" in line
    assert "on cost per task" in line
    report = (out / "report.md").read_text()
    assert f"**{line}.**" in report
    assert (
        "gb300-tp8-p1d1: prefill groups priced by the decode role's calibration "
        "gb300-tp8-latency_specialized-nodraft (no --prefill-calibration)" in report
    )
    assert "| 64 | " in report


def slower_prefills(records: list[RequestRecord], factor: float) -> list[RequestRecord]:
    return [
        r.model_copy(update={"ttft_s": (r.ttft_s or 0) * factor})
        if (r.group or "").startswith(("prefill:", "prefix:"))
        else r
        for r in records
    ]


def test_the_prefill_roles_calibration_prices_the_prefill_groups(
    cli: Cli, trace: Path, tmp_path: Path
) -> None:
    decode = calibration(tmp_path, "decode", sweep())
    prefill = calibration(tmp_path, "prefill", slower_prefills(sweep(), 3.0))
    config = str(write(tmp_path, "c.yaml", ONE_GPU_SPLIT))
    argv = ["--calibration", decode, "--config", config, "--concurrency", "1,2"]
    alone = plan(cli, trace, tmp_path / "a", *argv)
    both = plan(cli, trace, tmp_path / "b", *argv, "--prefill-calibration", prefill)
    split = next(e for e in both["configurations"] if e["name"] == "split")
    assert (split["calibration"], split["prefill_calibration"]) == ("decode", "prefill")
    assert "prefill" in [c["name"] for c in both["calibrations"]]
    assert both["disaggregation"]["calibrations"] == [
        "split: prefill groups priced by prefill (--prefill-calibration)"
    ]
    # Three times the prefill costs, on the prefill groups only: a later first token.
    ttft = [
        next(e for e in data["configurations"] if e["name"] == "split")["summary"]["ttft_s"]["p50"]
        for data in (alone, both)
    ]
    assert ttft[1] > 1.5 * ttft[0]
    # The aggregated twin of the sweep is priced by the decode role's calibration alone.
    (crossover,) = both["disaggregation"]["crossovers"]
    assert crossover["aggregated"] == "split-aggregated"
    assert [p["sessions"] for p in crossover["points"]] == [1, 2]


def test_a_kimideployment_with_spec_prefill_is_planned_disaggregated(
    cli: Cli, trace: Path, tmp_path: Path
) -> None:
    body = yaml.safe_load((SAMPLES / "k3-tp8-dspark.yaml").read_text())
    body["spec"]["routing"] = {"mode": "InferencePool"}
    body["spec"]["prefill"] = {"replicas": 2, "decider": "UncachedTokens", "uncachedTokens": 512}
    config = write(tmp_path, "k3.yaml", yaml.safe_dump(body))
    data = plan(cli, trace, tmp_path / "p", "--config", str(config), "--concurrency", "2")
    (entry,) = data["configurations"]
    assert entry["configuration"]["disaggregated"] == {
        "prefillReplicas": 2, "decider": "UncachedTokens", "uncachedTokens": 512,
        "kvTransferS": None,
    }  # fmt: skip
    assert entry["gpus"] == 8 * 3


def test_an_emitted_disaggregated_spec_validates(cli: Cli, trace: Path, tmp_path: Path) -> None:
    text = (
        "configurations: [{name: split, gpus: 8, draftTokens: 7, disaggregated: "
        "{prefillReplicas: 1, decider: UncachedTokens, uncachedTokens: 256}}]\n"
    )
    spec = tmp_path / "k3.yaml"
    run = cli(
        "plan", "--trace", str(trace), "--gpu-hour-price", "6.5", "--output", str(tmp_path / "p"),
        "--config", str(write(tmp_path, "c.yaml", text)), "--concurrency", "1",
        "--target", "task_completion_p90=600", "--emit-spec", str(spec),
    )  # fmt: skip
    assert run.code == 0, run.err
    body = yaml.safe_load(spec.read_text())
    groups = json.loads((tmp_path / "p" / "plan.json").read_text())["configurations"][0]
    assert body["spec"]["replicas"] == groups["groups_for_target"]  # decode groups
    assert body["spec"]["prefill"] == {
        "replicas": 1, "decider": "UncachedTokens", "uncachedTokens": 256,
    }  # fmt: skip
    assert body["spec"]["routing"]["mode"] == "InferencePool"  # what spec.prefill needs
    assert "split with 1 group(s) and 1 prefill group(s) of 8 GPUs meets the target" in run.out
    validated = cli("validate", str(spec))
    assert validated.code == 0, validated.out + validated.err


def test_concurrency_needs_a_disaggregated_configuration(
    cli: Cli, trace: Path, tmp_path: Path
) -> None:
    config = str(write(tmp_path, "c.yaml", "configurations: [{name: a, gpus: 8}]\n"))
    run = cli(
        "plan", "--trace", str(trace), "--gpu-hour-price", "1", "--output", str(tmp_path / "o"),
        "--config", config, "--concurrency", "4",
    )  # fmt: skip
    assert run.code == 2
    assert "--concurrency sets disaggregated configurations against aggregated ones" in run.err
