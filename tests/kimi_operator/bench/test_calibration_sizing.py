"""`bench --profile calibration` sizes its sweep to the server it calibrates: a server with a
short context or a small batch took the default 32,768-token prompts and 64-request batches and
failed on every long request (`HTTP 400: max_tokens must be at least 1, got 0`)."""

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kimi_operator.bench.stub import StubApp
from tests.support.bench import Cli

Stub = Callable[..., tuple[str, StubApp]]


def calibrate(cli: Cli, root: str, out: Path, *flags: str) -> tuple[int, str]:
    argv = ["bench", "--endpoint", root, "--profile", "calibration", "--output-tokens", "8"]
    run = cli(*argv, "--warmup", "0", "--no-progress", "--output", str(out), *flags)
    return run.code, run.err


def test_the_default_sweep_fits_the_servers_context_and_batch(
    cli: Cli, stub: Stub, tmp_path: Path
) -> None:
    root, app = stub(ttft_s=0.002, step_s=0.0005, max_model_len=2048, max_num_seqs=4)
    code, err = calibrate(cli, root, tmp_path)
    assert code == 0, err
    requests = json.loads((tmp_path / "results.json").read_text())["requests"]
    assert app.state.requests == len(requests)
    assert all(r["error"] is None for r in requests)
    # Prompts halved from 32,768 until the longest request (a 1,024-token prompt and its
    # 2 tokens) fits 2,048; batches up to the 4 sequences the server runs at once.
    assert max(r["prompt_tokens"] for r in requests) == 1024
    assert max(r["prompt_tokens"] + r["output_tokens"] for r in requests) <= 2048
    batches = {r["group"].split(":")[1] for r in requests if r["group"].startswith("decode:")}
    assert batches == {"b1", "b2", "b4"}


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (
            ("--prompt-tokens", "4096"),
            "--prompt-tokens 4096: the sweep's longest request would hold 4098 tokens, over the "
            "server's max_model_len 2048 (/v1/models)",
        ),
        (
            ("--concurrency", "16"),
            "--concurrency 16: the server runs at most 4 sequences at once",
        ),
    ],
)
def test_flags_the_server_cannot_take_are_refused_before_a_request(
    cli: Cli, stub: Stub, tmp_path: Path, flags: tuple[str, ...], says: str
) -> None:
    root, app = stub(max_model_len=2048, max_num_seqs=4)
    code, err = calibrate(cli, root, tmp_path, *flags)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert says in line
    assert app.state.requests == 0
