"""The agentic profile: trace replay on time, fan-out, shared prefixes; the trace generator."""

import json
from collections.abc import Callable
from pathlib import Path

from kimi_operator.bench.profiles import Prompts
from kimi_operator.bench.traces import generate_trace, parse_trace, plan_trace, trace_digest
from tests.support.bench import Cli, results

TRACE = (
    '{"start_s": 0.0, "prompt_tokens": 40, "output_tokens": 4, "prefix_group": "s1",'
    ' "shared_prefix_tokens": 30}\n'
    '{"start_s": 0.3, "prompt_tokens": 50, "output_tokens": 4, "prefix_group": "s1",'
    ' "shared_prefix_tokens": 45, "fanout": 3}\n'
    '{"start_s": 0.1, "prompt_tokens": 20, "output_tokens": 6}\n'
)


def test_replay_keeps_the_trace_timetable_fanout_and_prefixes(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, app = stub(ttft_s=0.01, step_s=0.002)
    trace = tmp_path / "trace.jsonl"
    trace.write_text(TRACE)
    out = tmp_path / "out"
    run = cli(
        "bench",
        "--endpoint",
        url,
        "--profile",
        "agentic",
        "--trace",
        str(trace),
        "--warmup",
        "0",
        "--output",
        str(out),
    )
    assert run.code == 0, run.err
    data = results(out)
    records = data["requests"]
    assert [r["scheduled_start_s"] for r in records] == [0.0, 0.1, 0.3, 0.3, 0.3]
    for record in records:
        assert record["error"] is None
        assert (
            0 <= record["start_s"] - record["scheduled_start_s"] < 0.1
        )  # on time, well apart from the next offset
    assert [r["output_tokens"] for r in records] == [4, 6, 4, 4, 4]
    assert data["config"]["trace"] == {
        "source": str(trace),
        "sha256": trace_digest(parse_trace(TRACE, "t")),
        "entries": 3,
        "seed": None,
    }
    assert data["config"]["concurrency"] is None
    # A trace without sessions stays valid: open replay, each entry a task of its own.
    assert data["config"]["replay"] == "open"
    assert [t["requests"] for t in data["tasks"]] == [[0], [1], [2, 3, 4]]
    assert data["summary"]["tasks"]["completed"] == 3
    words = [b["prompt"].split() for b in app.state.bodies]  # type: ignore[attr-defined]
    first = next(w for w in words if len(w) == 40)
    fanned = [w for w in words if len(w) == 50]
    assert len(fanned) == 3
    assert all(words[:30] == first[:30] for words in fanned)  # the group's shared prefix
    assert all(words[:45] == fanned[0][:45] for words in fanned)
    assert fanned[0][45:] != fanned[1][45:]  # each sub-agent has its own task


def test_concurrency_caps_a_replay_and_late_starts_are_reported(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.6, step_s=0.01)
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"start_s": 0, "prompt_tokens": 5, "output_tokens": 50, "fanout": 3}\n')
    out = tmp_path / "out"
    run = cli(
        "bench",
        "--endpoint",
        url,
        "--profile",
        "agentic",
        "--trace",
        str(trace),
        "--concurrency",
        "1",
        "--warmup",
        "0",
        "--output",
        str(out),
    )
    assert run.code == 0, run.err
    data = results(out)
    starts = sorted(r["start_s"] for r in data["requests"])
    assert starts[1] > 1.0
    assert "2 request(s) started over 1s after their trace time" in data["summary"]["warnings"]


def test_requests_limit_cuts_the_replay(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.001, step_s=0.001)
    out = tmp_path / "out"
    run = cli(
        "bench",
        "--endpoint",
        url,
        "--profile",
        "agentic",
        "--requests",
        "4",
        "--warmup",
        "0",
        "--output",
        str(out),
        "--seed",
        "3",
    )
    assert run.code == 0, run.err
    data = results(out)
    assert len(data["requests"]) == 4
    assert data["config"]["trace"]["source"] == "synthetic"
    assert data["config"]["trace"]["seed"] == 3
    assert data["requests"][0]["scheduled_start_s"] == 0  # the replay starts with a request


def test_generator_is_deterministic_valid_and_agent_shaped(cli: Cli, tmp_path: Path) -> None:
    run = cli("bench", "trace", "--seed", "3", "--sessions", "4", "--turns", "5")
    assert run.code == 0
    entries = parse_trace(run.out, "generated")  # valid by the same rules as user traces
    assert entries == generate_trace(seed=3, sessions=4, turns=5)
    assert entries != generate_trace(seed=4, sessions=4, turns=5)
    assert len(entries) == 20
    assert [e.start_s for e in entries] == sorted(e.start_s for e in entries)
    groups = {e.prefix_group for e in entries}
    assert len(groups) == 4
    for group in groups:
        turns = [e for e in entries if e.prefix_group == group]
        contexts = [e.shared_prefix_tokens for e in turns]
        assert contexts == sorted(contexts)  # each turn carries the conversation so far
    target = tmp_path / "t.jsonl"
    assert (
        cli(
            "bench",
            "trace",
            "--seed",
            "3",
            "--sessions",
            "4",
            "--turns",
            "5",
            "--output",
            str(target),
        ).code
        == 0
    )
    assert target.read_text() == run.out
    assert all(json.loads(line) for line in run.out.splitlines())


def test_generated_trace_plans_fan_out_into_requests() -> None:
    entries = generate_trace(seed=0)
    plan = plan_trace(entries, None)
    assert len(plan) == sum(e.fanout for e in entries)
    assert any(e.fanout > 1 for e in entries)
    assert [r.index for r in plan] == list(range(len(plan)))


def test_trace_to_an_unwritable_file(cli: Cli, tmp_path: Path) -> None:
    run = cli("bench", "trace", "--output", str(tmp_path / "missing" / "t.jsonl"))
    assert run.code == 2
    assert run.err.startswith("error: cannot write ")
    assert run.err.count("\n") == 1


def test_prompts_are_a_function_of_seed_and_index() -> None:
    plan = plan_trace(parse_trace(TRACE, "t"), None)
    first = [Prompts(1).text(r) for r in plan]
    assert first == [Prompts(1).text(r) for r in plan]
    assert first != [Prompts(2).text(r) for r in plan]
    assert [len(p.split()) for p in first] == [40, 20, 50, 50, 50]
