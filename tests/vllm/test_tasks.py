"""Sessions as tasks against the real server: a closed session's completion time is its turns and
its thinking, open and closed replays of one trace differ as they should, and a turn the server
refuses fails its task once without its dependants being sent. Tiny turns: the server shares 2 CPUs.
"""

import json
from pathlib import Path
from typing import Any

from kimi_operator.cli import main
from tests.support.bench import closed_chain_task
from tests.vllm.conftest import Served, client_apart

SUCCESSES = "vllm:request_success_total"


def turn(start_s: float, id: str, session: str, after: str = "", think_s: float = 0.0) -> str:
    line: dict[str, object] = {"start_s": start_s, "prompt_tokens": 8, "output_tokens": 8}
    line |= {"id": id, "session": session}
    if after:
        line |= {"after": after, "think_s": think_s}
    return json.dumps(line) + "\n"


# One session of three turns, each sent after the answer before it and some thinking.
CHAIN = turn(0, "a", "s") + turn(0, "b", "s", "a", 0.3) + turn(0, "c", "s", "b", 0.2)
THINK_S = 0.5


def replay(served: Served, tmp_path: Path, trace: str, *extra: str) -> dict[str, Any]:
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "trace.jsonl"
    path.write_text(trace)
    out = tmp_path / "out"
    argv = [
        "bench", "--endpoint", f"{served.root}/v1", "--profile", "agentic", "--trace", str(path),
        "--warmup", "0", "--output", str(out), "--no-progress", *extra,
    ]  # fmt: skip
    with client_apart(served.server):  # timed as by a client on another machine
        assert main(argv) == 0
    data: dict[str, Any] = json.loads((out / "results.json").read_text())
    return data


def test_closed_task_time_is_its_turns_and_thinking(served: Served, tmp_path: Path) -> None:
    data = replay(served, tmp_path, CHAIN)
    task, lags = closed_chain_task(data, (0.3, 0.2))
    assert task["output_tokens"] == 24
    assert 0 <= lags < 0.1 * task["completion_s"]  # the overhead is small beside what it measures


def test_open_replay_sends_on_the_trace_times_closed_waits_for_answers(
    served: Served, tmp_path: Path
) -> None:
    opened = replay(served, tmp_path / "open", CHAIN, "--replay", "open")
    closed = replay(served, tmp_path / "closed", CHAIN)
    assert opened["config"]["replay"] == "open"
    o_a, o_b, o_c = opened["requests"]
    c_a, c_b, c_c = closed["requests"]
    # Open: all three at once, each before the answer it depends on has ended.
    assert [r["scheduled_start_s"] for r in (o_a, o_b, o_c)] == [0, 0, 0]
    assert max(o_b["start_s"], o_c["start_s"]) < o_a["start_s"] + o_a["e2e_s"]
    assert o_c["start_s"] < o_b["start_s"] + o_b["e2e_s"]
    # Closed: each after the answer plus thinking.
    assert c_b["start_s"] >= c_a["start_s"] + c_a["e2e_s"] + 0.3
    assert c_c["start_s"] >= c_b["start_s"] + c_b["e2e_s"] + 0.2
    (o_task,), (c_task,) = opened["tasks"], closed["tasks"]
    # Each run against its own latencies (the two runs' latencies differ on a shared machine):
    # open overlaps the turns and skips the thinking, closed lays them end to end with it.
    assert o_task["completion_s"] < sum(r["e2e_s"] for r in (o_a, o_b, o_c))
    tail = c_c["e2e_s"] - c_c["chunk_times_s"][-1]
    assert c_task["completion_s"] + tail >= sum(r["e2e_s"] for r in (c_a, c_b, c_c)) + THINK_S


def test_a_refused_turn_fails_its_task_once_and_its_dependant_is_not_sent(
    served: Served, tmp_path: Path
) -> None:
    # Turn b asks for more tokens than the model's context (4096): the server answers 400.
    refused = turn(0, "b", "s", "a", 0.1).replace('"output_tokens": 8', '"output_tokens": 8192')
    trace = turn(0, "a", "s") + refused + turn(0, "c", "s", "b") + turn(0, "x", "t")
    before = served.metrics().totals[SUCCESSES]
    data = replay(served, tmp_path, trace)
    summary, tasks = data["summary"], data["tasks"]
    assert summary["requests_failed"] == 1
    ((error, count),) = summary["errors"].items()
    assert error.startswith("HTTP 400: max_tokens=8192"), error
    assert count == 1
    assert summary["tasks"]["failed"] == 1
    assert summary["tasks"]["completed"] == 1  # session t
    assert summary["tasks"]["requests_not_sent"] == 1
    by_task = {t["task"]: t for t in tasks}
    assert by_task["s"]["completed"] is False
    assert by_task["s"]["completion_s"] is None
    assert (by_task["s"]["requests_failed"], by_task["s"]["requests_not_sent"]) == (1, 1)
    assert by_task["t"]["completed"] is True
    assert [r["index"] for r in data["requests"]] == [0, 1, 3]  # c (plan index 2) was never sent
    # The server agrees: it finished a and x only (b was refused, c never reached it).
    assert served.metrics().totals[SUCCESSES] - before == 2
