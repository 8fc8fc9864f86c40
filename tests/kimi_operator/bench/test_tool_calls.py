"""Tool-using agent requests: a trace's `tools` go out with `tool_choice: "auto"`, and the results
count the answers that came back with structured tool calls, or with the markup unparsed."""

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kimi_operator.bench import BenchError
from kimi_operator.bench.traces import (
    CODING_AGENT_TOOLS,
    dump_trace,
    generate_trace,
    parse_trace,
)
from tests.support.bench import Cli, results

READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}
RUN_SHELL = {"type": "function", "function": {"name": "run_shell"}}
TRACE = "".join(
    json.dumps(entry) + "\n"
    for entry in (
        {"start_s": 0.0, "prompt_tokens": 20, "output_tokens": 5, "tools": [READ_FILE, RUN_SHELL]},
        {"start_s": 0.05, "prompt_tokens": 20, "output_tokens": 5},
        {"start_s": 0.1, "prompt_tokens": 20, "output_tokens": 5, "tools": [RUN_SHELL]},
    )
)


def _run(cli: Cli, url: str, tmp_path: Path, *extra: str) -> tuple[int, str, Path]:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(TRACE)
    out = tmp_path / "out"
    run = cli(
        "bench", "--endpoint", url, "--profile", "agentic", "--trace", str(trace),
        "--warmup", "0", "--output", str(out), *extra,
    )  # fmt: skip
    return run.code, run.err + run.out, out


def test_tool_using_requests_are_sent_with_their_tools_and_counted_when_answered_with_calls(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, app = stub(ttft_s=0.01, step_s=0.002)
    code, text, out = _run(cli, url, tmp_path, "--api", "chat")
    assert code == 0, text
    bodies = sorted(app.state.bodies, key=lambda b: len(b.get("tools", [])))  # type: ignore[attr-defined]
    assert "tools" not in bodies[0]
    assert "tool_choice" not in bodies[0]
    assert bodies[1]["tools"] == [RUN_SHELL]  # as the trace has it
    assert bodies[2]["tools"][0] == READ_FILE
    assert {b.get("tool_choice") for b in bodies[1:]} == {"auto"}
    data = results(out)
    assert [r["tool_calls"] for r in data["requests"]] == [1, None, 1]
    assert data["summary"]["tool_calls"] == {
        "requests": 2,
        "with_tool_calls": 2,
        "markup_in_text": 0,
    }
    assert (
        "tool-using requests with structured tool calls | 2 / 2" in (out / "report.md").read_text()
    )


def test_answers_with_unparsed_markup_count_as_no_tool_calls_and_are_warned_about(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.01, step_s=0.002, tool_parser=False)
    code, text, out = _run(cli, url, tmp_path, "--api", "chat")
    assert code == 0, text
    data = results(out)
    assert [r["tool_calls"] for r in data["requests"]] == [0, None, 0]
    assert [r["tool_markup"] for r in data["requests"]] == [True, False, True]
    assert data["summary"]["tool_calls"] == {
        "requests": 2,
        "with_tool_calls": 0,
        "markup_in_text": 2,
    }
    (warning,) = [w for w in data["summary"]["warnings"] if "tool-call markup" in w]
    assert warning.startswith("2 tool-using request(s)")
    assert "--tool-call-parser kimi_k3" in warning


def test_a_run_without_tools_reports_no_tool_figures(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.01, step_s=0.002)
    out = tmp_path / "out"
    run = cli("bench", "--endpoint", url, "--requests", "2", "--output-tokens", "3",
              "--warmup", "0", "--api", "chat", "--output", str(out))  # fmt: skip
    assert run.code == 0, run.err
    data = results(out)
    assert data["summary"]["tool_calls"] is None
    assert {r["tool_calls"] for r in data["requests"]} == {None}


def test_tools_need_the_chat_api(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, app = stub()
    code, text, _ = _run(cli, url, tmp_path)
    assert code != 0
    assert "offer tools" in text
    assert "--api chat" in text
    assert app.state.requests == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("tools", "problem"),
    [
        ([READ_FILE, READ_FILE], "each function name once"),
        ([{"type": "retrieval"}], "tools.0.type"),
        ([{"type": "function", "function": {"name": "has space"}}], "tools.0.function.name"),
        ([{"type": "function", "function": {"name": "x", "parameters": "{}"}}], "parameters"),
    ],
)
def test_bad_tools_are_refused_with_the_line_and_field(tools: list[object], problem: str) -> None:
    line = json.dumps({"start_s": 0, "prompt_tokens": 1, "output_tokens": 1, "tools": tools})
    with pytest.raises(BenchError) as caught:
        parse_trace(
            '{"start_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n' + line, "trace.jsonl"
        )
    assert str(caught.value).startswith("trace.jsonl line 2: ")
    assert problem in str(caught.value)


def test_a_synthetic_trace_with_tools_offers_a_coding_agents_tools_on_every_turn(
    cli: Cli, tmp_path: Path
) -> None:
    path = tmp_path / "trace.jsonl"
    run = cli("bench", "trace", "--tools", "--sessions", "2", "--turns", "3", "--output", str(path))
    assert run.code == 0, run.err
    entries = parse_trace(path.read_text(), str(path))
    assert len(entries) == 6
    assert all(entry.tools == CODING_AGENT_TOOLS for entry in entries)
    names = [tool.function.name for tool in CODING_AGENT_TOOLS]
    assert names == ["read_file", "run_shell", "edit_file"]
    # Without --tools the trace, and its digest, are what they were.
    assert "tools" not in dump_trace(generate_trace(seed=0))
