"""`kimi-operator plan` on the command line: what it writes; one line, exit 2, for bad input."""

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kimi_operator.bench.results import Summary
from kimi_operator.bench.stub import StubApp
from kimi_operator.bench.traces import dump_trace, generate_trace
from tests.kimi_operator.plan.test_calibration import run_of, sweep
from tests.support.bench import Cli

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "crds" / "samples"
CONFIGS = """\
configurations:
  - {name: tp16-latency, gpus: 16, backend: latency_specialized, draftTokens: 7}
  - {name: tp16-auto, gpus: 16, backend: auto, draftTokens: 7}
  - name: tp8x2-split
    gpus: 8
    draftTokens: 7
    disaggregated: {prefillReplicas: 1, kvTransferS: 0.01}
"""


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text(dump_trace(generate_trace(seed=1, sessions=4, turns=3, duration_s=20)))
    return path


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def plan(cli: Cli, trace: Path, out: Path, *extra: str) -> Any:
    run = cli(
        "plan", "--trace", str(trace), "--gpu-hour-price", "6.5", "--output", str(out), *extra
    )
    assert run.code == 0, run.err
    return json.loads((out / "plan.json").read_text())


def one_error_line(cli: Cli, *argv: str) -> str:
    run = cli(*argv)
    assert run.code == 2
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("error: ")
    return lines[0]


