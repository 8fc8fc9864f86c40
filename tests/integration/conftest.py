"""kopf running in-process against the embedded API server (kmock's emulator) on 127.0.0.1, as
the chart's ServiceAccount: every request it makes is allowed or refused by the chart's RBAC."""

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from kimi_operator.api.crd import crd
from kimi_operator.embedded.chart import operator_identity
from kimi_operator.embedded.processes import wait
from kimi_operator.embedded.server import EmbeddedApiServer
from kimi_operator.embedded.upstream import CHILD_KINDS, CRD_FILES, upstream_crd
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT
from kimi_operator.runner import OperatorThread, RunConfig

ROOT = Path(__file__).resolve().parents[2]
RESYNC_S = 0.5
T = TypeVar("T")


UPSTREAM_CRDS = {kind: upstream_crd(kind) for kind in CRD_FILES}


def older_crd() -> dict[str, Any]:
    """The KimiDeployment CRD as an older one without today's schema and rules (any spec): how an
    object the current CRD refuses gets stored, and is kept when the current one is installed."""
    older = crd()
    for version in older["spec"]["versions"]:
        schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        version["schema"] = {"openAPIV3Schema": schema}
    return older


def sample(name: str = "k3-tp8-dspark") -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(
        (ROOT / "crds" / "samples" / f"{name}.yaml").read_text()
    )
    return copy.deepcopy(loaded)


def wait_for(probe: Callable[[], T | None], timeout: float = 10.0, what: str = "condition") -> T:
    return wait(probe, timeout, what, every=0.02)


@pytest.fixture
def installed(request: pytest.FixtureRequest) -> list[str]:
    """The upstream CRDs installed; override with `@pytest.mark.parametrize('installed', ...,
    indirect=True)`."""
    kinds: list[str] = getattr(request, "param", list(CHILD_KINDS))
    return kinds


@pytest.fixture
def api(installed: list[str]) -> Iterator[EmbeddedApiServer]:
    with EmbeddedApiServer() as server:
        server.install_crds([crd(), *(UPSTREAM_CRDS[k] for k in installed)])
        yield server


@pytest.fixture
def token(api: EmbeddedApiServer) -> str:
    """The bearer token of the chart's ServiceAccount, its RBAC stored in `api`."""
    return operator_identity(api)


@pytest.fixture
def client(api: EmbeddedApiServer) -> Iterator[Client]:
    c = Client(load_configuration(api.url))
    yield c
    c.close()


@pytest.fixture
def operator(api: EmbeddedApiServer, token: str) -> Iterator[OperatorThread]:
    config = RunConfig(server=api.url, token=token, resync_interval_s=RESYNC_S, workers=4)
    with OperatorThread(config) as op:
        yield op


def status_of(client: Client, namespace: str, name: str) -> dict[str, Any]:
    kd = client.get(KIMI_DEPLOYMENT, namespace, name)
    assert kd is not None
    status: dict[str, Any] = kd.get("status") or {}
    return status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in status.get("conditions", []) if c["type"] == kind)
    return found
