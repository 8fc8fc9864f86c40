"""`kimi-operator plan` predicts the real server as a user gets it: one `bench --profile
calibration` (the server's settings and sizes read from it), one `plan --trace --calibration`
(no configuration file: the deployment as it runs), and one closed-loop replay of a trace the
calibration never saw; task completion p50/p90 within 20% and TTFT p50 within 25%, at two
calibration prompt ranges (the default, which the server's 4,096-token context sizes to 2,048,
and 1,024). No pooling, no retry: each figure is one run's (docs/planning.md, "Does it predict?").
"""

import json
import random
from pathlib import Path
from typing import Any

import pytest

from kimi_operator.cli import main
from tests.vllm.conftest import Served

SESSIONS, TURNS = 5, 4
# TTFT's bound is wider than the pooled check's 20% had been, and on purpose (issue 38's bar):
# this compares one calibration with one replay, and a replay's TTFT p50 is about 20 requests'
# on a machine whose speed moves ~15% from second to second (docs/planning.md); task completion,
# half of it think time, keeps 20%.
BOUNDS = {"task completion p50": 0.20, "task completion p90": 0.20, "TTFT p50": 0.25}


def unseen_trace(name: str, seed: int) -> str:
    """Agent sessions whose every turn resends the conversation so far plus a tool's result."""
    rng = random.Random(seed)
    lines = []
    for session in range(SESSIONS):
        context = rng.randint(250, 600)
        for turn in range(TURNS):
            new, output = rng.randint(60, 200), rng.randint(24, 48)
            line: dict[str, Any] = {
                "start_s": 0.5 * session,
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


def figures(results: Path) -> dict[str, float]:
    summary = json.loads(results.read_text())["summary"]
    return {
        "task completion p50": summary["tasks"]["completion_s"]["p50"],
        "task completion p90": summary["tasks"]["completion_s"]["p90"],
        "TTFT p50": summary["ttft_s"]["p50"],
    }


@pytest.mark.parametrize("prompt_tokens", [None, 1024])
def test_one_calibration_predicts_an_unseen_replay(
    served: Served, tmp_path: Path, prompt_tokens: int | None
) -> None:
    endpoint = ["--endpoint", f"{served.root}/v1", "--gpus", "1", "--no-progress"]
    sizes = ["--prompt-tokens", str(prompt_tokens)] if prompt_tokens else []
    calibration, plan, replay = tmp_path / "cal", tmp_path / "plan", tmp_path / "replay"
    seed = str(prompt_tokens or 1)  # prompts of its own: the server's cache holds none of them
    cli("bench", *endpoint, "--profile", "calibration", *sizes, "--seed", seed,
        "--output", str(calibration))  # fmt: skip
    trace = tmp_path / "trace.jsonl"
    trace.write_text(unseen_trace(tmp_path.name, seed=int(seed)))
    cli("plan", "--trace", str(trace), "--calibration", str(calibration), "--gpu-hour-price", "1",
        "--output", str(plan))  # fmt: skip
    cli("bench", *endpoint, "--profile", "agentic", "--trace", str(trace), "--output", str(replay))
    predicted = figures(plan / "as-measured" / "results.json")
    measured = figures(replay / "results.json")
    print(f"prompt range {prompt_tokens or 'default'} (predicted, measured):",
          {label: (predicted[label], measured[label]) for label in BOUNDS})  # fmt: skip
    for label, bound in BOUNDS.items():
        p, m = predicted[label], measured[label]
        assert p == pytest.approx(m, rel=bound), f"{label}: predicted {p:.3f}, measured {m:.3f}"
