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
        # KimiDeployment uid -> (namespace, name, status.sloAutoscaler): the SLO scaler's gauges.
        self._slo: dict[str, tuple[str, str, Mapping[str, Any]]] = {}
        self._lock = threading.Lock()
        self.registry.register(_DeploymentsCollector(self))
        self.registry.register(_SloCollector(self))

    def observe_request(self, verb: str, kind: str, status: int) -> None:
        self.api_requests.labels(verb, kind, str(status)).inc()

    def set_conditions(self, uid: str, status: Mapping[str, Any]) -> None:
        conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
        with self._lock:
            self._conditions[uid] = conditions

    def set_slo(self, uid: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """The SLO scaler's decisions in the deployment's status (none: its gauges go)."""
        with self._lock:
            if status.get("sloAutoscaler"):
                self._slo[uid] = (namespace, name, status["sloAutoscaler"])
            else:
                self._slo.pop(uid, None)

    def forget(self, uid: str) -> None:
        with self._lock:
            self._conditions.pop(uid, None)
            self._slo.pop(uid, None)

    def slo_roles(self) -> list[tuple[str, str, str, Mapping[str, Any]]]:
        """(namespace, deployment, role, that role's status.sloAutoscaler entry)."""
        with self._lock:
            known = list(self._slo.values())
        return [(ns, name, role, memory) for ns, name, slo in known for role, memory in slo.items()]

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


# The SLO scaler's gauges, per deployment and role: (name, help, the value in its status entry).
SLO_GAUGES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "kimi_operator_slo_desired_groups",
        "TP groups the SLO scaler wants for the role (status.sloAutoscaler).",
        ("desiredReplicas",),
    ),
    (
        "kimi_operator_slo_load_requests_per_second",
        "The role's request rate at the last answer of Prometheus.",
        ("load", "requestRate"),
    ),
    (
        "kimi_operator_slo_forecast_requests_per_second",
        "The role's request rate forecast one group start-up time ahead.",
        ("forecast", "requestRate"),
    ),
    (
        "kimi_operator_slo_predicted_ttft_seconds",
        "The model's TTFT (corrected) at the objective's percentile on the groups wanted.",
        ("needed", "ttftSeconds"),
    ),
    (
        "kimi_operator_slo_predicted_decode_tokens_per_second",
        "The model's per-user decode rate (corrected) at the objective's percentile on the "
        "groups wanted.",
        ("needed", "decodeTokensPerSecond"),
    ),
    (
        "kimi_operator_slo_model_ttft_error",
        "The model's last TTFT error: measured / predicted - 1 on the groups serving.",
        ("correction", "ttftError"),
    ),
    (
        "kimi_operator_slo_model_decode_error",
        "The model's last decode-rate error: measured / predicted - 1 on the groups serving.",
        ("correction", "decodeError"),
    ),
)


def _at(memory: Mapping[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = memory
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return float(value) if isinstance(value, (int, float)) else None


class _SloCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        known = self._metrics.slo_roles()
        for name, documentation, path in SLO_GAUGES:
            family = GaugeMetricFamily(
                name, documentation, labels=["namespace", "deployment", "role"]
            )
            for namespace, deployment, role, memory in known:
                value = _at(memory, path)
                if value is not None:
                    family.add_metric([namespace, deployment, role], value)
            yield family
