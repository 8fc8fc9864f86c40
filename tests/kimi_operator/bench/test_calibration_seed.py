"""A calibration sends text new to the server every run: one that sent a previous run's text to
the same server (a scheduled calibration sweeps one long-running server again and again) found
its lone prefills in the prefix cache and fitted prefill costs of a tenth of what they are
(bench/profiles.py). The stub's prefix cache (bench/stub.py) counts what a run found there."""

import json
from collections.abc import Callable
from pathlib import Path

from kimi_operator.bench.stub import StubApp
from tests.support.bench import Cli

from .test_calibration_sizing import calibrate

Stub = Callable[..., tuple[str, StubApp]]


def _hits_of_a_run(cli: Cli, root: str, app: StubApp, out: Path, *flags: str) -> int:
    before = app.state.prefix_hits
    code, err = calibrate(cli, root, out, *flags)
    assert code == 0, err
    return app.state.prefix_hits - before


def _seed(out: Path) -> int:
    seed: int = json.loads((out / "results.json").read_text())["config"]["seed"]
    return seed


def test_a_second_calibration_finds_none_of_the_firsts_prompts_in_the_cache(
    cli: Cli, stub: Stub, tmp_path: Path
) -> None:
    root, app = stub(ttft_s=0.001, step_s=0.0002, max_model_len=2048, max_num_seqs=4)
    first = _hits_of_a_run(cli, root, app, tmp_path / "first")
    second = _hits_of_a_run(cli, root, app, tmp_path / "second")
    assert first > 0  # the sweep's own prefix hits (`prefix:` phases), as it means them
    assert second == first  # and none of the first run's prompts (seed 0 twice: 7x as many)
    assert _seed(tmp_path / "first") != _seed(tmp_path / "second")


def test_a_seed_given_sends_the_same_text_again(cli: Cli, stub: Stub, tmp_path: Path) -> None:
    root, app = stub(ttft_s=0.001, step_s=0.0002, max_model_len=2048, max_num_seqs=4)
    first = _hits_of_a_run(cli, root, app, tmp_path / "first", "--seed", "7")
    second = _hits_of_a_run(cli, root, app, tmp_path / "second", "--seed", "7")
    assert second > 5 * first  # every prompt of the first run found again (7x)
    assert _seed(tmp_path / "first") == _seed(tmp_path / "second") == 7
