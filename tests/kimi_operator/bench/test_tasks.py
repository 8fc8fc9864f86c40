"""Sessions as tasks: closed and open replay of dependent turns, and the figures per task."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kimi_operator.bench.traces import generate_trace, plan_trace
from tests.support.bench import Cli, closed_chain_task, results

STEP_S = 0.002
OUTPUT = 10  # tokens per turn: the stub's last chunk comes (OUTPUT - 1) steps after its first

# One session of three turns, each sent after the previous answer and some thinking.
CHAIN = (
    '{"start_s": 0, "prompt_tokens": 8, "output_tokens": 10, "id": "a", "session": "s"}\n'
    '{"start_s": 0, "prompt_tokens": 8, "output_tokens": 10, "id": "b", "session": "s",'
    ' "after": "a", "think_s": 0.15}\n'
    '{"start_s": 0, "prompt_tokens": 8, "output_tokens": 10, "id": "c", "session": "s",'
    ' "after": "b", "think_s": 0.1}\n'
)
THINK_S = 0.25


def replay(cli: Cli, url: str, tmp_path: Path, trace: str, *extra: str) -> dict[str, Any]:
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "trace.jsonl"
    path.write_text(trace)
    out = tmp_path / "out"
    run = cli(
        "bench", "--endpoint", url, "--profile", "agentic", "--trace", str(path), "--warmup", "0",
        "--gpus", "8", "--gpu-hour-price", "3", "--output", str(out), "--no-progress", *extra,
    )  # fmt: skip
    assert run.code == 0, run.err
    return results(out)


def test_closed_task_time_is_its_turns_and_thinking_and_a_faster_server_shortens_it(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    completions = {}
    for name, ttfts in (("slow", (0.2, 0.3, 0.1)), ("fast", (0.05, 0.05, 0.05))):
        url, _ = stub(ttft_script=ttfts, step_s=STEP_S)
        data = replay(cli, url, tmp_path / name, CHAIN)
        task, lags = closed_chain_task(data, (0.15, 0.1))
        assert task["requests"] == [0, 1, 2]
        assert lags < 0.05
        served = sum(ttfts) + 3 * (OUTPUT - 1) * STEP_S  # the stub's own timetable
        assert served + THINK_S <= task["completion_s"] < served + THINK_S + 0.1
        assert data["summary"]["tasks"]["completed"] == 1
        completions[name] = task["completion_s"]
    assert 0.35 < completions["slow"] - completions["fast"] < 0.55  # 0.6 s - 0.15 s of TTFT


def test_open_replay_sends_on_the_trace_times_closed_waits_for_answers(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.2, step_s=STEP_S)
    # Session s: the chain, its last turn due at 0.5 s in the trace. Session t: a turn whose
    # trace time (0.9 s) comes after its dependency's answer plus thinking.
    trace = CHAIN.replace('{"start_s": 0, "prompt_tokens": 8, "output_tokens": 10, "id": "c"',
                          '{"start_s": 0.5, "prompt_tokens": 8, "output_tokens": 10, "id": "c"') + (
        '{"start_s": 0, "prompt_tokens": 8, "output_tokens": 10, "id": "x", "session": "t"}\n'
        '{"start_s": 0.9, "prompt_tokens": 8, "output_tokens": 10, "session": "t",'
        ' "after": "x", "think_s": 0.1}\n'
    )  # fmt: skip
    opened = replay(cli, url, tmp_path / "open", trace, "--replay", "open")
    closed = replay(cli, url, tmp_path / "closed", trace)
    assert opened["config"]["replay"] == "open"
    sent = {name: {r["index"]: r for r in data["requests"]} for name, data in
            (("open", opened), ("closed", closed))}  # fmt: skip
    # Plan order: by start time, then trace order, each after the ones it waits for: a b x c y.
    o_a, o_b, o_x, o_c, o_y = (sent["open"][i] for i in range(5))
    c_a, c_b, c_x, c_c, c_y = (sent["closed"][i] for i in range(5))
    # Open: on the trace's times, before the answers they depend on.
    assert [r["scheduled_start_s"] for r in (o_a, o_x, o_b, o_c, o_y)] == [0, 0, 0, 0.5, 0.9]
    assert o_b["start_s"] < o_a["start_s"] + o_a["e2e_s"]
    # Closed: after the answer plus thinking, and never before the trace time.
    assert c_b["start_s"] >= c_a["start_s"] + c_a["e2e_s"] + 0.15
    assert c_c["start_s"] >= c_b["start_s"] + c_b["e2e_s"] + 0.1 > 0.5
    assert c_y["start_s"] >= 0.9 > c_x["start_s"] + c_x["e2e_s"] + 0.1
    times = {
        name: {t["task"]: t["completion_s"] for t in data["tasks"]}
        for name, data in (("open", opened), ("closed", closed))
    }
    assert 0.5 < times["open"]["s"] < 0.8  # its last turn's trace time + one latency
    assert times["closed"]["s"] > times["open"]["s"] + 0.15  # one think time and a latency more
    assert abs(times["closed"]["t"] - times["open"]["t"]) < 0.1  # the trace time bound both


def test_a_failed_turn_fails_its_task_once(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.02, step_s=STEP_S, fail_every=2)  # the 2nd and 4th requests fail
    trace = (
        '{"start_s": 0, "prompt_tokens": 8, "output_tokens": 10, "id": "a", "session": "s"}\n'
        '{"start_s": 0, "prompt_tokens": 8, "output_tokens": 10, "id": "b", "session": "s",'
        ' "after": "a", "fanout": 3}\n'
        '{"start_s": 0, "prompt_tokens": 8, "output_tokens": 10, "session": "s", "after": "b"}\n'
        '{"start_s": 0.5, "prompt_tokens": 8, "output_tokens": 10}\n'
    )
    data = replay(cli, url, tmp_path, trace)
    summary, tasks = data["summary"], data["tasks"]
    assert summary["requests_failed"] == 2  # two of the three sub-agents
    assert summary["errors"] == {"HTTP 500: injected failure": 2}
    assert summary["tasks"]["failed"] == 1
    assert summary["tasks"]["completed"] == 1  # the request of its own at 0.5 s
    assert summary["tasks"]["requests_not_sent"] == 1  # the turn after the sub-agents
    assert [t["task"] for t in tasks] == ["s", "request-5"]
    session = tasks[0]
    assert session["completed"] is False
    assert session["completion_s"] is None
    assert (session["requests_failed"], session["requests_not_sent"]) == (2, 1)
    assert [r["index"] for r in data["requests"]] == [0, 1, 2, 3, 5]  # 4 was never sent
    cost = 8 * 3 * summary["duration_s"] / 3600
    assert abs(summary["tasks"]["cost_per_task_usd"] - cost) < 1e-9  # one completed task
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| tasks completed / failed | 1 / 1 |" in report
    assert "| requests not sent (a request they waited for failed) | 1 |" in report


def test_requests_cut_short_tasks_are_named(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.01, step_s=STEP_S)
    data = replay(cli, url, tmp_path, CHAIN, "--requests", "2")
    assert [r["index"] for r in data["requests"]] == [0, 1]
    assert data["tasks"][0]["requests"] == [0, 1]
    assert (
        "--requests cut 1 task(s) short: their figures cover only the requests kept"
        in (data["summary"]["warnings"])
    )


def test_generated_sessions_chain_their_turns_and_join_their_sub_agents() -> None:
    entries = generate_trace(seed=1, sessions=3, turns=8)
    by_id = {e.id: e for e in entries}
    for entry in entries:
        assert entry.session == entry.prefix_group
        if entry.after is None:
            assert entry.think_s == 0
            continue
        parent = by_id[entry.after]
        assert parent.session == entry.session
        assert 0.5 <= entry.think_s <= 5.0
        # The earliest it could be sent: a closed replay is paced by the server alone.
        assert abs(entry.start_s - parent.start_s - entry.think_s) < 0.002
    assert sum(e.after is None for e in entries) == 3
    plan = plan_trace(entries, None)
    fanned = [e for e in entries if e.fanout > 1]
    assert fanned
    for request in plan:
        assert all(i < request.index for i in request.after)
    # A request waits for every sub-agent of the turn before it: as many answers as it fanned out.
    waits = sorted(len(r.after) for r in plan if r.after)
    assert waits == sorted(
        by_id[e.after].fanout for e in entries if e.after is not None for _ in range(e.fanout)
    )
    assert max(waits) > 1
