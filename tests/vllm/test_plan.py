"""`kimi-operator plan` predicts the real server as a user gets it: one `bench --profile
calibration` (the server's settings and sizes read from it), one `plan --trace --calibration`
(no configuration file: the deployment as it runs), and one closed-loop replay of each of three
traces the calibration never saw (agent sessions, twice as many sessions arriving closer
together, and fewer sessions with longer tool results and answers), sized to the range the
calibration measured, as docs/planning.md tells a user to (a 1,024-token calibration gets
prompts half as long as a 2,048-token one), at two calibration prompt ranges (the default, which
the server's 4,096-token context sizes to 2,048, and 1,024). Every replay: task completion
p50/p90 within 20%, TTFT p50 within 25%, and the plan's simulated prefix-cache hit rate the
server's own. No pooling, no retry: each figure is one run's.
"""

import json
import random
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


def figures(results: Path) -> tuple[dict[str, float], float | None]:
    summary = json.loads(results.read_text())["summary"]
    return {
        "task completion p50": summary["tasks"]["completion_s"]["p50"],
        "task completion p90": summary["tasks"]["completion_s"]["p90"],
        "TTFT p50": summary["ttft_s"]["p50"],
    }, summary["server_metrics"]["prefix_cache_hit_rate"]


@pytest.mark.parametrize("prompt_tokens", [None, 1024])
def test_one_calibration_predicts_unseen_replays(
    served: Served, tmp_path: Path, prompt_tokens: int | None
) -> None:
    endpoint = ["--endpoint", f"{served.root}/v1", "--gpus", "1", "--no-progress"]
    sizes = ["--prompt-tokens", str(prompt_tokens)] if prompt_tokens else []
    calibration = tmp_path / "cal"
    seed = prompt_tokens or 1  # prompts of its own: the server's cache holds none of them
    misses: list[str] = []
    with engine_apart(served.server):  # the engine as a GPU: a CPU of its own (conftest.py)
        cli("bench", *endpoint, "--profile", "calibration", *sizes, "--seed", str(seed),
            "--output", str(calibration))  # fmt: skip
        for index, (label, shape) in enumerate(SHAPES.items()):
            trace, plan, replay = (
                tmp_path / f"{what}-{index}" for what in ("trace", "plan", "run")
            )
            name = f"{tmp_path.name}-{index}"
            trace.write_text(
                unseen_trace(name, seed + index, shape, prompt_tokens or DEFAULT_RANGE)
            )
            cli("plan", "--trace", str(trace), "--calibration", str(calibration),
                "--gpu-hour-price", "1", "--output", str(plan))  # fmt: skip
            cli("bench", *endpoint, "--profile", "agentic", "--trace", str(trace),
                "--output", str(replay))  # fmt: skip
            predicted, simulated_hits = figures(plan / "as-measured" / "results.json")
            measured, server_hits = figures(replay / "results.json")
            print(f"prompt range {prompt_tokens or 'default'}, {label} (predicted, measured):",
                  {key: (predicted[key], measured[key]) for key in BOUNDS},
                  "prefix-cache hit rate", (simulated_hits, server_hits))  # fmt: skip
            misses += [
                f"{label}: {key}: predicted {predicted[key]:.3f}, measured {measured[key]:.3f}"
                for key, bound in BOUNDS.items()
                if predicted[key] != pytest.approx(measured[key], rel=bound)
            ]
            if simulated_hits != pytest.approx(server_hits, abs=HIT_RATE_ABS):
                misses.append(f"{label}: hit rate simulated {simulated_hits}, server {server_hits}")
    assert not misses, misses
