"""`kimi-operator plan` predicts the real server as a user gets it: one `bench --profile
calibration` (the server's settings and sizes read from it), one `plan --trace --calibration`
(no configuration file: the deployment as it runs), and one closed-loop replay of each of three
traces the calibration never saw (agent sessions, twice as many sessions arriving closer
together, and fewer sessions with longer tool results and answers), sized to the range the
calibration measured, as docs/planning.md tells a user to (a 1,024-token calibration gets
prompts half as long as a 2,048-token one), at two calibration prompt ranges (the default, which
the server's 4,096-token context sizes to 2,048, and 1,024). Every replay: task completion
p50/p90 within 20%, the plan's simulated prefix-cache hit rate the server's own, and the agent
sessions' TTFT p50 within 25%. The busier shapes' TTFT p50 is printed, not bounded: a clean-clone
run missed the longer turns' by -26% at the usual decode pace (docs/planning.md). No pooling:
each figure is one calibration's and one replay's. Retaken once, said in pytest's warnings, and
only for a cause outside the plan: a replay or a calibration the host slowed (`SLOWED`).
"""

import itertools
import json
import random
import statistics
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from kimi_operator.cli import main
from tests.vllm.conftest import Served, engine_apart

# TTFT's bound is wider than the pooled check's 20% had been, and on purpose (issue 38's bar):
# this compares one calibration with one replay, and a replay's TTFT p50 is about 20 requests'
# on a machine whose speed moves ~15% from second to second (docs/planning.md); task completion,
# half of it think time, keeps 20%.
BOUNDS = {"task completion p50": 0.20, "task completion p90": 0.20, "TTFT p50": 0.25}
TTFT_BOUNDED = {"agents"}  # the other shapes' TTFT is printed (module docstring)
# The host's own speed moves (docs/planning.md, "What is left"): on the 2-CPU VM a fixed loop ran
# 1.5-1.7x slower in some 5-second windows, on both CPUs. A replay whose tokens came SLOWED x
# further apart than the plan's (the calibration's own decode steps) ran in such a window: it says
# nothing of the plan and is replayed once, with a trace of its own; tokens SLOWED x closer: the
# calibration ran in one (decode steps 10 ms where 5-6 ms is usual) and is taken once more, as it
# is when every replay, retaken, still came SLOWED x further apart (a clean-clone run: all six
# 1.53-1.65x; the host stayed slower than at the calibration, for minutes). Over
# 51 replays of runs that passed the ratio was 0.84-1.34; in a run a slowed host failed, 1.67 (the
# replay that failed) and 1.48 (the next); the replays of a slowed calibration 0.57-0.85. A plan
# whose decode steps are wrong fails again.
SLOWED = 1.4
# Prompt tokens found in the cache over those looked up: vLLM counts whole blocks, and so does
# the plan, in the server's own block size; this much apart is a token or two.
HIT_RATE_ABS = 0.005


class Shape(NamedTuple):
    """Prompt sizes for a 2,048-token calibration (DEFAULT_RANGE), scaled to another's."""

    sessions: int
    turns: int
    gap_s: float  # between sessions' starts
    context: tuple[int, int]  # a session's first context (a system prompt, a task)
    new: tuple[int, int]  # a turn's new tokens (a tool's result)
    output: tuple[int, int]


DEFAULT_RANGE = 2048  # the default sweep's longest prompt on the test server's 4,096 tokens
SHAPES = {  # longest prompts about 1,350, 1,350 and 1,750 tokens at the default range
    "agents": Shape(5, 4, 0.5, context=(250, 600), new=(60, 200), output=(24, 48)),
    "more sessions": Shape(10, 4, 0.3, context=(250, 600), new=(60, 200), output=(24, 48)),
    "longer turns": Shape(4, 4, 0.5, context=(250, 600), new=(150, 400), output=(48, 96)),
}


def unseen_trace(name: str, seed: int, shape: Shape, prompt_range: int) -> str:
    """Agent sessions whose every turn resends the conversation so far plus a tool's result."""
    rng = random.Random(seed)

    def tokens(bounds: tuple[int, int]) -> int:
        return rng.randint(*bounds) * prompt_range // DEFAULT_RANGE

    lines = []
    for session in range(shape.sessions):
        context = tokens(shape.context)
        for turn in range(shape.turns):
            new, output = tokens(shape.new), rng.randint(*shape.output)
            line: dict[str, Any] = {
                "start_s": shape.gap_s * session,
                "prompt_tokens": context + new,
                "output_tokens": output,
                "prefix_group": f"{name}-{session}",
                "shared_prefix_tokens": context,
                "id": f"{name}-{session}-{turn}",
                "session": f"{name}-{session}",
            }
            if turn:
                line |= {"after": f"{name}-{session}-{turn - 1}", "think_s": rng.uniform(0.3, 1.2)}
            lines.append(json.dumps(line) + "\n")
            context += new + output
    return "".join(lines)


def cli(*argv: str) -> None:
    assert main(list(argv)) == 0


def token_gap(results: Path) -> float:
    """The median gap between a run's chunks, every request's: its decode step, mostly."""
    requests = json.loads(results.read_text())["requests"]
    times: list[list[float]] = [r["chunk_times_s"] for r in requests]
    return statistics.median(b - a for chunks in times for a, b in itertools.pairwise(chunks))


