"""vLLM chooses its platform once, at the first import of vllm.config or vllm.platforms, from
VLLM_TARGET_DEVICE. The suite runs the dev venv's wheel on the CPU, so the root conftest sets it
before any test module is collected: a module importing vLLM at its top (test_compile_cache_key)
then no longer leaves vLLM's parser broken for the files after it ("Failed to infer device type",
seen when tests/kimi_operator/builders ran without the files whose conftests set it)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# As a test module's collection does it: the root conftest first, then vLLM at module level.
COLLECTED_FIRST = """
import os
os.environ.pop("VLLM_TARGET_DEVICE", None)
import tests.conftest
from vllm.config.utils import hash_factors
from vllm.platforms import current_platform
print(current_platform.device_type)
"""


def test_a_module_importing_vllm_first_gets_the_cpu_platform() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", COLLECTED_FIRST],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.split()[-1:] == ["cpu"], ran.stdout
