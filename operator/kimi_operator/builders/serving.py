"""Per deployment: the Service in front of the leaders, the PodMonitor and the disruption budget."""

from typing import Any

from kimi_operator.api.constants import METRICS_PORT
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders.disaggregation import role_selector
from kimi_operator.builders.meta import (
    LWS_WORKER_INDEX_LABEL,
    ROUTABLE,
    metadata,
    selector_labels,
)

# Prometheus's name for the pod label app.kubernetes.io/instance: the KimiDeployment's name.
DEPLOYMENT_SOURCE_LABEL = "__meta_kubernetes_pod_label_app_kubernetes_io_instance"
# And for llm-d.ai/role, on the groups of spec.prefill: the series' `role` (none without it).
ROLE_SOURCE_LABEL = "__meta_kubernetes_pod_label_llm_d_ai_role"


def service(kd: KimiDeployment) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(kd, kd.metadata.name, "api"),
        "spec": {
            "type": kd.spec.service.type,
            # Routable leaders only: a group leaving is taken out before it is deleted (drain.py).
            "selector": selector_labels(kd)
            | {LWS_WORKER_INDEX_LABEL: "0"}
            | role_selector(kd)
            | ROUTABLE,
            "ports": [
                {
                    "name": "http",
                    "port": kd.spec.service.port,
                    "targetPort": "http",
                    "protocol": "TCP",
                },
                {
                    "name": "metrics",
                    "port": METRICS_PORT,
                    "targetPort": "metrics",
                    "protocol": "TCP",
                },
            ],
        },
    }


def service_url(kd: KimiDeployment) -> str:
    """In-cluster URL of the leaders' Service."""
    return f"http://{kd.metadata.name}.{kd.metadata.namespace}.svc:{kd.spec.service.port}"


def endpoint(kd: KimiDeployment) -> str:
    """In-cluster URL of the OpenAI-compatible API."""
    return f"{service_url(kd)}/v1"


def pod_monitor(kd: KimiDeployment) -> dict[str, Any]:
    """Scrapes vLLM's own metrics on the leaders (`http`) and the decode-rate metrics of the
    kimi_kernels plugin on leaders and workers alike (`metrics`). Every series gets the label
    `deployment` (the KimiDeployment's name) that the rules and dashboards group by, and with
    spec.prefill `role` (prefill or decode), which the autoscalers' rules leave prefill out by."""
    interval = kd.spec.monitoring.interval
    relabel = [{"sourceLabels": [DEPLOYMENT_SOURCE_LABEL], "targetLabel": "deployment"}]
    if kd.spec.prefill is not None:
        relabel.append({"sourceLabels": [ROLE_SOURCE_LABEL], "targetLabel": "role"})
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": metadata(kd, kd.metadata.name, "monitoring"),
        "spec": {
            "selector": {"matchLabels": selector_labels(kd)},
            "podMetricsEndpoints": [
                {"port": port, "path": "/metrics", "interval": interval, "relabelings": relabel}
                for port in ("http", "metrics")
            ],
        },
    }


def pod_disruption_budget(kd: KimiDeployment, *, evacuating: bool = True) -> dict[str, Any]:
    """Evicting one pod restarts its whole group (2-4 pods of one LeaderWorkerSet replica), so
    while the operator evacuates groups from unfit nodes (`evacuating`: docs/maintenance.md) no
    pod of a serving group may be evicted: `maxUnavailable: 0` over every pod of the deployment
    makes a plain `kubectl drain` wait (retrying) until the operator has replaced the group and
    deleted it; its pods then terminate and the drain completes. A pod not Ready goes only while
    every other pod is healthy (`unhealthyPodEvictionPolicy: IfHealthyBudget`): a busy
    leader's readiness probe missing once (1 s) during kubectl's hour of retries does not let
    the drain take a serving group before its replacement serves (`AlwaysAllow` would). The
    operator moves a group that is not Ready itself (group_set.py). Without evacuation, as many
    pods as `rollout.maxUnavailable` allows groups down: evicted pods' groups hold the budget
    until they are back."""
    spec: dict[str, Any] = {"selector": {"matchLabels": selector_labels(kd)}}
    if evacuating:
        spec |= {"maxUnavailable": 0, "unhealthyPodEvictionPolicy": "IfHealthyBudget"}
    else:
        spec["maxUnavailable"] = kd.spec.rollout.max_unavailable
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(kd, kd.metadata.name, "disruption-budget"),
        "spec": spec,
    }
