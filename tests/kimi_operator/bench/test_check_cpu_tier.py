"""scripts/check_cpu_tier.py, the GPU-side check of the CPU KV tier, against the bench stub's
prefix cache: it passes when the evicted session comes back from the tier, and fails without
one (docs/kv-cache.md)."""

import importlib.util
import json
from collections.abc import Callable
from types import ModuleType

import pytest

from kimi_operator.bench.stub import StubApp
from tests.support.repo import ROOT


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_cpu_tier", ROOT / "scripts" / "check_cpu_tier.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A GPU cache of 4 blocks (64 words) and a session of 64 words; 128 words of fillers evict it.
ARGS = ["--session-words", "64", "--evict-tokens", "64", "--filler-words", "32", "--parallel", "1"]


def _run(url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    code = _script().main(["--endpoint", url.removesuffix("/v1"), *ARGS])
    report: dict[str, object] = json.loads(capsys.readouterr().out)
    return code, report


def test_a_session_evicted_from_gpu_memory_comes_back_from_the_tier(
    stub: Callable[..., tuple[str, StubApp]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, app = stub(ttft_s=0.001, step_s=0.001, gpu_blocks=4, cpu_blocks=1000)
    code, report = _run(url, capsys)
    assert code == 0, report
    # The stub says block_size 64: the session's 64 words are one whole block of it.
    assert report["expected_tier_hits"] == 64
    assert report["block_size_divides_into_picker_blocks"] is True  # 64 is 4 blocks of 16
    assert report["returning_turn_tier_hits"] == 64
    assert report["returning_turn_gpu_hits"] == 0
    assert report["filler_prompt_tokens"] == 4 * 32
    assert app.state.external_hits == 64


def test_without_the_tier_the_check_fails(
    stub: Callable[..., tuple[str, StubApp]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = stub(ttft_s=0.001, step_s=0.001, gpu_blocks=4)
    code, report = _run(url, capsys)
    assert code == 1
    assert report["passed"] is False
    assert report["returning_turn_tier_hits"] == 0


def test_a_session_still_in_gpu_memory_is_no_proof(
    stub: Callable[..., tuple[str, StubApp]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = stub(ttft_s=0.001, step_s=0.001, cpu_blocks=1000)  # the GPU cache holds everything
    code, report = _run(url, capsys)
    assert code == 1
    assert report["returning_turn_gpu_hits"] == 64


def test_an_unreachable_server_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = _script().main(["--endpoint", "http://127.0.0.1:9", *ARGS, "--timeout-s", "2"])
    assert code == 2
    assert json.loads(capsys.readouterr().out)["passed"] is False
