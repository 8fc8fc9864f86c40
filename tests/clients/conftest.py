"""The real kubectl and helm (`make tools`) against the embedded API server on 127.0.0.1, as the
cluster admin; a test without them skips here and fails under CI (tests/support/tools.py)."""

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_operator.embedded.clients import Kubectl
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.processes import wait
from kimi_operator.embedded.upstream import child_crds
from kimi_operator.k8s.client import Client, load_configuration
from tests.support.tools import require_tool


@pytest.fixture
def api() -> Iterator[EmbeddedApiServer]:
    """A bare cluster: the children's CRDs (their own operators'), not kimi-operator's."""
    with EmbeddedApiServer() as server:
        server.install_crds([*child_crds()])
        yield server


@pytest.fixture
def client(api: EmbeddedApiServer) -> Iterator[Client]:
    c = Client(load_configuration(api.url))
    yield c
    c.close()


@pytest.fixture
def kubectl(api: EmbeddedApiServer, tmp_path: Path) -> Kubectl:
    require_tool("kubectl")
    require_tool("helm")
    out = (tmp_path / "transcript.txt").open("w")
    return Kubectl.for_server(api.url, tmp_path / "home", out)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """The sandbox's process and the kubeconfig it writes (once written)."""
    require_tool("kubectl")
    require_tool("helm")
    kubeconfig = tmp_path / "sandbox.kubeconfig"
    command = ["-m", "kimi_operator.cli", "demo", "--serve", "--kubeconfig", str(kubeconfig)]
    process = subprocess.Popen(
        [sys.executable, *command],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait(lambda: kubeconfig.exists() or process.poll() is not None, 60, "the kubeconfig")
        assert process.poll() is None, process.communicate()[0]
        yield process, kubeconfig
    finally:
        if process.poll() is None:
            process.kill()
        if process.stdout is not None and not process.stdout.closed:
            # Unread: a test failed first. What the sandbox said (a traceback, if it stopped)
            # goes to the test's captured output, which pytest shows with the failure.
            print(process.communicate()[0])
