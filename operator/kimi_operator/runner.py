"""Start the operator: the controller (controller/), kopf watching KimiDeployments (and peering),
the child watches, a health endpoint, Prometheus metrics.

kopf is used for what it does well here: the KimiDeployment watch (list, watch, resume after a
dropped stream), peering between replicas and its liveness endpoint. Its one handler only hands
each event to the controller's queue (docs/architecture.md, "The controller loop").

`run_operator` blocks (`kimi-operator run`); `OperatorThread` runs the same operator in a thread of
its own for the demo, the tests and the benchmark.
"""

import asyncio
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import kopf
from prometheus_client import start_http_server

from kimi_operator.api import constants as c
from kimi_operator.builders import OperatorDefaults
from kimi_operator.builders.meta import MANAGER
from kimi_operator.controller.loop import Controller
from kimi_operator.controller.metrics import Metrics
from kimi_operator.k8s.client import Client, credentials, load_configuration
from kimi_operator.k8s.resources import COMPUTE_DOMAIN, LEADER_WORKER_SET
from kimi_operator.k8s.watch import ChildWatch


@dataclass(frozen=True)
class RunConfig:
    server: str | None = None  # plain-HTTP API server URL; None: in-cluster config or KUBECONFIG
    token: str | None = None  # with `server`: the bearer token (a ServiceAccount's) to send
    namespaces: Sequence[str] = ()  # empty: all namespaces
    defaults: OperatorDefaults = field(default_factory=OperatorDefaults)
    resync_interval_s: float = 60.0
    workers: int = 16
    api_timeout_s: float = 15.0  # an API request without an answer this long is retried
    discovery_ttl_s: float = 30.0  # how soon a CRD installed or removed is noticed
    # "ADDRESS:PORT" for the health endpoint (kopf's /healthz) and the metrics; None: off.
    health: str | None = None
    metrics: str | None = None
    # kopf peering (its KopfPeering/ClusterKopfPeering CRDs must be installed): with several
    # replicas, one handles events and the others stand by. None: standalone.
    peering: str | None = None


def settings(config: RunConfig) -> kopf.OperatorSettings:
    """Peering only: an event-watching handler keeps no progress, diff base or finalizer, and
    posts no Events of kopf's."""
    s = kopf.OperatorSettings()
    s.peering.standalone = config.peering is None
    if config.peering is not None:
        s.peering.name = config.peering
        s.peering.mandatory = True
    return s


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port)


def controller(config: RunConfig) -> tuple[Controller, Any]:
    """The controller, and the `kubernetes` Configuration it and kopf authenticate with."""
    metrics = Metrics()
    configuration = load_configuration(config.server, config.token)
    client = Client(
        configuration,
        timeout_s=config.api_timeout_s,
        discovery_ttl_s=config.discovery_ttl_s,
        pool_size=config.workers + 4,
        on_request=metrics.observe_request,
    )
    loop = Controller(
        client,
        config.defaults,
        metrics,
        workers=config.workers,
        resync_interval_s=config.resync_interval_s,
    )
    return loop, configuration


def registry(loop: Controller, configuration: Any) -> kopf.OperatorRegistry:
    """kopf's part: log in with the operator's credentials, hand every event to the queue."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        info = credentials(configuration)
        return kopf.ConnectionInfo(
            server=info.server,
            ca_path=info.ca_path,
            insecure=info.insecure,
            username=info.username,
            password=info.password,
            scheme=info.scheme,
            token=info.token,
            certificate_path=info.certificate_path,
            private_key_path=info.private_key_path,
        )

    @kopf.on.event(c.GROUP, c.VERSION, c.PLURAL, id="enqueue", registry=registry)
    async def on_event(event: Mapping[str, Any], **_: Any) -> None:
        loop.observe(event.get("type"), event["object"])

    return registry


def child_watches(loop: Controller, namespaces: Sequence[str]) -> list[ChildWatch]:
    """A watch per resource whose status feeds a deployment's, per namespace (or cluster-wide):
    a change refreshes its owner now rather than at the next resync."""
    return [
        ChildWatch(
            loop.client,
            resource,
            namespace,
            loop.child_changed,
            label_selector=f"app.kubernetes.io/managed-by={MANAGER}",
        )
        for resource in (LEADER_WORKER_SET, COMPUTE_DOMAIN)
        for namespace in ([*namespaces] if namespaces else [None])
    ]


async def operate(
    config: RunConfig,
    loop: Controller,
    configuration: Any,
    *,
    stop: threading.Event | None = None,
    ready: threading.Event | None = None,
) -> None:
    metrics_server = None
    if config.metrics:
        host, port = _split(config.metrics)
        metrics_server, _ = start_http_server(port, host, registry=loop.metrics.registry)
    liveness = None
    if config.health:
        host, port = _split(config.health)
        liveness = f"http://{host}:{port}/healthz"
    loop.start()
    watches = child_watches(loop, config.namespaces)
    threads = [
        threading.Thread(target=w.run, name=f"kimi-watch-{w.resource.plural}", daemon=True)
        for w in watches
    ]
    for thread in threads:
        thread.start()
    try:
        await kopf.operator(
            registry=registry(loop, configuration),
            settings=settings(config),
            clusterwide=not config.namespaces,
            namespaces=list(config.namespaces),
            standalone=config.peering is None,
            peering_name=config.peering,
            liveness_endpoint=liveness,
            stop_flag=stop,
            ready_flag=ready,
        )
    finally:
        for watch in watches:
            watch.stop()
        await asyncio.to_thread(_join, threads)
        await asyncio.to_thread(loop.stop)
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
        loop.client.close()


def _join(threads: Sequence[threading.Thread], timeout_s: float = 30.0) -> None:
    for thread in threads:
        thread.join(timeout_s)


def run_operator(config: RunConfig) -> None:
    asyncio.run(operate(config, *controller(config)))


class OperatorThread:
    """The operator in a thread of its own; a context manager that waits until it is ready."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.controller, self._configuration = controller(config)
        self._stop, self._ready = threading.Event(), threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="kimi-operator", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(
                operate(
                    self.config,
                    self.controller,
                    self._configuration,
                    stop=self._stop,
                    ready=self._ready,
                )
            )
        except BaseException as error:  # reported by __enter__/__exit__
            self._failure = error
            self._ready.set()

    def __enter__(self) -> Self:
        self._thread.start()
        self._ready.wait(timeout=60)
        if self._failure is not None:
            raise RuntimeError(f"the operator did not start: {self._failure!r}")
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        if self._thread.is_alive():
            raise RuntimeError("the operator did not stop within 60 s")
