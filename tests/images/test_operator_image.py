"""The operator image built here without a Docker daemon and then run: buildah with vfs
storage and chroot isolation, on a `debootstrap --variant=minbase` Debian root with python3-venv
passed as the BASE_IMAGE build-arg."""

import json
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.admission import admission_review
from tests.support.repo import ROOT

from .dockerfiles import OPERATOR
from .slow import require_image_tests

# Made by scripts/build-test-rootfs.sh.
ROOTFS_TAR = ROOT / ".tools" / "cache" / "bookworm-minbase-python3.tar"
BASE = "localhost/kimi-test-base:bookworm"
IMAGE = "localhost/kimi-operator:test"
BENCH_IMAGE = "localhost/kimi-operator-bench:test"
# The host's CA bundle, for pip inside the build where TLS is intercepted (as on these machines).
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
SAMPLES = ROOT / "crds" / "samples"


def _run(*command: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def _ok(*command: str, timeout: float = 1200) -> str:
    result = _run(*command, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _rootfs_tar() -> Path:
    """A minbase Debian bookworm with python3-venv, as a tar (made once into .tools/cache)."""
    _ok("bash", str(ROOT / "scripts" / "build-test-rootfs.sh"))
    return ROOTFS_TAR


class Buildah:
    def __init__(self, storage: Path) -> None:
        self.prefix = (
            "buildah",
            "--root",
            str(storage / "root"),
            "--runroot",
            str(storage / "run"),
            "--storage-driver",
            "vfs",
        )

    def __call__(self, *args: str, timeout: float = 1200) -> str:
        return _ok(*self.prefix, *args, timeout=timeout).strip()

    def run(
        self, container: str, *command: str, volume: str = ""
    ) -> subprocess.CompletedProcess[str]:
        volumes = ("--volume", volume) if volume else ()
        return _run(
            *self.prefix, "run", "--isolation", "chroot", *volumes, container, "--", *command
        )


@pytest.fixture(scope="module")
def buildah(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Buildah]:
    """buildah on its own storage, with the base image committed."""
    require_image_tests("buildah", "debootstrap", root=True)
    work = tmp_path_factory.mktemp("image")
    buildah = Buildah(work / "storage")
    base = buildah("from", "scratch")
    buildah("add", base, str(_rootfs_tar()), "/")
    if HOST_CA.exists():
        buildah("copy", base, str(HOST_CA), "/etc/ssl/certs/build-ca.crt")
        buildah("config", "--env", "PIP_CERT=/etc/ssl/certs/build-ca.crt", base)
    buildah("commit", "--quiet", base, BASE)
    yield buildah
    shutil.rmtree(work, ignore_errors=True)


def _build(buildah: Buildah, tag: str, *build_args: str) -> str:
    """images/operator/Dockerfile built as `tag`; a working container of it."""
    args = [arg for pair in (("--build-arg", a) for a in build_args) for arg in pair]
    buildah(
        "build",
        "--isolation",
        "chroot",
        "--file",
        str(OPERATOR),
        "--build-arg",
        f"BASE_IMAGE={BASE}",
        "--build-arg",
        "VERSION=0.1.0",
        *args,
        "--tag",
        tag,
        str(ROOT),
    )
    return buildah("from", "--quiet", tag)


@pytest.fixture(scope="module")
def images(buildah: Buildah) -> dict[str, str]:
    """Both images, built side by side (each build waits mostly on pip's downloads and on vfs
    copying layers): a working container of each, by tag."""
    with ThreadPoolExecutor(2) as pool:
        operator = pool.submit(_build, buildah, IMAGE)
        bench = pool.submit(_build, buildah, BENCH_IMAGE, "EXTRAS=bench")
        return {IMAGE: operator.result(), BENCH_IMAGE: bench.result()}


@pytest.fixture(scope="module")
def built(buildah: Buildah, images: dict[str, str]) -> tuple[Buildah, str]:
    return buildah, images[IMAGE]


@pytest.fixture(scope="module")
def bench_built(buildah: Buildah, images: dict[str, str]) -> tuple[Buildah, str]:
    return buildah, images[BENCH_IMAGE]


def test_image_config(built: tuple[Buildah, str]) -> None:
    buildah, _ = built
    config: dict[str, Any] = json.loads(buildah("inspect", "--type", "image", IMAGE))["OCIv1"][
        "config"
    ]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["kimi-operator", "run"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == "kimi-operator"
    assert labels["org.opencontainers.image.version"] == "0.1.0"


def test_runs_as_65532(built: tuple[Buildah, str]) -> None:
    buildah, container = built
    result = buildah.run(container, "id", "-u")
    assert result.stdout.strip() == "65532", result.stderr


def test_version(built: tuple[Buildah, str]) -> None:
    buildah, container = built
    result = buildah.run(container, "kimi-operator", "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "kimi-operator 0.1.0"


def test_validate_a_sample(built: tuple[Buildah, str]) -> None:
    buildah, container = built
    volume = f"{SAMPLES}:/samples:ro"
    good = buildah.run(
        container, "kimi-operator", "validate", "/samples/k3-tp8-dspark.yaml", volume=volume
    )
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.strip() == "/samples/k3-tp8-dspark.yaml: valid"
    bad = buildah.run(
        container, "kimi-operator", "validate", "/samples/rejected/k3-lora-tp12.yaml", volume=volume
    )
    assert bad.returncode == 1
    assert "spec.gpus: is not one of the allowed values (got 12; allowed: 8, 16)" in bad.stdout


def test_runtime_dependencies_only(built: tuple[Buildah, str]) -> None:
    """What `run` imports is there, and loads no second HTTP stack (aiohttp is installed, as a
    requirement of the kubernetes package's asyncio client, never imported) nor OpenTelemetry
    until the chart's operator.tracesEndpoint asks for the operator's spans, which the image can
    then export; what only development, the demo, the bench's plots or the serving image need is
    not, nor pip."""
    buildah, container = built
    imports = (
        "import sys, kubernetes, prometheus_client, kimi_operator.runner; "
        "assert 'aiohttp' not in sys.modules, 'a second HTTP stack'; "
        "assert 'kopf' not in sys.modules, 'the webhook is another command'; "
        "assert 'opentelemetry' not in sys.modules, 'spans are off unless asked'; "
        "from kimi_operator.spans import Tracing; "
        "Tracing('http://127.0.0.1:4318/v1/traces').shutdown()"
    )
    assert buildah.run(container, "python3", "-c", imports).returncode == 0
    absent = (
        "pytest", "kmock", "celpy", "matplotlib", "kimi_kernels",
        "kimi_operator.embedded", "kimi_operator.bench.stub", "pip", "setuptools",
    )  # fmt: skip
    for module in absent:
        result = buildah.run(container, "python3", "-c", f"import {module}")
        assert result.returncode != 0, f"{module} is in the image"


# Run in the image: `kimi-operator admission --insecure` started, an AdmissionReview (argv[1])
# posted to it, its response printed.
ADMISSION_PROBE = """
import json, re, subprocess, sys, urllib.request
command = ["kimi-operator", "admission", "--port", "0", "--insecure"]
server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
for line in server.stderr:
    found = re.search(r"serving admission reviews at (\\S+)", line)
    if found:
        break
request = urllib.request.Request(
    found.group(1) + "/validate-kimideployments", data=sys.argv[1].encode(),
    headers={"Content-Type": "application/json"},
)
print(json.dumps(json.load(urllib.request.urlopen(request, timeout=60))["response"]))
server.terminate()
"""


def test_admission_webhook_answers(built: tuple[Buildah, str]) -> None:
    """The image's second command: the webhook serves and refuses what CEL lets through."""
    buildah, container = built
    doc = yaml.safe_load((SAMPLES / "k3-tp8-dspark.yaml").read_text())
    doc["spec"]["engineArgs"] = ["--max-num-batched-tokens", "abc"]
    review = json.dumps(admission_review(doc))
    result = buildah.run(container, "python3", "-c", ADMISSION_PROBE, review)
    assert result.returncode == 0, result.stderr
    response = json.loads(result.stdout.splitlines()[-1])
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("spec.engineArgs: vLLM 0.33.0's serve parser")


def test_bench_image_draws_the_plots(bench_built: tuple[Buildah, str]) -> None:
    """The image `bench --render-job` names: the CLI and matplotlib, drawing as the Job does
    (MPLCONFIGDIR=/tmp; the Job's root filesystem is read-only)."""
    buildah, container = bench_built
    config: dict[str, Any] = json.loads(buildah("inspect", "--type", "image", BENCH_IMAGE))
    assert config["OCIv1"]["config"]["Labels"]["org.opencontainers.image.title"] == (
        "kimi-operator-bench"
    )
    draw = (
        "import os, pathlib; os.environ['MPLCONFIGDIR'] = '/tmp'; "
        "from kimi_operator.bench.report import cdf_plot; "
        "cdf_plot(pathlib.Path('/tmp/itl.png'), [([1.0, 2.0, 4.0], 'per token')], 'ITL'); "
        "print(pathlib.Path('/tmp/itl.png').read_bytes()[:4])"
    )
    result = buildah.run(container, "python3", "-c", draw)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(b"\x89PNG")
    help_text = buildah.run(container, "kimi-operator", "bench", "--help")
    assert help_text.returncode == 0, help_text.stderr
