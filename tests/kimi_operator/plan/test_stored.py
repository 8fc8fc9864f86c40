"""A calibration stored for a deployment (plan/stored.py): `kimi-operator export-calibration`
writes it from calibration runs, `load` gives back the same Calibration, and anything else is
refused naming its first problem."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kimi_operator.plan import PlanError
from kimi_operator.plan.calibration import Calibration, from_runs
from kimi_operator.plan.configs import Configuration
from kimi_operator.plan.costs import KvTransfer
from kimi_operator.plan.stored import document, load, other_shape
from tests.kimi_operator.plan.test_calibration import run_of, sweep
from tests.support.bench import Cli

# A ConfigMap holds 1 MiB; a calibration is some hundreds of bytes to 2 KB.
MOST_BYTES = 4096


def measured() -> Calibration:
    """A calibration of the fast path with drafts, NIXL hand-overs and a note."""
    fitted = from_runs([("cal", run_of(sweep(8), "latency_specialized"))], "cal", 7)
    assert fitted.costs.fast is not None
    return replace(
        fitted, kv_transfer=KvTransfer(0.01, 3e-7, "measured: cal"), notes=["cal: a note"]
    )


def test_export_then_load_gives_the_same_calibration() -> None:
    calibration = measured()
    text = document(calibration)
    assert load(text) == calibration  # every field, each fitted float to the last bit
    assert len(text.encode()) < MOST_BYTES  # (a GB300 built-in's, its sources said: 2 KB)
    assert json.loads(text)["kind"] == "KimiCalibration"


def test_a_document_that_is_not_a_calibration_is_refused_naming_its_first_problem() -> None:
    good = json.loads(document(measured()))
    cases = {
        "{": "not JSON: ",
        "[]": "kind 'list', not 'KimiCalibration'",
        json.dumps(good | {"kind": "ConfigMap"}): "kind 'ConfigMap', not 'KimiCalibration'",
        json.dumps(good | {"version": 2}): "version 2, not 1: export it again",
        json.dumps(good | {"calibration": {**good["calibration"], "costs": {}}}): (
            "calibration.costs.ordinary: Field required"
        ),
        json.dumps(good | {"calibration": {**good["calibration"], "gpus": "many"}}): (
            "calibration.gpus: Input should be a valid integer"
        ),
        json.dumps(good | {"calibration": {**good["calibration"], "gpus": None}}): (
            "calibration.gpus: none: rerun bench with --gpus N"
        ),
    }
    for text, says in cases.items():
        with pytest.raises(PlanError) as refused:
            load(text)
        assert str(refused.value).startswith(says), (text[:40], str(refused.value))


def test_only_a_calibration_of_the_deployments_shape_is_its_own() -> None:
    calibration = replace(measured(), gpus=16)
    shape = Configuration(name="k3", gpus=16, backend="latency_specialized", draft_tokens=7)
    assert other_shape(calibration, shape) is None
    assert other_shape(calibration, shape.model_copy(update={"gpus": 8})) == (
        "it measured GPUs a group 16, the deployment has 8"
    )
    assert other_shape(calibration, shape.model_copy(update={"backend": "auto"})) == (
        "it measured decode backend 'latency_specialized', the deployment has 'auto'"
    )
    assert other_shape(calibration, shape.model_copy(update={"draft_tokens": 3})) == (
        "it measured draft tokens 7, the deployment has 3"
    )


def test_export_calibration_writes_the_fit_of_the_runs(cli: Cli, tmp_path: Path) -> None:
    runs = []
    for name, results in (("cal-1", run_of(sweep())), ("cal-2", run_of(sweep(noise=(0.004,))))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(results.model_dump_json())
        runs.append(str(tmp_path / name))
    out = tmp_path / "calibration.json"
    argv = ["export-calibration", "--calibration", ",".join(runs), "--output", str(out)]
    done = cli(*argv)
    assert done.code == 0, done.err
    stored = load(out.read_text())
    pooled = from_runs([(run, run_of(sweep())) for run in runs[:1]], "x", None)
    assert (stored.name, stored.origin) == ("cal-1", f"measured: {runs[0]}, {runs[1]}")
    assert stored.costs != pooled.costs  # both sweeps fitted as one, as plan does
    size = len(out.read_bytes())
    assert done.out == f"calibration cal-1 (1 GPUs, auto, 0 drafts): {out}, {size} bytes\n"
    # Not overwritten unless asked; a run of another profile is not a calibration.
    again = cli(*argv)
    assert (again.code, again.err) == (
        2,
        f"error: --output {out} exists: give --force to overwrite it\n",
    )
    assert cli(*argv, "--force").code == 0
    (tmp_path / "replay").mkdir()
    (tmp_path / "replay" / "results.json").write_text(
        run_of(sweep(), profile="agentic").model_dump_json()
    )
    other = ["export-calibration", "--calibration", str(tmp_path / "replay")]
    refused = cli(*other, "--output", str(tmp_path / "x.json"))
    assert refused.code == 2
    assert "a 'agentic' run, not a calibration" in refused.err
    assert not (tmp_path / "x.json").exists()
