"""Start the operator: with leader election, wait for the Lease; then the controller
(controller/), the KimiDeployment and child watches (k8s/watch.py), and meanwhile a health
endpoint and the Prometheus metrics (docs/architecture.md, "The controller loop").

Everything the operator sends and watches goes through one HTTP client (`k8s/client.py`); the
watches only enqueue.

`run_operator` blocks (`kimi-operator run`); `OperatorThread` runs the same operator in a thread of
its own for the demo, the tests and the benchmark.
"""

import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from typing import Self

from prometheus_client import start_http_server

from kimi_operator.builders import OperatorDefaults
from kimi_operator.builders.meta import MANAGER
from kimi_operator.controller.leader import LeaderElector, LeaseConfig, Watchdog
from kimi_operator.controller.loop import RELIST_INTERVAL_S, Controller
from kimi_operator.controller.metrics import Metrics
from kimi_operator.k8s.client import WATCH_INACTIVITY_S, Client, load_configuration
from kimi_operator.k8s.ratelimit import TokenBucket
from kimi_operator.k8s.resources import (
    COMPUTE_DOMAIN,
    JOB,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    NODE,
    PERSISTENT_VOLUME_CLAIM,
)
from kimi_operator.k8s.watch import Watch, refreshing
from kimi_operator.spans import Tracing

# How long a replica that lost the Lease waits for its threads before the process ends anyway.
LOST_STEP_DOWN_S = 5.0
STEP_DOWN_S = 30.0  # a graceful stop's bound


class LeadershipLost(RuntimeError):
    """The Lease could not be renewed: the process ends (and its container restarts) so that it
    never reconciles beside the new leader, as client-go's controllers do."""


@dataclass(frozen=True)
class RunConfig:
    server: str | None = None  # plain-HTTP API server URL; None: in-cluster config or KUBECONFIG
    token: str | None = None  # with `server`: the bearer token (a ServiceAccount's) to send
    namespaces: Sequence[str] = ()  # empty: all namespaces
    defaults: OperatorDefaults = field(default_factory=OperatorDefaults)
    resync_interval_s: float = 60.0
    relist_interval_s: float = RELIST_INTERVAL_S  # every KimiDeployment listed (a missed ADDED)
    workers: int = 16
    api_timeout_s: float = 15.0  # an API request without an answer this long is retried
    # Client-side rate limit (client-go's QPS and burst); None: none (tests, the benchmark's
    # in-process uses).
    kube_api_qps: float | None = None
    kube_api_burst: int = 1000
    discovery_ttl_s: float = 30.0  # how soon a CRD installed or removed is noticed
    watch_inactivity_s: float = WATCH_INACTIVITY_S  # a silent watch is resumed after this
    # "ADDRESS:PORT" for the health endpoint (/healthz) and the metrics; None: off.
    health: str | None = None
    metrics: str | None = None
    # With several replicas: the Lease they elect a leader on. None: this replica reconciles
    # alone, from the start.
    leader_election: LeaseConfig | None = None
    # The OTLP/HTTP URL (`.../v1/traces`) that receives the operator's reconciles as spans
    # (kimi_operator/spans.py); "": none, and OpenTelemetry is never imported.
    traces_endpoint: str = ""


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port)


def controller(config: RunConfig) -> Controller:
    """The controller, on a client authenticated from `config` (or the cluster's config)."""
    metrics = Metrics()
    client = Client(
        load_configuration(config.server, config.token),
        timeout_s=config.api_timeout_s,
        discovery_ttl_s=config.discovery_ttl_s,
        pool_size=config.workers + 4,
        on_request=metrics.observe_request,
        watch_inactivity_s=config.watch_inactivity_s,
        rate_limit=(
            None
            if config.kube_api_qps is None
            else TokenBucket(config.kube_api_qps, config.kube_api_burst)
        ),
    )
    return Controller(
        client,
        config.defaults,
        metrics,
        workers=config.workers,
        resync_interval_s=config.resync_interval_s,
        relist_interval_s=config.relist_interval_s,
        namespaces=config.namespaces,
        tracing=Tracing(config.traces_endpoint) if config.traces_endpoint else None,
    )


def watches(loop: Controller, namespaces: Sequence[str]) -> list[Watch]:
    """The KimiDeployments (each event to `Controller.observe`), and a watch per resource whose
    status feeds a deployment's (a change refreshes its owner now rather than at the next
    resync); per namespace, or cluster-wide. And the Nodes, cluster-wide, unless evacuation is
    off: what makes groups leave one (builders/nodes.py) changes every deployment's plan."""
    where = [*namespaces] if namespaces else [None]
    deployments = [
        Watch(loop.client, KIMI_DEPLOYMENT, namespace, loop.observe, with_items=True)
        for namespace in where
    ]
    children = [
        Watch(
            loop.client,
            resource,
            namespace,
            refreshing(loop.child_changed),
            label_selector=f"app.kubernetes.io/managed-by={MANAGER}",
        )
        for resource in (LEADER_WORKER_SET, COMPUTE_DOMAIN, JOB, PERSISTENT_VOLUME_CLAIM)
        for namespace in where
    ]
    nodes = [
        Watch(
            loop.client, NODE, None, loop.node_changed, with_items=True, on_listed=loop.nodes_listed
        )
    ]
    return deployments + children + (nodes if loop.defaults.nodes.policy.enabled else [])


def health_server(address: str, healthy: Callable[[], bool]) -> ThreadingHTTPServer:
    """GET /healthz: 200 while `healthy()`, else 503 (the kubelet's liveness probe)."""

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/healthz":
                self.send_error(404)
                return
            ok = healthy()
            body = b"ok\n" if ok else b"unhealthy\n"
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:  # probes every few seconds: not logged
            pass

    server = ThreadingHTTPServer(_split(address), Health)
    threading.Thread(target=server.serve_forever, name="kimi-health", daemon=True).start()
    return server


