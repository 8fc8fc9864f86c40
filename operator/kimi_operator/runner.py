"""Start the operator: kopf with our registry and settings, a health endpoint, Prometheus metrics.

`run_operator` blocks (`kimi-operator run`); `OperatorThread` runs the same operator in a thread of
its own for the demo, the tests and the benchmark.
"""

import asyncio
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Self

import kopf
from prometheus_client import start_http_server

from kimi_operator.builders import OperatorDefaults
from kimi_operator.handlers import OperatorContext, child_watches, make_registry, resync_forever
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.metrics import Metrics

PREFIX = "kimi-operator.io"


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
    s = kopf.OperatorSettings()
    s.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    s.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    s.persistence.finalizer = f"{PREFIX}/finalizer"
    s.posting.reporting_component = "kimi-operator"
    s.posting.event_name_prefix = "kimi-operator-"
    s.peering.standalone = config.peering is None
    if config.peering is not None:
        s.peering.name = config.peering
        s.peering.mandatory = True
    return s


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port)


def context(config: RunConfig) -> OperatorContext:
    metrics = Metrics()
    configuration = load_configuration(config.server, config.token)
    client = Client(
        configuration,
        timeout_s=config.api_timeout_s,
        discovery_ttl_s=config.discovery_ttl_s,
        pool_size=config.workers + 4,
        on_request=metrics.observe_request,
    )
    return OperatorContext(
        configuration=configuration,
        client=client,
        defaults=config.defaults,
        metrics=metrics,
        resync_interval_s=config.resync_interval_s,
        workers=config.workers,
    )


async def operate(
    config: RunConfig,
    ctx: OperatorContext,
    *,
    stop: threading.Event | None = None,
    ready: threading.Event | None = None,
) -> None:
    metrics_server = None
    if config.metrics:
        host, port = _split(config.metrics)
        metrics_server, _ = start_http_server(port, host, registry=ctx.metrics.registry)
    liveness = None
    if config.health:
        host, port = _split(config.health)
        liveness = f"http://{host}:{port}/healthz"
    # Reconciles run in threads (the Kubernetes client blocks): `workers` of them at once.
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(config.workers, thread_name_prefix="kimi-reconcile")
    )
    background = [asyncio.create_task(resync_forever(ctx), name="kimi-operator-resync")]
    background += [
        asyncio.create_task(watch.run(), name=f"kimi-operator-watch-{watch.resource.plural}")
        for watch in child_watches(ctx, config.namespaces)
    ]
    try:
        await kopf.operator(
            registry=make_registry(ctx),
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
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
        ctx.events.shutdown(wait=True)
        ctx.client.close()


def run_operator(config: RunConfig) -> None:
    asyncio.run(operate(config, context(config)))


class OperatorThread:
    """The operator in a thread of its own; a context manager that waits until it is ready."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.ctx = context(config)
        self._stop, self._ready = threading.Event(), threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="kimi-operator", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(operate(self.config, self.ctx, stop=self._stop, ready=self._ready))
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