def plan_and_replay(
    endpoint: list[str], calibration: Path, trace: Path, plan: Path, replay: Path
) -> float:
    """`plan` of `trace` from `calibration`, then `trace` replayed on the server into `replay`;
    returns the replay's gaps between tokens over the plan's (its pace: `SLOWED`)."""
    cli("plan", "--trace", str(trace), "--calibration", str(calibration),
        "--gpu-hour-price", "1", "--output", str(plan))  # fmt: skip
    cli("bench", *endpoint, "--profile", "agentic", "--trace", str(trace),
        "--output", str(replay))  # fmt: skip
    return token_gap(replay / "results.json") / token_gap(plan / "as-measured" / "results.json")


def figures(results: Path) -> tuple[dict[str, float], float | None]:
    summary = json.loads(results.read_text())["summary"]
    return {
        "task completion p50": summary["tasks"]["completion_s"]["p50"],
        "task completion p90": summary["tasks"]["completion_s"]["p90"],
        "TTFT p50": summary["ttft_s"]["p50"],
    }, summary["server_metrics"]["prefix_cache_hit_rate"]


class Compared(NamedTuple):
    label: str
    predicted: dict[str, float]
    measured: dict[str, float]
    hit_rates: tuple[float | None, float | None]  # simulated, the server's
    slowed: float  # the replay's gaps between tokens over the plan's


def replayed(
    endpoint: list[str], calibration: Path, where: Path, label: str, prompt_tokens: int | None
) -> Compared:
    """Plan one unseen trace of `label`'s shape from `calibration` and replay it; replayed once
    more, with a trace of its own, when the host slowed the replay (`SLOWED`)."""
    seed, index = prompt_tokens or 1, list(SHAPES).index(label)
    for attempt in range(2):
        trace, plan, replay = (
            where / f"{what}-{index}-{attempt}" for what in ("trace", "plan", "run")
        )
        trace.write_text(
            unseen_trace(
                f"{where.parent.name}-{where.name}-{index}-{attempt}",
                seed + index + 10 * attempt,
                SHAPES[label],
                prompt_tokens or DEFAULT_RANGE,
            )
        )
        slowed = plan_and_replay(endpoint, calibration, trace, plan, replay)
        if slowed <= SLOWED or attempt:
            break
        warnings.warn(  # in pytest's summary, passed or not
            f"prompt range {prompt_tokens or 'default'}, {label}: tokens {slowed:.2f}x as far "
            "apart as the calibration's steps give: the host slowed the replay; replayed once more",
            stacklevel=1,
        )
    predicted, simulated_hits = figures(plan / "as-measured" / "results.json")
    measured, server_hits = figures(replay / "results.json")
    return Compared(label, predicted, measured, (simulated_hits, server_hits), slowed)


@pytest.mark.parametrize("prompt_tokens", [None, 1024])
def test_one_calibration_predicts_unseen_replays(
    served: Served, tmp_path: Path, prompt_tokens: int | None
) -> None:
    endpoint = ["--endpoint", f"{served.root}/v1", "--gpus", "1", "--no-progress"]
    sizes = ["--prompt-tokens", str(prompt_tokens)] if prompt_tokens else []
    seed = prompt_tokens or 1  # prompts of its own: the server's cache holds none of them
    with engine_apart(served.server):  # the engine as a GPU: a CPU of its own (conftest.py)
        for attempt in range(2):
            calibration = tmp_path / f"cal-{attempt}" / "cal"
            cli("bench", *endpoint, "--profile", "calibration", *sizes,
                "--seed", str(seed + 100 * attempt), "--output", str(calibration))  # fmt: skip
            compared = [
                replayed(endpoint, calibration, calibration.parent, label, prompt_tokens)
                for label in SHAPES
            ]
            least = min(c.slowed for c in compared)
            if 1 / SLOWED <= least <= SLOWED or attempt:
                break
            why = (
                "the host slowed the calibration"
                if least < 1 / SLOWED
                else "every replay, retaken, slower: the host has stayed slower since it"
            )
            warnings.warn(  # in pytest's summary, passed or not
                f"prompt range {prompt_tokens or 'default'}: tokens at least {least:.2f}x as far "
                f"apart as the calibration's steps give: {why}; calibrated once more",
                stacklevel=1,
            )
    misses: list[str] = []
    for c in compared:
        print(f"prompt range {prompt_tokens or 'default'}, {c.label} (predicted, measured):",
              {key: (c.predicted[key], c.measured[key]) for key in BOUNDS},
              "prefix-cache hit rate", c.hit_rates, f"token gaps {c.slowed:.2f}x")  # fmt: skip
        misses += [
            f"{c.label}: {key}: predicted {c.predicted[key]:.3f}, measured {c.measured[key]:.3f}"
            f" (token gaps {c.slowed:.2f}x the plan's)"
            for key, bound in BOUNDS.items()
            if (key != "TTFT p50" or c.label in TTFT_BOUNDED)
            and c.predicted[key] != pytest.approx(c.measured[key], rel=bound)
        ]
        simulated, server = c.hit_rates
        if simulated != pytest.approx(server, abs=HIT_RATE_ABS):
            misses.append(f"{c.label}: hit rate simulated {simulated}, server {server}")
    assert not misses, misses