class Operator:
    """One replica: it stands by until it leads (with leader election), then reconciles until
    `stop` is set or the Lease is lost."""

    def __init__(self, config: RunConfig, loop: Controller) -> None:
        self.config, self.controller = config, loop
        self.elector = (
            None
            if config.leader_election is None
            else LeaderElector(loop.client, config.leader_election)
        )
        self.stop = threading.Event()
        self.started = threading.Event()  # serving, and leading or standing by
        self.leading = threading.Event()
        self.fenced = threading.Event()  # the leadership was lost: no write, ever again
        self._watches: list[Watch] = []
        self._threads: list[threading.Thread] = []

    def healthy(self) -> bool:
        """Not healthy: a watch whose thread died (the kubelet restarts the container rather
        than let the operator go blind), or a leader that missed its renew deadline (about to
        stop)."""
        if any(watch.failed is not None for watch in self._watches):
            return False
        if self.elector is None or not self.leading.is_set():
            return True
        return self.elector.leading()

    def run(self) -> None:
        """Until `stop`; `LeadershipLost` when the Lease was lost."""
        config, loop = self.config, self.controller
        servers: list[HTTPServer] = []
        lost = False
        try:
            if config.metrics:
                host, port = _split(config.metrics)
                servers.append(start_http_server(port, host, registry=loop.metrics.registry)[0])
            if config.health:
                servers.append(health_server(config.health, self.healthy))
            loop.metrics.leader.set(0)
            if self.elector is None:
                self._lead()
                self.started.set()
                self.stop.wait()
                return
            self.started.set()  # standing by
            if self.elector.acquire(self.stop):
                elector = self.elector
                loop.client.write_budget = lambda: (
                    0.0 if self.fenced.is_set() else elector.write_budget()
                )
                lost = not self._lead_and_hold(elector)
        finally:
            self._step_down(release=not lost)
            for server in servers:
                server.shutdown()
                server.server_close()
            loop.client.close()
            if loop.tracing is not None:  # the spans still queued
                loop.tracing.shutdown()
        if lost:
            raise LeadershipLost("the leader Lease was lost; stopping so as not to reconcile twice")

    def _lead_and_hold(self, elector: LeaderElector) -> bool:
        """Start leading while renewing (starting takes a while: the renewals must not wait),
        until `stop` (True) or the loss (False); a watchdog fences at the deadline even while a
        renewal hangs."""
        done = threading.Event()
        kept: list[bool] = []
        watchdog = Watchdog(elector, self._fence)
        threads = [
            threading.Thread(target=watchdog.run, args=(done,), name="kimi-lease-watchdog"),
            threading.Thread(
                target=lambda: kept.append(elector.hold(self.stop)), name="kimi-lease"
            ),
        ]
        for thread in threads:
            thread.daemon = True
            thread.start()
        try:
            self._lead()
        except BaseException:
            self.stop.set()  # a failed start ends the renewals too (`run` gives the Lease up)
            raise
        finally:
            threads[1].join()
            done.set()
        if not kept or not kept[0]:
            self._fence()
            return False
        return True

    def _fence(self) -> None:
        """The leadership is lost: the queue hands out no more work (first), and the client
        refuses every write but the Lease's, so that reconciles in flight end at their next
        write; then the process ends (`run`)."""
        self.controller.queue.shut_down()
        self.fenced.set()
        self.controller.metrics.leader.set(0)

    def _lead(self) -> None:
        loop = self.controller
        loop.start()
        self._watches = watches(loop, self.config.namespaces)
        self._threads = [
            threading.Thread(target=w.run, name=f"kimi-watch-{w.resource.plural}", daemon=True)
            for w in self._watches
        ]
        for thread in self._threads:
            thread.start()
        loop.metrics.leader.set(1)
        self.leading.set()

    def _step_down(self, *, release: bool) -> None:
        """Within a bounded time: a replica that lost the Lease must end soon, whatever its
        threads wait for (they are daemons; the process exit ends them)."""
        deadline = time.monotonic() + (STEP_DOWN_S if release else LOST_STEP_DOWN_S)
        if not release:
            self.controller.queue.shut_down()  # first: no new work while the watches stop
        for watch in self._watches:
            watch.stop()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self.leading.is_set():
            self.controller.stop(max(0.0, deadline - time.monotonic()))
            self.controller.metrics.leader.set(0)
            self.leading.clear()
        if self.elector is not None and release:
            self.elector.release()


def run_operator(config: RunConfig) -> None:
    """Until SIGTERM (the kubelet stopping the pod) or SIGINT: then a clean stop, the Lease
    given up."""
    operator = Operator(config, controller(config))
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: operator.stop.set())
    operator.run()


class OperatorThread:
    """The operator in a thread of its own; a context manager that waits until it has started
    (leading, or standing by with leader election)."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.controller = controller(config)
        self.operator = Operator(config, self.controller)
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="kimi-operator", daemon=True)

    def _main(self) -> None:
        try:
            self.operator.run()
        except BaseException as error:  # reported by __enter__/__exit__
            self.failure = error
            self.operator.started.set()

    def __enter__(self) -> Self:
        self._thread.start()
        self.operator.started.wait(timeout=60)
        if self.failure is not None:
            raise RuntimeError(f"the operator did not start: {self.failure!r}")
        return self

    def stop(self) -> None:
        """Stop it and wait until it has (its Lease released)."""
        self.operator.stop.set()
        self._thread.join(timeout=60)
        if self._thread.is_alive():
            raise RuntimeError("the operator did not stop within 60 s")

    def __exit__(self, *_: object) -> None:
        self.stop()
