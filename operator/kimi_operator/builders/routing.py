"""`spec.routing.mode: InferencePool`: an InferencePool over the leaders of every TP group, llm-d's
endpoint picker (EPP) that a Gateway asks which group takes each request, and an HTTPRoute from
`spec.routing.gatewayRef` to the pool (docs/routing.md).

What the EPP is given follows llm-d-router v0.10.0's own chart (config/charts/routerlib) and is
checked against that release's flags and config schema (third_party/llm-d-router-v0.10.0-epp.yaml).
"""

from typing import Any

import yaml

from kimi_operator.api.spec import GatewayRef, KimiDeployment, TracingSpec
from kimi_operator.builders.disaggregation import picker_plugins, scheduling_profiles
from kimi_operator.builders.meta import (
    LWS_WORKER_INDEX_LABEL,
    ROUTABLE,
    labels,
    metadata,
    selector_labels,
)
from kimi_operator.builders.serving import service_url
from kimi_operator.builders.tracing import epp_env, llm_d_flag
from kimi_operator.builders.vllm_args import HTTP_PORT, KV_EVENTS_PORT

DEFAULT_EPP_IMAGE = "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"
POOL_GROUP = "inference.networking.k8s.io"
GATEWAY_GROUP = "gateway.networking.k8s.io"
EXT_PROC_PORT = 9002  # gRPC ext-proc, which the gateway calls
HEALTH_PORT = 9003  # gRPC health: services liveness and readiness
EPP_METRICS_PORT = 9090
CONFIG_FILE = "epp-config.yaml"
CONFIG_DIR = "/config"
COMPONENT = "endpoint-picker"
PRECISE_PRODUCER = "precise-prefix-cache-producer"
# Tokens per block the picker hashes: vLLM's default block size, which the block sizes vLLM picks
# for its attention backends and aligns for hybrid models are multiples of (docs/kv-cache.md).
PICKER_BLOCK_TOKENS = 16
# The EPP's pods are not the deployment's serving pods: a name of their own keeps them out of the
# selectors of the Service, the PodMonitor, the disruption budget and the pool.
EPP_APP_NAME = "llm-d-endpoint-picker"
READ = ["get", "list", "watch"]
# What the EPP watches (pkg/epp/controller): pods, its pool, and the InferenceObjectives and
# InferenceModelRewrites of the pool where those CRDs are installed (both groups it knows).
EPP_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": READ},
    {"apiGroups": [POOL_GROUP], "resources": ["inferencepools"], "verbs": READ},
    {
        "apiGroups": ["inference.networking.x-k8s.io", "llm-d.ai"],
        "resources": ["inferenceobjectives", "inferencemodelrewrites"],
        "verbs": READ,
    },
]


def pool_name(kd: KimiDeployment) -> str:
    return kd.metadata.name


def epp_name(kd: KimiDeployment) -> str:
    return f"{kd.metadata.name}-epp"


def epp_image(kd: KimiDeployment, default: str) -> str:
    return kd.spec.routing.endpoint_picker.image or default


def routing_children(
    kd: KimiDeployment, epp_default_image: str, tracing: TracingSpec | None
) -> list[dict[str, Any]]:
    """The pool, the EPP's objects and the route; none in mode Service. `tracing`: the one the
    deployment runs with (builders/tracing.py)."""
    if kd.spec.routing.mode != "InferencePool":
        return []
    children = [
        inference_pool(kd),
        epp_service_account(kd),
        epp_role(kd),
        epp_role_binding(kd),
        epp_config_map(kd),
        epp_deployment(kd, epp_image(kd, epp_default_image), tracing),
        epp_service(kd),
    ]
    if kd.spec.routing.gateway_ref is not None:
        children.append(http_route(kd, kd.spec.routing.gateway_ref))
    return children


def leader_labels(kd: KimiDeployment) -> dict[str, str]:
    """Every group's leader (workers serve no HTTP); a group added by a scale-up matches too, a
    group leaving does not once its leader is unlabelled (drain.py)."""
    return selector_labels(kd) | {LWS_WORKER_INDEX_LABEL: "0"} | ROUTABLE


