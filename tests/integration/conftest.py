"""The operator running in-process against the embedded API server (kmock's emulator) on
127.0.0.1, as the chart's ServiceAccount: every request it makes is allowed or refused by the
chart's RBAC."""

import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from prometheus_client import generate_latest

from kimi_operator.api.crd import crd
from kimi_operator.builders import OperatorDefaults
from kimi_operator.controller.loop import UNEXPECTED
from kimi_operator.controller.metrics import Metrics
from kimi_operator.embedded.chart import operator_identity
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.processes import metric_total
from kimi_operator.embedded.upstream import CHILD_KINDS, CRD_FILES, upstream_crd
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.runner import OperatorThread, RunConfig
from tests.support.cluster import wait_for
from tests.support.stand_in_prometheus import StandInPrometheus

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


@pytest.fixture
def scaling_operator(
    api: EmbeddedApiServer, token: str, prometheus: StandInPrometheus
) -> Iterator[OperatorThread]:
    """The operator reading the stand-in Prometheus (`prometheus`: import it in the test module)."""
    config = RunConfig(
        server=api.url,
        token=token,
        resync_interval_s=RESYNC_S,
        workers=4,
        defaults=OperatorDefaults(prometheus_url=prometheus.url),
    )
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


def resyncs(metrics: Callable[[], str], count: int = 2, timeout: float = 30.0) -> None:
    """Wait until `count` more resync reconciles have completed than when called, by the
    operator's own counter (`metrics`: its Prometheus text). A deployment is reconciled by one
    worker at a time, so with one deployment the second of them started after the call: whatever
    was in flight then has landed, and a whole reconcile has seen the present state. A check that
    nothing happened holds on a slow machine and waits no longer than the resyncs take."""

    def done() -> float:
        return metric_total(metrics(), "kimi_operator_reconciles_total", trigger="resync")

    target = done() + count
    wait_for(lambda: done() >= target, timeout, f"{count} resync reconciles")


def metrics_of(operator: OperatorThread) -> Callable[[], str]:
    """The in-process operator's metrics, as its /metrics serves them."""
    return lambda: generate_latest(operator.controller.metrics.registry).decode()


class ResyncTicks:
    """The passes of the operator's resync loop (each enqueues every deployment it knows)."""

    def __init__(self) -> None:
        self.passes = 0
        self._changed = threading.Condition()

    def tick(self) -> None:
        with self._changed:
            self.passes += 1
            self._changed.notify_all()

    def wait(self, count: int, timeout: float = 30.0) -> None:
        """Until `count` more passes have run than when called."""
        with self._changed:
            target = self.passes + count
            if not self._changed.wait_for(lambda: self.passes >= target, timeout):
                raise AssertionError(f"timed out after {timeout} s waiting for {count} resyncs")


def resync_ticks(operator: OperatorThread, monkeypatch: pytest.MonkeyPatch) -> ResyncTicks:
    """Counts the resync loop's passes from now on."""
    ticks = ResyncTicks()
    resync = operator.controller.resync

    def counted() -> None:
        resync()
        ticks.tick()

    monkeypatch.setattr(operator.controller, "resync", counted)
    return ticks
