"""`bench compare`: ratios B/A, and loud warnings when the runs do not measure the same thing."""

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kimi_operator.bench.results import Results
from tests.support.bench import Cli, results


@pytest.fixture(scope="module")
def runs(
    timed_stub: Callable[..., str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Run A: one token per chunk; run B: three per chunk (speculative decoding's shape)."""
    from kimi_operator.cli import main  # noqa: PLC0415

    made = {}
    for name, per_chunk in (("a", 1), ("b", 3)):
        url = timed_stub(ttft_s=0.02, step_s=0.004, tokens_per_chunk=per_chunk)
        directory = tmp_path_factory.mktemp(name)
        args = [
            "bench",
            "--endpoint",
            url,
            "--requests",
            "3",
            "--output-tokens",
            "120",
            "--gpus",
            "8",
            "--gpu-hour-price",
            "2",
            "--output",
            str(directory),
            "--no-progress",
        ]
        assert main(args) == 0
        made[name] = directory
    return made


def rewrite(source: Path, target: Path, **config: object) -> Path:
    data = Results.model_validate_json((source / "results.json").read_text())
    data = data.model_copy(update={"config": data.config.model_copy(update=config)})
    target.mkdir()
    (target / "results.json").write_text(data.model_dump_json())
    return target


def test_comparable_runs_show_ratios_without_warnings(cli: Cli, runs: dict[str, Path]) -> None:
    run = cli("bench", "compare", str(runs["a"]), str(runs["b"]))
    assert run.code == 0
    assert run.err == ""
    assert "NOT COMPARABLE" not in run.out
    a, b = results(runs["a"])["summary"], results(runs["b"])["summary"]
    rows = {line[:28].strip(): line.split() for line in run.out.splitlines()}
    ratio = b["decode_tokens_per_s"]["p50"] / a["decode_tokens_per_s"]["p50"]
    assert rows["decode tok/s p50"][-1] == f"{ratio:.2f}x"
    assert 2.7 < ratio < 3.3  # 3 tokens per chunk against 1, same steps
    assert rows["tokens per chunk"][-1] == "3.00x"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"gpus": 16}, "GPU count differs: A=8, B=16"),
        ({"model": "other"}, "model differs: A=moonshotai/Kimi-K3, B=other"),
        ({"profile": "long-context"}, "profile differs: A=headline, B=long-context"),
        ({"concurrency": 4}, "concurrency differs: A=1, B=4"),
        ({"prompt_tokens": 32768.0}, "context length differs: A asked 1 prompt tokens, B 32,768"),
        ({"output_tokens": 1000.0}, "output length differs: A 120 tokens, B 1,000"),
    ],
)
def test_mismatched_configs_are_flagged_loudly(
    cli: Cli, runs: dict[str, Path], tmp_path: Path, change: dict[str, object], says: str
) -> None:
    other = rewrite(runs["b"], tmp_path / "b2", **change)
    run = cli("bench", "compare", str(runs["a"]), str(other))
    assert run.code == 0
    assert "!! WARNING: THESE RUNS ARE NOT COMPARABLE" in run.out
    assert f"!!  - {says}" in run.out
    assert "warning: the runs are not comparable (1 reason(s) above)" in run.err
    strict = cli("bench", "compare", "--strict", str(runs["a"]), str(other))
    assert strict.code == 1


def test_measured_context_lengths_are_compared_too(
    cli: Cli, runs: dict[str, Path], tmp_path: Path
) -> None:
    data = Results.model_validate_json((runs["b"] / "results.json").read_text())
    summary = data.summary
    assert summary.prompt_tokens is not None
    longer = summary.prompt_tokens.model_copy(update={"p50": 900.0})
    data = data.model_copy(update={"summary": summary.model_copy(update={"prompt_tokens": longer})})
    (tmp_path / "results.json").write_text(data.model_dump_json())
    run = cli("bench", "compare", str(runs["a"]), str(tmp_path / "results.json"))
    assert "the servers counted median prompts of 1 (A) and 900 (B) tokens" in run.out


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot read: No such file or directory"),
        ("not json", "not a bench results file"),
        ('{"config": {}}', "not a bench results file: config.endpoint: Field required"),
    ],
)
def test_unreadable_results(
    cli: Cli, runs: dict[str, Path], tmp_path: Path, content: str | None, says: str
) -> None:
    if content is not None:
        (tmp_path / "results.json").write_text(content)
    run = cli("bench", "compare", str(runs["a"]), str(tmp_path))
    assert run.code == 2
    assert run.err.count("\n") == 1
    assert run.err.startswith(f"error: {tmp_path / 'results.json'}: ")
    assert says in run.err


