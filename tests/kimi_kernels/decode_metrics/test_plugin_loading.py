"""vLLM 0.33.0 (the wheel in .venv, with the Kimi K3 module) loads both plugins through its own
loaders; the decode-path plugin imports nothing heavy until the model runner is imported, then
instruments it. The same probe runs against vLLM 0.32.0's CPU build in tests/vllm."""

import sys

import pytest

from tests.support.plugins import STAT_LOGGER, probe

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)


def test_with_the_kimi_k3_module_instruments_only_where_the_model_runs() -> None:
    report = probe(sys.executable, "--import-runner")
    assert report["vllm"] == "0.33.0"
    assert report["stat_loggers"] == [STAT_LOGGER]
    # Loading (API server, engine core): nothing heavy imported, nothing decided yet.
    assert report["imported_by_loading"] == []
    assert report["gave_up"] is False
    # The process that imports the model runner instruments it.
    assert report["runner_wrapped"] is True
    assert report["instrumented_with_runner"] == 1.0
    assert not any(line.startswith("WARNING") for line in report["log"]), report["log"]
