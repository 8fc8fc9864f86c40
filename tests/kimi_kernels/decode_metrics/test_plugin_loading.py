"""vLLM 0.33.0 (the wheel in .venv, with the Kimi K3 module) loads both plugins through its own
loaders; the decode-path plugin imports nothing heavy until the model runner is imported, then
instruments it. The same probe runs against vLLM 0.32.0's CPU build in tests/vllm."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

PROBE = Path(__file__).with_name("plugin_probe.py")
STAT_LOGGER = "kimi_kernels.decode_metrics.stat_logger.KimiStatLogger"


def probe(python: str, *args: str) -> dict[str, Any]:
    """The probe's report, from a fresh interpreter (vLLM loads plugins once per process)."""
    env = os.environ | {"VLLM_TARGET_DEVICE": "cpu"}
    env.pop("VLLM_PLUGINS", None)
    done = subprocess.run(
        [python, str(PROBE), *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


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
