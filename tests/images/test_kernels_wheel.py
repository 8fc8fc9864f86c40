"""The kimi-kernels wheel of the serving image (kernels/pyproject.toml) installs next to vLLM 0.33.0
(--no-deps) in a clean venv with its requirements met and every entry point loading, as
images/vllm/check_fast_path.py checks them in the image build. (What each wheel declares and
carries: test_wheels.py.)"""

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

from tests.support.repo import ROOT

from .dockerfiles import CHECK
from .slow import require_image_tests

KERNELS = ROOT / "kernels"


# Run inside the venv: the check's verdicts on what the wheel brings.
VERDICTS = """
import importlib.util, json, os, sys
from importlib import metadata
spec = importlib.util.spec_from_file_location("check", sys.argv[1])
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)
print(json.dumps({
    "vllm": check.check_vllm(metadata.version),
    "requirements": check.check_requirements("kimi-kernels", metadata.version),
    "entry_points": check.check_entry_points("kimi-kernels"),
    "environment": check.check_environment(dict(os.environ)),
}))
"""


class AnyStartingWith(str):
    """Equal to any string that starts with it (the first missing module varies)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.startswith(str(self))

    def __hash__(self) -> int:
        return str.__hash__(self)


def _run(*command: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=1500, check=False, env=env
    )
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_wheel_installs_next_to_vllm(tmp_path: Path) -> None:
    require_image_tests()
    wheels = tmp_path / "wheels"
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", str(KERNELS), "-w", str(wheels))
    (wheel,) = wheels.glob("kimi_kernels-*.whl")
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    # --no-compile: no bytecode for the thousands of modules of torch and vLLM that nothing here
    # imports (a minute of CPU); what is imported compiles as it loads.
    pip = (python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile")
    # vLLM as `make setup` installs it on a CPU machine: CPU torch, vLLM without its dependencies,
    # the light packages its modules import.
    _run(*pip, "torch==2.13.0", "numpy")
    _run(*pip, "--no-deps", "vllm==0.33.0")
    _run(*pip, "-r", str(ROOT / "requirements" / "vllm-interfaces.txt"))
    _run(*pip, "--no-deps", str(wheel))  # as the Dockerfile does; the check checks its requirements
    env = {**os.environ, "VLLM_USE_V2_MODEL_RUNNER": "1", "PYTHONPATH": ""}
    # What the wheel brings, checked as the image build checks it: requirements met, every entry
    # point (the vLLM plugins) loads against the real vLLM 0.33.0.
    verdicts = json.loads(_run(python, "-c", VERDICTS, str(CHECK), env=env))
    assert verdicts == {"vllm": [], "requirements": [], "entry_points": [], "environment": []}
    # The rest of the check is about the vLLM environment, which vLLM's image has and this venv
    # (vLLM without its dependencies) has not: the check refuses it, naming what is missing.
    incomplete = subprocess.run(
        [python, str(CHECK)], capture_output=True, text=True, timeout=600, check=False, env=env
    )
    assert incomplete.returncode == 1
    findings = [line for line in incomplete.stderr.splitlines() if line.startswith("fast path")]
    source = "vllm/models/kimi_k3/nvidia/specialized_decode/cutedsl/mla/dcp.py"
    for finding in (
        "fast path check: vllm needs nvidia-cutlass-dsl[cu13]==4.8.0, which is not installed",
        'fast path check: vllm needs tokenspeed-mla==2.0.3; platform_system == "Linux", which '
        "is not installed",
        AnyStartingWith(
            "fast path check: import vllm.models.kimi_k3.nvidia.specialized_decode.cutedsl.mla.dcp "
            f"({source}) fails: ModuleNotFoundError: No module named "
        ),
        f"fast path check: from tokenspeed_mla import mla_decode ({source}:303) fails: "
        "ModuleNotFoundError: No module named 'tokenspeed_mla'",
    ):
        assert finding in findings, "\n".join(findings)
    located = _run(python, "-c", "import kimi_kernels; print(kimi_kernels.__file__)", env=env)
    assert located.startswith(str(tmp_path / "venv")), "kimi_kernels did not come from the wheel"