def test_compare_writes_a_report_and_overlay_plots(
    cli: Cli, runs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "ab"
    run = cli("bench", "compare", str(runs["a"]), str(runs["b"]), "--output", str(out))
    assert run.code == 0, run.err
    report = (out / "compare.md").read_text()
    assert f"A: `{runs['a']}`, B: `{runs['b']}`" in report
    assert run.out in report  # the same table as printed
    for plot in ("itl_cdf_compare.png", "decode_rate_compare.png"):
        assert (out / plot).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_compare_to_an_unwritable_directory(
    cli: Cli, runs: dict[str, Path], tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = cli("bench", "compare", str(runs["a"]), str(runs["b"]), "--output", str(blocker))
    assert run.code == 2
    assert run.err.startswith(f"error: cannot write to {blocker}")
    assert run.err.count("\n") == 1


@pytest.fixture(scope="module")
def task_runs(
    timed_stub: Callable[..., str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """One generated trace of dependent turns replayed closed on a slow and on a fast server."""
    from kimi_operator.cli import main  # noqa: PLC0415

    trace = tmp_path_factory.mktemp("trace") / "trace.jsonl"
    args = ["bench", "trace", "--sessions", "2", "--turns", "2", "--duration", "1"]
    assert main([*args, "--output", str(trace)]) == 0
    made = {}
    for name, ttft in (("slow", 0.3), ("fast", 0.1)):
        url = timed_stub(ttft_s=ttft, step_s=0.0002)
        directory = tmp_path_factory.mktemp(name)
        assert main([
            "bench", "--endpoint", url, "--profile", "agentic", "--trace", str(trace),
            "--gpus", "8", "--gpu-hour-price", "2", "--output", str(directory), "--no-progress",
        ]) == 0  # fmt: skip
        made[name] = directory
    return made


def test_task_figures_are_compared_with_ratios(cli: Cli, task_runs: dict[str, Path]) -> None:
    run = cli("bench", "compare", str(task_runs["slow"]), str(task_runs["fast"]))
    assert run.code == 0, run.out
    a, b = (results(task_runs[n])["summary"]["tasks"] for n in ("slow", "fast"))
    rows = {line[:28].strip(): line.split() for line in run.out.splitlines()}
    assert rows["replay"][-2:] == ["closed", "closed"]
    assert rows["tasks per hour"][-1] == f"{b['tasks_per_hour'] / a['tasks_per_hour']:.2f}x"
    assert rows["$ per completed task"][-1] == (
        f"{b['cost_per_task_usd'] / a['cost_per_task_usd']:.2f}x"
    )
    completion = b["completion_s"]["p50"] / a["completion_s"]["p50"]
    assert rows["task completion (s) p50"][-1] == f"{completion:.2f}x"
    assert completion < 0.95  # a faster server finishes the same tasks sooner
    assert rows["tasks completed / failed"][-6:] == ["2", "/", "0", "2", "/", "0"]


def test_a_different_replay_mode_is_not_an_ab(
    cli: Cli, task_runs: dict[str, Path], tmp_path: Path
) -> None:
    other = rewrite(task_runs["fast"], tmp_path / "open", replay="open")
    run = cli("bench", "compare", "--strict", str(task_runs["slow"]), str(other))
    assert run.code == 1
    assert "!!  - replay differs: A=closed, B=open" in run.out


def test_hardware_comparison_is_framed_as_capacity(
    cli: Cli, task_runs: dict[str, Path], tmp_path: Path
) -> None:
    bigger = rewrite(task_runs["fast"], tmp_path / "16", gpus=16)
    plain = cli("bench", "compare", "--strict", str(task_runs["slow"]), str(bigger))
    assert plain.code == 1
    assert "GPU count differs: A=8, B=16 (`bench compare --hardware`" in plain.out
    run = cli("bench", "compare", "--hardware", "--strict", str(task_runs["slow"]), str(bigger))
    assert run.code == 0, run.out
    assert "NOT COMPARABLE" not in run.out
    assert "== HARDWARE COMPARISON: A on 8 GPUs, B on 16 GPUs" in run.out
    assert "It cannot show what the" in run.out
    a, b = (results(task_runs[n])["summary"]["tasks"] for n in ("slow", "fast"))
    rows = {line[:28].strip(): line.split() for line in run.out.splitlines()}
    per_gpu = (b["tasks_per_hour"] / 16) / (a["tasks_per_hour"] / 8)
    assert rows["tasks per hour per GPU"][-1] == f"{per_gpu:.2f}x"
    assert "output tok/s per GPU" in rows
    same = cli("bench", "compare", "--hardware", str(task_runs["slow"]), str(task_runs["fast"]))
    assert "!!  - both runs used 8 GPUs: not a hardware comparison (drop --hardware)" in same.out


def test_hardware_comparison_needs_gpu_counts(
    cli: Cli, task_runs: dict[str, Path], tmp_path: Path
) -> None:
    unknown = rewrite(task_runs["fast"], tmp_path / "none", gpus=None)
    run = cli("bench", "compare", "--hardware", str(task_runs["slow"]), str(unknown))
    assert run.code == 2
    assert run.err == (
        "error: --hardware needs both runs' GPU counts: run B has none "
        "(bench --gpus N or --deployment)\n"
    )


def test_results_written_before_tasks_still_load(
    cli: Cli, runs: dict[str, Path], tmp_path: Path
) -> None:
    data = results(runs["b"])
    del data["tasks"], data["summary"]["tasks"], data["config"]["replay"]
    (tmp_path / "results.json").write_text(json.dumps(data))
    run = cli("bench", "compare", str(runs["a"]), str(tmp_path))
    assert run.code == 0, run.err
    assert "tokens per chunk" in run.out
    assert "task completion" not in run.out
