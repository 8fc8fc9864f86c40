"""`make demo` on a fresh clone, as a new user runs it: its own install (the demo extra and the
weights downloader, no torch or vLLM) is enough for every step, the weights Jobs it runs for real
included. The repository's other tests run in the full development venv, where a module the demo
needs but its install lacks would go unnoticed (it did: kimi_kernels.weights). Clones the
committed HEAD."""

import os
import subprocess
from pathlib import Path

from tests.images.slow import require_image_tests
from tests.support.repo import ROOT


def test_make_demo_on_a_fresh_clone(tmp_path: Path) -> None:
    require_image_tests("git", "make")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    result = subprocess.run(
        ["make", "demo"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "ran Job inference/" in output  # the weights Jobs ran, in the demo's own venv
    assert "embedded API server stopped; demo took" in output  # the live demo's last line
    for heavy in ("torch", "vllm", "cutlass"):
        probe = subprocess.run(
            [str(clone / ".venv" / "bin" / "python"), "-c", f"import {heavy}"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert probe.returncode != 0, f"make demo installed {heavy}"
