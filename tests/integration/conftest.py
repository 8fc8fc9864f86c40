"""The operator running in-process against the embedded API server (kmock's emulator) on
127.0.0.1, as the chart's ServiceAccount: every request it makes is allowed or refused by the
chart's RBAC."""

from collections.abc import Iterator
from typing import TypeVar

import pytest

from kimi_operator.api.crd import crd
from kimi_operator.controller.loop import UNEXPECTED
from kimi_operator.controller.metrics import Metrics
from kimi_operator.embedded.chart import operator_identity
from kimi_operator.embedded.server import EmbeddedApiServer
from kimi_operator.embedded.upstream import CHILD_KINDS, CRD_FILES, upstream_crd
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.runner import OperatorThread, RunConfig

RESYNC_S = 0.5
ERRORS = "kimi_operator_reconcile_errors_total"
T = TypeVar("T")


UPSTREAM_CRDS = {kind: upstream_crd(kind) for kind in CRD_FILES}


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


@pytest.fixture(autouse=True)
def no_unexpected_exceptions(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test fails if an operator it ran in-process raised unexpectedly in a reconcile (a
    bug the controller logs and survives, so that nothing else would show it)."""
    made: list[Metrics] = []
    original = Metrics.__init__

    def recording(self: Metrics) -> None:
        original(self)
        made.append(self)

    monkeypatch.setattr(Metrics, "__init__", recording)
    yield
    raised = [m.registry.get_sample_value(ERRORS, {"kind": UNEXPECTED}) or 0 for m in made]
    assert not any(raised), f"an operator raised unexpectedly in {sum(raised):.0f} reconciles"