def inference_pool(kd: KimiDeployment) -> dict[str, Any]:
    return {
        "apiVersion": f"{POOL_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": metadata(kd, pool_name(kd), "routing"),
        "spec": {
            "selector": {"matchLabels": leader_labels(kd)},
            "targetPorts": [{"number": HTTP_PORT}],
            "endpointPickerRef": {
                "group": "",
                "kind": "Service",
                "name": epp_name(kd),
                "port": {"number": EXT_PROC_PORT},
                # The EPP down: the gateway still sends requests, to any leader.
                "failureMode": "FailOpen",
            },
        },
    }


def epp_config(kd: KimiDeployment) -> dict[str, Any]:
    """The EndpointPickerConfig: llm-d-router's default profile with the spec's weights (with
    spec.prefill, a decode and a prefill profile of them), scraping vLLM's /metrics on the pool's
    target port (through the routing sidecar on decode leaders); with precise prefix scoring, the
    prefix scorer reads the precise producer's index of the leaders' KV events instead of its own
    estimate."""
    weights = kd.spec.routing.endpoint_picker.weights
    scorers = {
        "queue-scorer": weights.queue,
        "kv-cache-utilization-scorer": weights.kv_cache_utilization,
        "prefix-cache-scorer": weights.prefix_cache,
    }
    used = {name: weight for name, weight in scorers.items() if weight}
    precise = kd.spec.routing.prefix_scoring == "Precise"
    plugins: list[dict[str, Any]] = precise_plugins(kd) if precise else []
    for name in used:
        plugin: dict[str, Any] = {"type": name}
        if precise and name == "prefix-cache-scorer":
            plugin["parameters"] = {"prefixMatchInfoProducerName": PRECISE_PRODUCER}
        plugins.append(plugin)
    plugins += [
        {"type": "metrics-data-source", "parameters": {"scheme": "http", "path": "/metrics"}},
        {"type": "core-metrics-extractor"},
    ]
    config: dict[str, Any] = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [*plugins, *picker_plugins(kd)],
        "schedulingProfiles": scheduling_profiles(
            kd, [{"pluginRef": name, "weight": weight} for name, weight in used.items()]
        ),
    }
    if precise:
        # As llm-d-router's sample (deploy/config/epp-precise-prefix-cache-config.yaml): the
        # producer learns of each leader from the endpoint notifications and subscribes to it.
        config["dataLayer"] = {
            "sources": [
                {
                    "pluginRef": "metrics-data-source",
                    "extractors": [{"pluginRef": "core-metrics-extractor"}],
                },
                {
                    "pluginRef": "endpoint-notification-source",
                    "extractors": [{"pluginRef": PRECISE_PRODUCER}],
                },
            ]
        }
    return config


def precise_plugins(kd: KimiDeployment) -> list[dict[str, Any]]:
    """The token producer (the real tokens, from vLLM's render endpoint behind the Service) and
    the precise producer: it subscribes to each leader's KV events (GPU and CPU tier) and hashes
    their tokens into blocks of its own size, which must divide vLLM's (docs/kv-cache.md)."""
    return [
        {
            "type": "token-producer",
            "parameters": {"modelName": kd.spec.model.name, "vllm": {"url": service_url(kd)}},
        },
        {"type": "endpoint-notification-source"},
        {
            "type": PRECISE_PRODUCER,
            "parameters": {
                "tokenProcessorConfig": {"blockSizeTokens": PICKER_BLOCK_TOKENS},
                "kvEventsConfig": {
                    "topicFilter": "kv@",
                    "discoverPods": True,
                    "podDiscoveryConfig": {"socketPort": KV_EVENTS_PORT},
                },
            },
        },
    ]


def epp_config_map(kd: KimiDeployment) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(kd, epp_name(kd), COMPONENT),
        "data": {CONFIG_FILE: yaml.safe_dump(epp_config(kd), sort_keys=False)},
    }


