"""The operator's own Prometheus metrics, all named `kimi_operator_*`."""

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BUDGET_BUCKETS = (0.25, 0.5, 0.75, 0.9, 1.0)
# A TP group's start: a warm one in minutes, a cold Kimi K3 in most of an hour, the budget 8 h.
STARTUP_BUCKETS = (
    60.0,
    120.0,
    300.0,
    600.0,
    900.0,
    1200.0,
    1800.0,
    2700.0,
    3600.0,
    5400.0,
    7200.0,
    14400.0,
    28800.0,
)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reconciles = Counter(
            "kimi_operator_reconciles",
            "Reconciles of KimiDeployments by trigger (create, update, resume, resync) and result "
            "(reconciled, invalid, error).",
            ["trigger", "result"],
            registry=self.registry,
        )
        self.errors = Counter(
            "kimi_operator_reconcile_errors",
            "Reconciles that failed, by kind: temporary (retried with backoff), permanent (an "
            "API refusal, retried at the resync) or unexpected (a bug: logged with its traceback)",
            ["kind"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "kimi_operator_reconcile_duration_seconds",
            "Time one reconcile takes, API calls included.",
            ["trigger"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.api_requests = Counter(
            "kimi_operator_api_requests",
            "Requests to the Kubernetes API server by verb, kind and HTTP status (0: no answer).",
            ["verb", "kind", "code"],
            registry=self.registry,
        )
        self.group_startup = Histogram(
            "kimi_operator_group_startup_seconds",
            "TP group starts: leader pod scheduled to leader Ready, seconds (status.groups).",
            buckets=STARTUP_BUCKETS,
            registry=self.registry,
        )
        self.group_startup_budget = Histogram(
            "kimi_operator_group_startup_budget_fraction",
            "TP group starts as a fraction of their budget (spec.serving.startupTimeoutMinutes): "
            "near 1, the next slow start is killed by the startup probe.",
            buckets=BUDGET_BUCKETS,
            registry=self.registry,
        )
        self.group_failures = Counter(
            "kimi_operator_group_failures",
            "TP group failures the restart budget counts, by reason (ImagePull, OOMKilled, "
            "NcclOrImex, PreflightFailed, Crashed, Recreated).",
            ["reason"],
            registry=self.registry,
        )
        self.evacuations = Counter(
            "kimi_operator_evacuations",
            "TP groups evacuated from unfit nodes (replaced, then drained and deleted), by why "
            "the node is unfit (Cordoned, Tainted, NodeCondition); counted when each begins.",
            ["reason"],
            registry=self.registry,
        )
        self.leader = Gauge(
            "kimi_operator_leader",
            "1 while this replica holds the leader Lease and reconciles (or runs without leader "
            "election), 0 while it stands by.",
            registry=self.registry,
        )
        # KimiDeployment uid -> condition type -> status. By uid: a deployment deleted and
        # created again under its name is two, whichever is forgotten or counted first.
        self._conditions: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self.registry.register(_DeploymentsCollector(self))

    def observe_request(self, verb: str, kind: str, status: int) -> None:
        self.api_requests.labels(verb, kind, str(status)).inc()

    def set_conditions(self, uid: str, status: Mapping[str, Any]) -> None:
        conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
        with self._lock:
            self._conditions[uid] = conditions

    def forget(self, uid: str) -> None:
        with self._lock:
            self._conditions.pop(uid, None)

    def deployments_by_condition(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        with self._lock:
            for conditions in self._conditions.values():
                for kind, status in conditions.items():
                    counts[kind, status] = counts.get((kind, status), 0) + 1
        return counts


class _DeploymentsCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "kimi_operator_deployments",
            "KimiDeployments by condition type and status.",
            labels=["condition", "status"],
        )
        for (kind, status), count in sorted(self._metrics.deployments_by_condition().items()):
            family.add_metric([kind, status], count)
        yield family
