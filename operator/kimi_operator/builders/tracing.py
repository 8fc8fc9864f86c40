"""`spec.observability.tracing`: OpenTelemetry in every component (docs/observability.md#traces).

vLLM 0.33.0 takes the collector as `--otlp-traces-endpoint` and its transport from
`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` (vllm/tracing/otel.py); llm-d-router v0.10.0's endpoint picker
and P/D sidecar trace with `--tracing` and read the `OTEL_*` variables of their `InitTracing`
(third_party/llm-d-router-v0.10.0-epp.yaml, `tracing`). Both SDKs read the sampler, the service
name and the resource attributes from the environment; every component samples parent-based, so a
caller's `traceparent` decides for the whole request.
"""

from typing import Any, Literal

from kimi_operator.api.spec import KimiDeployment, TracingSpec
from kimi_operator.builders.disaggregation import Serving
from kimi_operator.builders.placement import GROUP_LABEL

SAMPLER = "parentbased_traceidratio"
# What a span's service.name says served it, after the deployment's name.
Component = Literal["decode", "prefill", "epp", "sidecar"]


def effective(kd: KimiDeployment, default: TracingSpec | None) -> TracingSpec | None:
    """The tracing a deployment runs with: its own, else the operator's; None when off (no
    endpoint: an empty one in the spec turns the operator's default off)."""
    own = kd.spec.observability.tracing
    chosen = default if own is None else own
    return chosen if chosen is not None and chosen.endpoint else None


def service_name(kd: KimiDeployment, component: Component) -> str:
    return f"{kd.metadata.name}-{component}"


def serving_component(serving: Serving) -> Component:
    """The groups of spec.replicas are the decode groups, aggregated or not."""
    return "prefill" if serving == "prefill" else "decode"


def _from(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def _env(
    kd: KimiDeployment,
    tracing: TracingSpec,
    component: Component,
    attributes: dict[str, str],
    *extra: dict[str, Any],
) -> list[dict[str, Any]]:
    """The variables both SDKs read, `extra` first: the pod's and node's names come from the
    downward API into the resource attributes (Kubernetes expands `$(VAR)` of earlier variables)."""
    resource = {
        "k8s.namespace.name": kd.metadata.namespace,
        "k8s.pod.name": "$(KIMI_POD_NAME)",
        "k8s.node.name": "$(KIMI_NODE_NAME)",
        "kimi.deployment": kd.metadata.name,
        **attributes,
    }
    return [
        {"name": "KIMI_POD_NAME", **_from("metadata.name")},
        {"name": "KIMI_NODE_NAME", **_from("spec.nodeName")},
        *extra,
        {"name": "OTEL_SERVICE_NAME", "value": service_name(kd, component)},
        {"name": "OTEL_TRACES_SAMPLER", "value": SAMPLER},
        {"name": "OTEL_TRACES_SAMPLER_ARG", "value": str(tracing.sampling_ratio)},
        {
            "name": "OTEL_RESOURCE_ATTRIBUTES",
            "value": ",".join(f"{key}={value}" for key, value in resource.items()),
        },
    ]


def vllm_flags(tracing: TracingSpec | None) -> list[str]:
    """vLLM's exporter (its API server exports the `llm_request` span of every request)."""
    if tracing is None:
        return []
    flags = ["--otlp-traces-endpoint", tracing.endpoint]
    if tracing.detailed_traces:
        flags.append("--collect-detailed-traces=all")
    return flags


def _group() -> dict[str, Any]:
    """The TP group, from the label the LeaderWorkerSet's pod templates carry."""
    return {"name": "KIMI_TP_GROUP", **_from(f"metadata.labels['{GROUP_LABEL}']")}


def vllm_env(
    kd: KimiDeployment, tracing: TracingSpec | None, serving: Serving
) -> list[dict[str, Any]]:
    """A serving pod's, with vLLM's transport."""
    if tracing is None:
        return []
    attributes = {"kimi.group": "$(KIMI_TP_GROUP)", "kimi.role": serving}
    protocol = {"name": "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "value": tracing.protocol}
    return [*_env(kd, tracing, serving_component(serving), attributes, _group()), protocol]


def llm_d_flag(tracing: TracingSpec | None) -> str:
    """The endpoint picker's and the P/D sidecar's switch."""
    return f"--tracing={str(tracing is not None).lower()}"


def _llm_d_exporter(tracing: TracingSpec) -> list[dict[str, Any]]:
    """llm-d-router's InitTracing exports to stdout unless OTEL_TRACES_EXPORTER is `otlp`, and
    then over gRPC to OTEL_EXPORTER_OTLP_ENDPOINT (plain text for an http:// URL)."""
    return [
        {"name": "OTEL_TRACES_EXPORTER", "value": "otlp"},
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": tracing.endpoint},
    ]


def epp_env(kd: KimiDeployment, tracing: TracingSpec | None) -> list[dict[str, Any]]:
    if tracing is None:
        return []
    return [*_env(kd, tracing, "epp", {"kimi.role": "epp"}), *_llm_d_exporter(tracing)]


def traced_sidecar(
    sidecar: dict[str, Any], kd: KimiDeployment, tracing: TracingSpec | None
) -> dict[str, Any]:
    """The P/D sidecar (disaggregation.py) exporting its `llm_d.pd_proxy.*` spans; off by
    default, so without tracing it is left as it is."""
    if tracing is None:
        return sidecar
    attributes = {"kimi.group": "$(KIMI_TP_GROUP)", "kimi.role": "sidecar"}
    env = [*_env(kd, tracing, "sidecar", attributes, _group()), *_llm_d_exporter(tracing)]
    return sidecar | {"args": [*sidecar["args"], llm_d_flag(tracing)], "env": env}