def epp_args(kd: KimiDeployment, tracing: TracingSpec | None) -> list[str]:
    return [
        "--pool-name",
        pool_name(kd),
        "--pool-namespace",
        kd.metadata.namespace,
        "--pool-group",
        POOL_GROUP,
        "--config-file",
        f"{CONFIG_DIR}/{CONFIG_FILE}",
        "--grpc-port",
        str(EXT_PROC_PORT),
        "--grpc-health-port",
        str(HEALTH_PORT),
        "--metrics-port",
        str(EPP_METRICS_PORT),
        # On by default in the picker: off unless the deployment traces. The metrics endpoint's
        # authentication would need cluster-scoped TokenReview rights that a namespaced Role
        # cannot grant.
        llm_d_flag(tracing),
        "--metrics-endpoint-auth=false",
    ]


def epp_pod_labels(kd: KimiDeployment) -> dict[str, str]:
    return labels(kd, COMPONENT) | {"app.kubernetes.io/name": EPP_APP_NAME}


def _grpc_probe(service: str, period_s: int) -> dict[str, Any]:
    return {"grpc": {"port": HEALTH_PORT, "service": service}, "periodSeconds": period_s}


def epp_deployment(kd: KimiDeployment, image: str, tracing: TracingSpec | None) -> dict[str, Any]:
    pod_labels = epp_pod_labels(kd)
    container = {
        "name": "epp",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": epp_args(kd, tracing),
        "ports": [
            {"name": "grpc", "containerPort": EXT_PROC_PORT, "protocol": "TCP"},
            {"name": "grpc-health", "containerPort": HEALTH_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": EPP_METRICS_PORT, "protocol": "TCP"},
        ],
        "env": [
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            *epp_env(kd, tracing),
        ],
        # llm-d-router's defaults: the prefix index lives in memory; CPU left to burst.
        "resources": {
            "requests": {"cpu": "8", "memory": "8Gi"},
            "limits": {"memory": "16Gi"},
        },
        "livenessProbe": _grpc_probe("liveness", 10) | {"initialDelaySeconds": 5},
        "readinessProbe": _grpc_probe("readiness", 2),
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(kd, epp_name(kd), COMPONENT),
        "spec": {
            # One replica holds the prefix index; Recreate hands over at once on an update.
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "serviceAccountName": epp_name(kd),
                    "terminationGracePeriodSeconds": 130,
                    "containers": [container],
                    "volumes": [{"name": "config", "configMap": {"name": epp_name(kd)}}],
                },
            },
        },
    }


def epp_service(kd: KimiDeployment) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(kd, epp_name(kd), COMPONENT),
        "spec": {
            "type": "ClusterIP",
            "selector": epp_pod_labels(kd),
            "ports": [
                {
                    "name": "grpc-ext-proc",
                    "port": EXT_PROC_PORT,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "kubernetes.io/h2c",
                },
                {
                    "name": "grpc-health",
                    "port": HEALTH_PORT,
                    "targetPort": "grpc-health",
                    "protocol": "TCP",
                },
                {
                    "name": "http-metrics",
                    "port": EPP_METRICS_PORT,
                    "targetPort": "metrics",
                    "protocol": "TCP",
                },
            ],
        },
    }


def epp_service_account(kd: KimiDeployment) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(kd, epp_name(kd), COMPONENT),
    }


def epp_role(kd: KimiDeployment) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(kd, epp_name(kd), COMPONENT),
        "rules": EPP_RULES,
    }


def epp_role_binding(kd: KimiDeployment) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(kd, epp_name(kd), COMPONENT),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": epp_name(kd),
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": epp_name(kd), "namespace": kd.metadata.namespace}
        ],
    }


def http_route(kd: KimiDeployment, ref: GatewayRef) -> dict[str, Any]:
    parent: dict[str, Any] = {
        "group": GATEWAY_GROUP,
        "kind": "Gateway",
        "name": ref.name,
        "namespace": ref.namespace or kd.metadata.namespace,
    }
    if ref.section_name:
        parent["sectionName"] = ref.section_name
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": metadata(kd, kd.metadata.name, "routing"),
        "spec": {
            "parentRefs": [parent],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": [
                        {"group": POOL_GROUP, "kind": "InferencePool", "name": pool_name(kd)}
                    ],
                    # Long generations: no gateway default cuts a request short.
                    "timeouts": {"request": "0s"},
                }
            ],
        },
    }
