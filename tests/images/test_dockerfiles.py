"""Both Dockerfiles, checked without building: hadolint, and what each image must be."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.repo import ROOT

from .dockerfiles import CHECK, OPERATOR, SERVING, arg_default, instructions, stages

HADOLINT = Path(sys.executable).parent / "hadolint"
OCI_LABELS = ("title", "description", "source", "licenses", "version", "revision")


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HADOLINT), "--no-color", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("path", [OPERATOR, SERVING], ids=["operator", "vllm"])
def test_hadolint_clean(path: Path) -> None:
    result = hadolint(path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_finds_problems(tmp_path: Path) -> None:
    """The lint above can fail: an unpinned `latest` base and `apt-get` without cleanup."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:latest\nRUN apt-get update && apt-get install -y curl\n")
    result = hadolint(bad)
    assert result.returncode != 0
    assert "DL3007" in result.stdout


def _labels(path: Path) -> dict[str, str]:
    final = stages(path)[-1]
    text = " ".join(i.value for i in final if i.keyword == "LABEL")
    return dict(re.findall(r'org\.opencontainers\.image\.(\w+)="([^"]*)"', text))


@pytest.mark.parametrize("path", [OPERATOR, SERVING], ids=["operator", "vllm"])
def test_oci_labels(path: Path) -> None:
    labels = _labels(path)
    assert set(OCI_LABELS) <= set(labels)
    assert labels["version"] == "${VERSION}"
    assert labels["licenses"] == "Apache-2.0"


def test_operator_image() -> None:
    build, final = stages(OPERATOR)
    assert build[0].value == "${BASE_IMAGE} AS build"
    assert final[0].value == "${BASE_IMAGE}"
    assert arg_default(OPERATOR, "BASE_IMAGE").startswith("docker.io/library/python:3.11-slim")
    keywords = [i.keyword for i in final]
    # Only the built venv reaches the final stage: no sources, no compilers, no pip.
    assert [i.value for i in final if i.keyword in {"COPY", "ADD", "RUN"}] == [
        "--from=build /opt/kimi-operator /opt/kimi-operator"
    ]
    (user,) = [i.value for i in final if i.keyword == "USER"]
    assert user == "65532:65532"
    assert keywords[-1] == "ENTRYPOINT"
    assert json.loads(final[-1].value) == ["kimi-operator", "run"]
    (install,) = [i.value for i in build if i.keyword == "RUN"]
    # The distribution with no extra unless EXTRAS names one (the bench image: EXTRAS=bench).
    assert """pip install ".${EXTRAS:+[$EXTRAS]}" """ in install
    assert [i.value for i in build if i.keyword == "ARG"] == ["EXTRAS="]
    assert "uninstall --yes setuptools pip" in install
    # The operator's sources only: kimi_kernels is the serving image's distribution.
    assert [i.value for i in build if i.keyword == "COPY"] == [
        "pyproject.toml README.md ./",
        "operator/kimi_operator/ operator/kimi_operator/",
    ]


def test_serving_image() -> None:
    wheel, final = stages(SERVING)
    base = arg_default(SERVING, "BASE_IMAGE")
    # vLLM 0.33.0 exactly: by its release tag (and a digest where one is pinned).
    assert re.fullmatch(r"docker\.io/vllm/vllm-openai:v0\.33\.0(@sha256:[0-9a-f]{64})?", base)
    assert final[0].value == "${BASE_IMAGE}"
    assert wheel[0].value == "${WHEEL_BUILDER} AS wheel"
    assert "pip wheel --no-deps ./kernels --wheel-dir /wheels" in wheel[-1].value
    env = " ".join(i.value for i in final if i.keyword == "ENV")
    assert "VLLM_USE_V2_MODEL_RUNNER=1" in env
    (run,) = [i.value for i in final if i.keyword == "RUN"]
    # The check runs in the same layer as the install: a failing check fails the build.
    steps = [s.strip() for s in run.split("&&")]
    assert steps[0] == "python3 -m pip install --no-deps /tmp/wheels/*.whl"
    assert steps[-1] == "python3 /usr/local/share/kimi/check_fast_path.py"
    copies = [i.value for i in final if i.keyword == "COPY"]
    assert f"{CHECK.relative_to(ROOT)} /usr/local/share/kimi/check_fast_path.py" in copies


def _ignored(relative: str, patterns: list[str]) -> bool:
    """.dockerignore semantics for the patterns used here: `*`, `!path/`, `**/name`."""
    verdict = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern.removeprefix("!").rstrip("/")
        if body in {"*", relative} or relative.startswith(body + "/"):
            verdict = not negated
    return verdict


@pytest.mark.parametrize("path", [OPERATOR, SERVING], ids=["operator", "vllm"])
def test_build_context_holds_every_copied_path(path: Path) -> None:
    patterns = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#") and not line.startswith("**")
    ]
    for instruction in instructions(path):
        if instruction.keyword != "COPY" or instruction.value.startswith("--from"):
            continue
        *sources, _ = instruction.value.split()
        for source in sources:
            assert (ROOT / source).exists(), source
            assert not _ignored(source.rstrip("/"), patterns), f"{source} is in .dockerignore"


def test_build_context_excludes_the_rest() -> None:
    patterns = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#") and not line.startswith("**")
    ]
    for heavy in (".venv", ".git", ".tools", "benchmarks", "tests", "charts"):
        assert _ignored(heavy, patterns), heavy