def test_a_plan_has_benchs_summary_keys_and_compares_with_bench(
    cli: Cli, trace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "plan"
    data = plan(cli, trace, out, "--config", str(write(tmp_path, "c.yaml", CONFIGS)))
    names = [c["name"] for c in data["configurations"]]
    assert names == ["tp16-latency", "tp16-auto", "tp8x2-split"]
    for entry in data["configurations"]:
        assert set(entry["summary"]) == set(Summary.model_fields)
        assert entry["summary"]["tasks"]["completed"] == 4
    latency, stock, split = data["configurations"]
    assert (latency["gpus"], stock["gpus"], split["gpus"]) == (16, 16, 16)
    assert stock["fast_path_fraction"] == 0.0  # `auto` never runs the fast path
    assert 0 < latency["fast_path_fraction"] <= 1
    assert split["fast_path_fraction"] == 1.0  # decode groups never see a prefill
    table, *sections = (out / "report.md").read_text().split("\n## ")
    assert table.count("| tp16-") == 2
    # GB300 built-ins priced all three: each beside AIConfigurator at batch 1 and maxNumSeqs.
    (beside,) = [s for s in sections if s.startswith("GB300 built-ins beside AIConfigurator")]
    assert [beside.count(f"| {name} |") for name in names] == [2, 2, 2]
    assert [len(entry["aiconfigurator"]) for entry in data["configurations"]] == [2, 2, 2]
    assert (out / "plan.png").exists()
    compared = cli("bench", "compare", str(out / "tp16-auto"), str(out / "tp16-latency"))
    assert compared.code == 0, compared.err
    assert "fast-path fraction" in compared.out
    assert "NOT COMPARABLE" not in compared.out  # same trace, model, GPUs: a fair A/B


def test_a_kimideployment_is_planned_as_its_spec_says(
    cli: Cli, trace: Path, tmp_path: Path
) -> None:
    data = plan(cli, trace, tmp_path / "plan", "--config", str(SAMPLES / "k3-tp8-dspark.yaml"))
    (entry,) = data["configurations"]
    assert entry["name"] == "k3-tp8-dspark"
    assert entry["configuration"]["draftTokens"] == 7
    assert entry["configuration"]["maxNumSeqs"] == 8
    assert entry["calibration"] == "gb300-tp8-latency_specialized-dspark7"


def test_target_finds_the_fewest_groups(cli: Cli, trace: Path, tmp_path: Path) -> None:
    def p90(replicas: int) -> float:
        text = f"configurations: [{{name: one, gpus: 8, maxNumSeqs: 1, replicas: {replicas}}}]\n"
        config = write(tmp_path, f"r{replicas}.yaml", text)
        data = plan(cli, trace, tmp_path / f"r{replicas}", "--config", str(config))
        value: float = data["configurations"][0]["summary"]["tasks"]["completion_s"]["p90"]
        return value

    # One request at a time per group, four sessions: four groups serve them all at once.
    seconds = p90(4) * 1.0001
    config = write(tmp_path, "one.yaml", "configurations: [{name: one, gpus: 8, maxNumSeqs: 1}]\n")
    target = f"task_completion_p90={seconds:.6f}"
    found = plan(cli, trace, tmp_path / "t", "--config", str(config), "--target", target)
    groups = found["configurations"][0]["groups_for_target"]
    assert 1 < groups <= 4
    assert p90(groups) <= seconds < p90(groups - 1)
    hopeless = plan(
        cli, trace, tmp_path / "h", "--config", str(config), "--target", "ttft_p50=0.001"
    )
    assert hopeless["configurations"][0]["groups_for_target"] is None  # not even with 64
    assert hopeless["target"] == "ttft_p50 <= 0.001 s"


@pytest.mark.parametrize(
    ("config", "says"),
    [
        (SAMPLES / "rejected" / "k3-lora-tp12.yaml", "the API would refuse it: spec.gpus"),
        ("configurations: [{name: a, gpus: 8, speed: 2}]", "configurations.0.speed: Extra inputs"),
        ("configurations: [{name: a, gpus: 8}, {name: a, gpus: 16}]", "names must differ: a"),
        ("configurations: [{name: a, gpus: 4}]", "no calibration for 4 GPUs"),
        ("configurations: [{name: a, gpus: 8, calibration: x}]", "calibration 'x' is neither"),
        ("configurations: [", "not valid YAML"),
    ],
)
def test_a_bad_configuration_is_one_line(
    cli: Cli, trace: Path, tmp_path: Path, config: Path | str, says: str
) -> None:
    path = config if isinstance(config, Path) else write(tmp_path, "c.yaml", config)
    argv = ["plan", "--trace", str(trace), "--gpu-hour-price", "1", "--output", str(tmp_path / "o")]
    assert says in one_error_line(cli, *argv, "--config", str(path))
    assert not (tmp_path / "o" / "plan.json").exists()


def test_bad_inputs_are_one_line(cli: Cli, trace: Path, tmp_path: Path) -> None:
    base = ["plan", "--gpu-hour-price", "1", "--output", str(tmp_path / "o")]
    config = ["--config", str(write(tmp_path, "c.yaml", CONFIGS))]
    missing = str(tmp_path / "none.jsonl")
    assert "cannot read the trace" in one_error_line(cli, *base, "--trace", missing, *config)
    bad = write(tmp_path, "bad.jsonl", "{nope\n")
    assert "line 1: not JSON" in one_error_line(cli, *base, "--trace", str(bad), *config)
    assert "needs --calibration RUN or --config" in one_error_line(
        cli, *base, "--trace", str(trace)
    )
    says = one_error_line(cli, *base, "--trace", str(trace), *config, "--target", "speed=2")
    assert "--target: 'speed=2': expected METRIC_PERCENTILE=SECONDS" in says
    agentic = tmp_path / "agentic"
    agentic.mkdir()
    (agentic / "results.json").write_text(run_of(sweep(), profile="agentic").model_dump_json())
    says = one_error_line(cli, *base, "--trace", str(trace), "--calibration", str(agentic))
    assert "a 'agentic' run, not a calibration" in says
    drafted = tmp_path / "drafted"
    drafted.mkdir()
    (drafted / "results.json").write_text(run_of(sweep(8), "latency_specialized").model_dump_json())
    says = one_error_line(cli, *base, "--trace", str(trace), "--calibration", str(drafted))
    assert "give its draft tokens with --calibration-drafts N" in says


def test_a_calibration_run_is_planned_as_measured_first(
    cli: Cli, trace: Path, tmp_path: Path
) -> None:
    measured = tmp_path / "cpu"
    measured.mkdir()
    (measured / "results.json").write_text(run_of(sweep()).model_dump_json())
    data = plan(cli, trace, tmp_path / "p", "--calibration", str(measured), "--config",
                str(write(tmp_path, "c.yaml", CONFIGS)))  # fmt: skip
    first = data["configurations"][0]
    assert (first["name"], first["calibration"], first["gpus"]) == ("as-measured", "cpu", 1)
    assert first["configuration"]["maxNumSeqs"] == 8  # the largest batch it measured
    # The GB300 configurations keep their built-in calibrations (the run was on 1 GPU).
    assert data["configurations"][1]["calibration"] == "gb300-tp16-latency_specialized-dspark7"


def test_sweeps_joined_by_commas_plan_as_one_calibration(
    cli: Cli, trace: Path, tmp_path: Path
) -> None:
    paths = []
    for name, results in (
        ("cpu", run_of(sweep())),
        ("again", run_of(sweep(noise=(0.004,)))),
        ("other", run_of(sweep(), backend="latency_specialized")),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(results.model_dump_json())
        paths.append(str(tmp_path / name))
    cpu, again, other = paths
    data = plan(cli, trace, tmp_path / "p", "--calibration", f"{cpu},{again}")
    assert data["configurations"][0]["calibration"] == "cpu"
    calibration = data["calibrations"][0]
    assert calibration["origin"] == f"measured: {cpu}, {again}"
    # "again"'s requests (0.004 s late) moved the fit (test_calibration has the figures).
    alone = plan(cli, trace, tmp_path / "q", "--calibration", cpu)["calibrations"][0]
    assert calibration["costs"]["prefill"] != alone["costs"]["prefill"]
    base = ["plan", "--trace", str(trace), "--gpu-hour-price", "1", "--output", str(tmp_path / "o")]
    says = one_error_line(cli, *base, "--calibration", f"{cpu},{other}")
    assert f"{other}: pooled with {cpu}, but its decode backend is 'latency_specialized'" in says
    says = one_error_line(cli, *base, "--calibration", f"{cpu},{again},{cpu}")
    assert f"{cpu} pooled twice" in says
    assert not (tmp_path / "o").exists()


def test_bench_refuses_requests_with_the_calibration_profile(cli: Cli, tmp_path: Path) -> None:
    argv = ["bench", "--endpoint", "http://127.0.0.1:1/v1", "--profile", "calibration"]
    says = one_error_line(cli, *argv, "--requests", "3", "--output", str(tmp_path))
    assert "--requests does not apply to --profile calibration" in says


def test_without_matplotlib_the_plot_is_skipped_with_one_line(
    cli: Cli, trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as when not installed
    config = write(tmp_path, "c.yaml", "configurations: [{name: a, gpus: 8}]\n")
    argv = ["--trace", str(trace), "--gpu-hour-price", "1", "--config", str(config)]
    run = cli("plan", *argv, "--output", str(tmp_path / "o"))
    assert run.code == 0
    *notes, last = run.err.splitlines()  # the built-in's sources, then the plot's one line
    assert last == "plot skipped: matplotlib is missing (pip install 'kimi-operator[bench]')"
    assert all(note.startswith("note: gb300-tp8-") for note in notes)
    assert (tmp_path / "o" / "plan.json").exists()
    assert not (tmp_path / "o" / "plan.png").exists()


def test_a_calibration_run_against_a_server_plans(
    cli: Cli, stub: Callable[..., tuple[str, StubApp]], tmp_path: Path
) -> None:
    """bench --profile calibration over real HTTP (the scheduled stub), then plan from it."""
    root, app = stub(ttft_s=0.01, step_s=0.002, decode_backend="auto", prefix_caching=False)
    run = tmp_path / "cal"
    argv = ["bench", "--endpoint", root, "--profile", "calibration", "--concurrency", "2"]
    argv += ["--prompt-tokens", "64", "--output-tokens", "6", "--gpus", "1", "--warmup", "0"]
    done = cli(*argv, "--output", str(run), "--no-progress")
    assert done.code == 0, done.err
    results = json.loads((run / "results.json").read_text())
    assert results["config"]["profile"] == "calibration"
    assert results["config"]["replay"] == "closed"
    assert results["tasks"] == []  # phases, not tasks
    assert results["summary"]["tasks"] is None
    groups = [r["group"] for r in results["requests"]]

    # Three passes: batches 1 and 2 at contexts 8 and 32 (falling in the second), prompts 32 and
    # 64 alone and as a hit (the first pass also fills each), a count under each sent twice, and
    # a probe after a starter with no streams (a batch of 2 leaves no room for any).
    def one_pass(batches: list[str], fills: int) -> list[str]:
        return [
            *[f"decode:b{b}:c{c}" for c in (8, 32) for b in batches for _ in range(int(b))],
            "prefill:p32", "prefill:p64",
            *["prefix:p32"] * (1 + fills), *["prefix:p64"] * (1 + fills),
            *["fresh:p32"] * 2, *["fresh:p64"] * 2,
            "streams:s0:starter", "streams:s0:probe",
        ]  # fmt: skip

    rising, falling = ["1", "2"], ["2", "1"]
    assert groups == one_pass(rising, 1) + one_pass(falling, 0) + one_pass(rising, 0)
    assert app.state.requests == len(groups)
    turns = [
        {"start_s": 0, "prompt_tokens": 40, "output_tokens": 8, "id": "a", "session": "s"},
        {"start_s": 0, "prompt_tokens": 60, "output_tokens": 8, "id": "b", "session": "s"}
        | {"after": "a", "think_s": 0.1},
    ]
    small = write(tmp_path, "small.jsonl", "".join(json.dumps(t) + "\n" for t in turns))
    data = plan(cli, small, tmp_path / "p", "--calibration", str(run))
    first = data["configurations"][0]
    assert (first["name"], first["calibration"], first["gpus"]) == ("as-measured", "cal", 1)
    # The server as it runs (what it reports), not the sweep's largest batch (2) and defaults.
    schedule = app.schedule
    assert {
        key: first["configuration"][key]
        for key in ("maxNumSeqs", "maxNumBatchedTokens", "prefixCaching")
    } == {
        "maxNumSeqs": schedule.max_num_seqs,
        "maxNumBatchedTokens": schedule.max_num_batched_tokens,
        "prefixCaching": schedule.prefix_caching,
    }
    assert first["summary"]["tasks"]["completed"] == 1
    # The same trace measured: a plan and a measurement set side by side as comparable.
    argv = ["bench", "--endpoint", root, "--profile", "agentic", "--trace", str(small)]
    measured = cli(*argv, "--gpus", "1", "--output", str(tmp_path / "m"), "--no-progress")
    assert measured.code == 0, measured.err
    compared = cli("bench", "compare", str(tmp_path / "p" / "as-measured"), str(tmp_path / "m"))
    assert compared.code == 0, compared.err
    assert "NOT COMPARABLE" not in compared.out, compared.out


def test_a_what_if_with_fewer_drafts_reports_the_acceptance_it_simulates(
    cli: Cli, trace: Path, tmp_path: Path
) -> None:
    """Three drafts planned on the 7-draft calibration (6 accepted): the plan reports what it
    simulated, 1 + about 2.8 tokens a step, not the calibration's 7."""
    text = (
        "configurations: [{name: three, gpus: 16, draftTokens: 3, "
        "calibration: gb300-tp16-latency_specialized-dspark7}]\n"
    )
    data = plan(cli, trace, tmp_path / "p", "--config", str(write(tmp_path, "c.yaml", text)))
    (entry,) = data["configurations"]
    length = entry["summary"]["server_metrics"]["spec_decode_acceptance_length"]
    assert length == pytest.approx(1 + 0.96145 + 0.96145**2 + 0.96145**3, abs=2e-3)


def test_a_calibration_alone_is_compared_with_gb300_shapes(
    cli: Cli, trace: Path, tmp_path: Path
) -> None:
    """No --config: the calibrated deployment beside TP16 and TP8 groups of each backend (the
    GB300 built-ins: the run was on 1 GPU), drafting as it did."""
    measured = tmp_path / "cpu"
    measured.mkdir()
    (measured / "results.json").write_text(run_of(sweep()).model_dump_json())
    data = plan(cli, trace, tmp_path / "p", "--calibration", str(measured))
    assert [(c["name"], c["gpus"], c["calibration"]) for c in data["configurations"]] == [
        ("as-measured", 1, "cpu"),
        ("gb300-tp16-latency", 16, "gb300-tp16-latency_specialized-nodraft"),
        ("gb300-tp16-auto", 16, "gb300-tp16-auto-nodraft"),
        ("gb300-tp8-latency", 8, "gb300-tp8-latency_specialized-nodraft"),
        ("gb300-tp8-auto", 8, "gb300-tp8-auto-nodraft"),
        # On 16 GPUs: two aggregated TP8 groups, and a TP8 prefill group feeding a TP8 decode one.
        ("gb300-tp8x2-latency", 16, "gb300-tp8-latency_specialized-nodraft"),
        ("gb300-tp8-p1d1", 16, "gb300-tp8-latency_specialized-nodraft"),
    ]


def test_the_spec_that_meets_the_target_at_the_least_cost_is_written_and_valid(
    cli: Cli, trace: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "k3.yaml"
    run = cli(
        "plan", "--trace", str(trace), "--gpu-hour-price", "6.5", "--output", str(tmp_path / "p"),
        "--config", str(write(tmp_path, "c.yaml", CONFIGS)),
        "--target", "task_completion_p90=600", "--emit-spec", str(spec),
    )  # fmt: skip
    assert run.code == 0, run.err
    data = json.loads((tmp_path / "p" / "plan.json").read_text())
    # Each candidate's cost at its fewest groups for the target, modelled again here.
    costs = {}
    for entry in data["configurations"]:
        config = write(
            tmp_path,
            f"{entry['name']}.yaml",
            "configurations: ["
            + json.dumps(entry["configuration"] | {"replicas": entry["groups_for_target"]})
            + "]\n",
        )
        again = plan(cli, trace, tmp_path / entry["name"], "--config", str(config))
        costs[entry["name"]] = again["configurations"][0]["cost_per_task_usd"]
    cheapest = min(costs, key=lambda name: costs[name])
    chosen = next(e for e in data["configurations"] if e["name"] == cheapest)
    body = yaml.safe_load(spec.read_text())
    assert body["spec"]["gpus"] == chosen["configuration"]["gpus"]
    assert body["spec"]["replicas"] == chosen["groups_for_target"]
    assert body["spec"]["decode"]["backend"] == chosen["configuration"]["backend"]
    assert body["spec"]["autoscaling"]["minReplicas"] == chosen["groups_for_target"]
    assert f"spec: {spec}: {cheapest} with" in run.out
    validated = cli("validate", str(spec))
    assert validated.code == 0, validated.out + validated.err


def test_a_spec_needs_a_target(cli: Cli, trace: Path, tmp_path: Path) -> None:
    config = str(write(tmp_path, "c.yaml", CONFIGS))
    argv = ["plan", "--trace", str(trace), "--gpu-hour-price", "1", "--config", config]
    says = one_error_line(cli, *argv, "--output", str(tmp_path / "p"), "--emit-spec", "x.yaml")
    assert "--emit-spec needs --target" in says


def test_a_trace_longer_than_the_calibrated_prompts_is_said(cli: Cli, tmp_path: Path) -> None:
    """The sweep's prompts reach 1,024 tokens: a trace whose prompts are longer is planned on
    extrapolated prefill costs, and the plan says by how much and what to calibrate with."""
    measured = tmp_path / "cpu"
    measured.mkdir()
    (measured / "results.json").write_text(run_of(sweep()).model_dump_json())
    for longest in (1024, 1500):
        trace = write(tmp_path, f"t{longest}.jsonl", "".join(
            json.dumps({"start_s": 0.1 * i, "prompt_tokens": prompt, "output_tokens": 4}) + "\n"
            for i, prompt in enumerate((300, longest))
        ))  # fmt: skip
        run = cli("plan", "--trace", str(trace), "--calibration", str(measured),
                  "--gpu-hour-price", "1", "--output", str(tmp_path / f"p{longest}"))  # fmt: skip
        assert run.code == 0, run.err
        said = f"cpu measured prompts of up to 1024 tokens and the trace's reach {longest}"
        assert (said in run.err) == (longest > 1024), run.err
    assert "--prompt-tokens 1500 or more" in run.err
