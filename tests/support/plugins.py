"""Runs tests/support/plugin_probe.py in a fresh interpreter of a given venv and reads its report:
vLLM loads plugins once per process."""

import json
import os
import subprocess
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
