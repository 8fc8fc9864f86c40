"""The KimiDeployment API as pydantic models: the single source of the CRD schema.

Field-level rules (types, enums, ranges, patterns) live on the fields; cross-field rules live in
`rules.py` and run in `KimiDeploymentSpec`'s validator. `crd.py` turns both into the CRD.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from kimi_operator.api import constants as c
from kimi_operator.api.base import CONFIG_MAP_KEY, DNS_SUBDOMAIN, ApiModel, nested_default
from kimi_operator.api.lifecycle import LifecycleFields
from kimi_operator.api.pod_options import (
    QUANTITY,
    Affinity,
    LocalObjectReference,
    PodMetadata,
    Quantity,
    ResourcesSpec,
)

ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
DURATION = r"^[0-9]+(ms|s|m|h)$"


def _exact_int(value: Any) -> Any:
    """Integer choices take integers only: pydantic's Literal would accept 16.0 and True."""
    if type(value) is not int:
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


GpuCount = Annotated[Literal[8, 16], BeforeValidator(_exact_int)]
GpusPerNode = Annotated[Literal[4, 8], BeforeValidator(_exact_int)]


class PvcSource(ApiModel):
    claim_name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)] = Field(
        description="Name of a PersistentVolumeClaim in the deployment's namespace holding the "
        "weights; mounted read-only."
    )
    sub_path: str = Field(
        "", max_length=1024, description="Folder inside the volume that holds the weights."
    )


class SecretKeyRef(ApiModel):
    name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)] = Field(
        description="Secret name."
    )
    key: Annotated[str, Field(min_length=1, max_length=253)] = Field(
        description="Key in the Secret."
    )


class WeightsCacheSpec(ApiModel):
    """The claim a Hugging Face source is downloaded into once, shared by every pod (and by other
    deployments of the same repository and commit in the namespace): docs/weights.md."""

    storage_class_name: str = Field(
        "", max_length=253, description="StorageClass of the claim; empty: the cluster's default."
    )
    size: Quantity | None = Field(
        None,
        description="Size of the claim, e.g. `2Ti`; omitted: the files' total from the hub's "
        "listing plus 5% and 1Gi headroom.",
    )
    access_mode: Literal["ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod", "ReadOnlyMany"] = (
        Field(
            "ReadWriteMany",
            description="Access mode of the claim: ReadWriteMany only (a group's pods and the "
            "download Job sit on several nodes, and the Job writes).",
        )
    )
    files: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default=[],
        max_length=c.MAX_CACHE_FILE_PATTERNS,
        description="File patterns to fetch (fnmatch, e.g. `*.safetensors`); empty: what vLLM "
        "loads (`*.safetensors`, `*.json`, `*.py`, `*.jinja`, tokenizer files), not `original/`.",
    )
    retain: bool = Field(
        False,
        description="Keep the claim when the last deployment using it is deleted (it is then "
        "deleted by hand).",
    )


class HuggingFaceSource(ApiModel):
    repo: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[\w.-]+/[\w.-]+$")] = Field(
        description="Hugging Face repository, `owner/name`."
    )
    revision: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        "main", description="Branch, tag or commit to download."
    )
    token_secret_ref: SecretKeyRef | None = Field(
        None,
        description="Secret key holding an access token; only the download Jobs get it (as a "
        "secretKeyRef), never the serving pods.",
    )
    cache: WeightsCacheSpec = Field(
        default_factory=WeightsCacheSpec,
        json_schema_extra=nested_default(),
        description="The claim the weights are downloaded into once.",
    )


class WeightSource(ApiModel):
    """Where weights come from: exactly one of `pvc` and `huggingface` (a rule in rules.py)."""

    pvc: PvcSource | None = Field(None, description="Weights on a PersistentVolumeClaim.")
    huggingface: HuggingFaceSource | None = Field(
        None,
        description="Weights downloaded once from Hugging Face into a shared cache claim that the "
        "pods mount read-only.",
    )


class ModelSpec(ApiModel):
    name: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description="Served model name: the `model` clients send to the OpenAI-compatible API."
    )
    source: WeightSource = Field(description="Where the weights come from.")


class SpeculativeSpec(ApiModel):
    method: Literal["dspark"] = Field(
        "dspark",
        description="Speculative method; the latency-specialized decode supports dspark only.",
    )
    draft_source: WeightSource = Field(
        description="Where the DSpark draft model's weights come from."
    )
    num_speculative_tokens: Annotated[int, Field(ge=1, le=c.MAX_SPECULATIVE_TOKENS)] = Field(
        7, description="Draft tokens per step (1 to 7)."
    )


class DecodeSpec(ApiModel):
    backend: Literal["latency_specialized", "auto"] = Field(
        "latency_specialized",
        description="Decode backend: the CuTe DSL latency-specialized path, or `auto` (stock vLLM, "
        "for A/B comparisons).",
    )
    context_parallel_size: Annotated[int, Field(ge=1, le=16)] = Field(
        1, description="Decode context parallelism: 1 (off) or equal to `gpus`."
    )
    cuda_graph_mode: Literal["FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"] = Field(
        "FULL_AND_PIECEWISE",
        description="CUDA graph mode; the fast path needs full decode graphs.",
    )
    max_num_seqs: Annotated[int, Field(ge=1, le=1024)] = Field(
        8, description="Most requests decoded together (vLLM --max-num-seqs)."
    )


class CpuOffloadSpec(ApiModel):
    """A CPU tier of the KV cache in the trays' host memory (Grace LPDDR5X): vLLM's native
    offloading connector keeps prefixes evicted from GPU memory there (docs/kv-cache.md)."""

    per_gpu: Annotated[str, Field(min_length=3, max_length=6, pattern=c.PER_GPU_OFFLOAD)] = Field(
        alias="perGPU",
        description="Host memory for each GPU's share of the tier, a whole number of GiB (e.g. "
        "`128Gi`): vLLM --kv-offloading-size is this times spec.gpus, and each pod's memory "
        "request and limit grow by this times spec.gpusPerNode (docs/kv-cache.md).",
    )


class KvCacheSpec(ApiModel):
    dtype: Literal["auto", "bfloat16", "fp8", "fp8_e4m3"] = Field(
        "fp8_e4m3",
        description="MLA KV cache dtype; latency_specialized reads FP8 e4m3 rows only.",
    )
    mamba_cache_dtype: Literal["auto", "bfloat16"] = Field(
        "auto", description="KDA convolution state dtype (the fast path needs BF16)."
    )
    mamba_ssm_cache_dtype: Literal["auto", "float32"] = Field(
        "auto", description="KDA recurrent state dtype (the fast path needs FP32)."
    )
    max_model_len: Annotated[int, Field(ge=1, le=16_777_216)] | None = Field(
        None, description="Longest context in tokens; omitted: the model's own limit."
    )
    gpu_memory_utilization_percent: Annotated[int, Field(ge=1, le=100)] = Field(
        90, description="Percent of each GPU's memory vLLM may use (integer)."
    )
    enable_prefix_caching: bool = Field(True, description="Reuse KV cache across shared prefixes.")
    cpu_offload: CpuOffloadSpec | None = Field(
        None,
        description="A CPU tier of the KV cache in host memory, where idle sessions' prefixes "
        "wait for their next turn instead of being recomputed; omitted: none.",
    )


class SecretOrConfigMapKeyRef(ApiModel):
    name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)] = Field(
        description="Object name."
    )
    key: Annotated[str, Field(min_length=1, max_length=253)] = Field(
        description="Key in the object."
    )
    optional: bool = Field(False, description="Whether the key may be missing.")


class FieldRef(ApiModel):
    field_path: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description="Pod field to read, e.g. `metadata.name`."
    )
    api_version: str = Field("v1", max_length=64, description="API version of the field path.")


class EnvVarSource(ApiModel):
    secret_key_ref: SecretOrConfigMapKeyRef | None = Field(None, description="A Secret's key.")
    config_map_key_ref: SecretOrConfigMapKeyRef | None = Field(
        None, description="A ConfigMap's key."
    )
    field_ref: FieldRef | None = Field(None, description="A field of the pod.")


class EnvVar(ApiModel):
    name: Annotated[str, Field(min_length=1, max_length=256, pattern=ENV_NAME)] = Field(
        description="Environment variable name."
    )
    value: str | None = Field(None, max_length=32768, description="Literal value.")
    value_from: EnvVarSource | None = Field(None, description="Where the value comes from.")


class Toleration(ApiModel):
    key: str = Field("", max_length=317, description="Taint key; empty with Exists matches all.")
    operator: Literal["Exists", "Equal"] = Field("Equal", description="Exists or Equal.")
    value: str = Field("", max_length=63, description="Taint value for Equal.")
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        "", description="Taint effect to tolerate; empty matches all."
    )
    toleration_seconds: Annotated[int, Field(ge=0)] | None = Field(
        None, description="How long a NoExecute taint is tolerated."
    )


class SchedulingSpec(ApiModel):
    node_selector: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default={},
        max_length=c.MAX_NODE_SELECTOR,
        description="Extra node labels the pods require.",
    )
    tolerations: list[Toleration] = Field(
        default=[], max_length=c.MAX_TOLERATIONS, description="Tolerations for the pods."
    )
    priority_class_name: str = Field("", max_length=253, description="PriorityClass of the pods.")
    exclusive_clique: bool = Field(
        False,
        description="Give each TP group an NVLink clique (NVL72 rack) of its own; false: groups "
        "share cliques, each group inside one.",
    )
    affinity: Affinity = Field(
        default_factory=Affinity,
        json_schema_extra=nested_default(),
        description="Extra affinity, added to the operator's (each group inside one clique).",
    )


class ServiceSpec(ApiModel):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        "ClusterIP", description="Service type of the OpenAI-compatible endpoint."
    )
    port: Annotated[int, Field(ge=1, le=65535)] = Field(8000, description="Service port.")


class MonitoringSpec(ApiModel):
    pod_monitor: bool = Field(True, description="Create a PodMonitor for Prometheus Operator.")
    interval: Annotated[str, Field(pattern=DURATION, max_length=16)] = Field(
        "15s", description="Scrape interval, e.g. `15s`."
    )


# An OTLP collector's URL, or nothing: http(s), a host name or IPv4 address, a port, a path.
OTLP_URL_OR_EMPTY = (
    r"^(https?://[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[-A-Za-z0-9._~%/]*)?)?$"
)


class TracingSpec(ApiModel):
    """OpenTelemetry traces of every request through the endpoint picker, the P/D sidecar and
    vLLM, sent to an OTLP collector (docs/observability.md#traces)."""

    endpoint: Annotated[str, Field(max_length=512, pattern=OTLP_URL_OR_EMPTY)] = Field(
        "",
        description="The OTLP collector's URL, e.g. `http://otel-collector.observability:4317` "
        "(gRPC, plain text: vLLM 0.33.0 exports gRPC without TLS) or "
        "`https://tempo.example/v1/traces` (protocol http/protobuf: the whole URL); empty: no "
        "traces (which also turns the operator's default off).",
    )
    protocol: Literal["grpc", "http/protobuf"] = Field(
        "grpc",
        description="OTLP transport of vLLM's exporter; the endpoint picker and the P/D sidecar "
        "(llm-d-router v0.10.0) export over gRPC only, so http/protobuf is for routing.mode "
        "Service.",
    )
    sampling_ratio: Annotated[float, Field(ge=0, le=1)] = Field(
        0.1,
        description="Share of requests traced (0 to 1) where the caller sent no sampling "
        "decision; parent-based: a request whose `traceparent` says sampled (or not) keeps "
        "that decision in every component.",
    )
    detailed_traces: bool = Field(
        False,
        description="vLLM's detailed model and worker traces (--collect-detailed-traces=all); "
        "needs an endpoint. Costly where vLLM reads it (docs/observability.md#traces).",
    )
    ui_url: str = Field(
        "",
        max_length=1024,
        description="The trace UI's page of a trace, `{trace_id}` where the id goes, e.g. "
        "`https://jaeger.example/trace/{trace_id}` or a Grafana Explore link; needs an "
        "endpoint. Reported as status.traceUrl, where `kimi-operator bench --deployment` finds "
        "it to link the slowest turns; empty: none.",
    )


class ObservabilitySpec(ApiModel):
    tracing: TracingSpec | None = Field(
        None,
        description="OpenTelemetry tracing of every component; omitted: the operator's default "
        "(chart value tracing), which is off unless configured.",
    )


class AutoscalingTarget(ApiModel):
    """What the autoscaler keeps in bounds: exactly one of these (a rule in rules.py)."""

    decode_rate_floor: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        None,
        description="Add groups while the decode rate 90% of users get at least (tokens/s, "
        "prefill excluded: the 10th percentile) is below this floor.",
    )
    waiting_requests_per_group: Annotated[int, Field(ge=1, le=100_000)] | None = Field(
        None, description="Requests waiting in vLLM's queue per serving group."
    )
    kv_cache_usage_percent: Annotated[int, Field(ge=1, le=100)] | None = Field(
        None, description="Mean KV-cache usage of the serving groups, in percent."
    )


SloPercentile = Annotated[Literal[50, 90, 99], BeforeValidator(_exact_int)]


class CalibrationRef(ApiModel):
    """Where a deployment's own calibration is stored: a key of a ConfigMap in its namespace
    holding the document `kimi-operator export-calibration` writes (docs/scaling.md)."""

    config_map_name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)] = (
        Field(description="The ConfigMap, in the KimiDeployment's namespace.")
    )
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=CONFIG_MAP_KEY)] = Field(
        c.CALIBRATION_KEY, description="Its key holding the document."
    )
    # Checked by a rule (scaling_rules.py), which says what a schedule looks like.
    schedule: Annotated[str, Field(min_length=1, max_length=100)] | None = Field(
        None,
        description='Keep it current: a cron schedule (5 fields, in UTC, e.g. "0 4 * * 0": '
        "Sundays 04:00) on which the operator's CronJob runs `kimi-operator bench --profile "
        "calibration` against one of the role's groups and writes the fit into this key. The "
        "sweep loads the serving groups: schedule it at a quiet hour. Omitted: no CronJob.",
    )


class SloSpec(ApiModel):
    """Service-level objectives in the user's terms, instead of a threshold: the operator sizes
    the role's TP groups to meet them ahead of the load, from the planner's model of the
    deployment (docs/scaling.md). At least one objective (a rule in rules.py). No task
    completion: vLLM's series do not say which requests form an agent task, so the operator
    could neither measure nor correct it (`kimi-operator plan` predicts it, offline)."""

    ttft_seconds: Annotated[float, Field(ge=0.05, le=600)] | None = Field(
        None,
        description="Time to first token, queueing included, that ttftPercentile percent of "
        "requests get at most.",
    )
    ttft_percentile: SloPercentile = Field(
        90, description="The percentile of requests ttftSeconds holds for: 50, 90 or 99."
    )
    decode_tokens_per_second_per_user: Annotated[float, Field(ge=1, le=10_000)] | None = Field(
        None,
        description="Decode rate (tokens/s of one request, prefill excluded) that "
        "decodePercentile percent of requests get at least (the decode groups only).",
    )
    decode_percentile: SloPercentile = Field(
        90,
        description="The percentile of requests decodeTokensPerSecondPerUser holds for: 50, 90 "
        "or 99 (90: the 10th-percentile request decodes at least this fast).",
    )
    calibration: CalibrationRef | None = Field(
        None,
        description="The deployment's own calibration to size on, measured by `kimi-operator "
        "bench --profile calibration` against it; omitted: the GB300 built-in for its shape.",
    )


class ScalingBounds(ApiModel):
    """How far and how fast an autoscaler moves a role's TP groups: spec.autoscaling's (the decode
    groups') and spec.prefill.autoscaling's alike (docs/scaling.md); and, instead of a target,
    the objectives the operator sizes them for (`slo`)."""

    min_replicas: Annotated[int, Field(ge=0, le=64)] = Field(
        1,
        description="Fewest TP groups (at least 1: a group's cold start takes tens of minutes, "
        "so there is no scale to zero).",
    )
    max_replicas: Annotated[int, Field(ge=1, le=64)] = Field(description="Most TP groups.")
    scale_down_stabilization_seconds: Annotated[int, Field(ge=0, le=3600)] = Field(
        c.SCALE_DOWN_STABILIZATION_S,
        description="How long the metric must ask for fewer groups before one is removed.",
    )
    scale_up_period_seconds: Annotated[int, Field(ge=1, le=1800)] = Field(
        c.SCALE_UP_PERIOD_S,
        description="One group is added at most once per this many seconds.",
    )
    slo: SloSpec | None = Field(
        None,
        description="Objectives to meet instead of a target: the operator is then the one "
        "writer of the role's count, from the load forecast over the groups' start-up time "
        "and the planner's model (no HPA or ScaledObject).",
    )


class AutoscalingSpec(ScalingBounds):
    target: AutoscalingTarget | None = Field(
        None, description="The metric to scale on: exactly one target; or slo instead."
    )


class PrefillAutoscalingTarget(ApiModel):
    """What the prefill groups' autoscaler keeps in bounds: exactly one of these (a rule in
    rules.py); the operator reads them from Prometheus (docs/scaling.md)."""

    waiting_requests_per_group: Annotated[int, Field(ge=1, le=100_000)] | None = Field(
        None, description="Requests waiting in the prefill groups' vLLM queues per prefill group."
    )
    ttft_seconds_p90: Annotated[float, Field(ge=0.01, le=600)] | None = Field(
        None,
        description="Time to first token, 90th percentile, of the prefill groups' requests "
        "(their prefill, queueing included): what prefill capacity buys.",
    )


class PrefillAutoscalingSpec(ScalingBounds):
    """The operator scales the prefill groups itself (the scale subresource is the decode
    groups'): spec.prefill.replicas is the count it starts from."""

    target: PrefillAutoscalingTarget | None = Field(
        None, description="The metric to scale on: exactly one target; or slo instead."
    )


class RolloutSpec(ApiModel):
    """How a change of the pod template reaches the TP groups: group by group (docs/rollout.md)."""

    max_unavailable: Annotated[int, Field(ge=0, le=64)] = Field(
        1,
        description="TP groups that may be down at once for an update; below spec.replicas "
        "when spec.replicas is 2 or more.",
    )
    max_surge: Annotated[int, Field(ge=0, le=1)] = Field(
        0,
        description="Extra TP groups (0 or 1) run with the new template while the others are "
        "updated: 1 needs a spare NVLink clique and keeps every group serving.",
    )
    progress_deadline_seconds: Annotated[int, Field(ge=1, le=86400)] = Field(
        3600,
        description="Seconds an updated group may take to become Ready; past it the rollout "
        "stops (Degraded, RolloutStalled) and the groups not yet updated keep serving.",
    )


class ServingSpec(LifecycleFields):
    """What an agent endpoint needs of vLLM, and how long a cold start may take
    (docs/serving.md)."""

    tool_calling: bool = Field(
        True,
        description="Structured tool calls for requests with `tools` (vLLM "
        "--enable-auto-tool-choice --tool-call-parser kimi_k3); false: tool-call markup stays "
        "in the answer's text.",
    )
    reasoning: bool = Field(
        True,
        description="Thinking text returned apart from the answer (vLLM --reasoning-parser "
        "kimi_k3); false: mixed into the answer.",
    )
    multimodal: bool = Field(
        False,
        description="Load the vision tower and accept images; false: text only (vLLM "
        "--language-model-only), its GPU memory left to the KV cache.",
    )
    startup_timeout_minutes: Annotated[
        int, Field(ge=c.MIN_STARTUP_MINUTES, le=c.MAX_STARTUP_MINUTES)
    ] = Field(
        c.DEFAULT_STARTUP_MINUTES,
        description="How long a group's cold start (weight loading, compiles, CUDA graph "
        "capture) may take before the leader is restarted: the startup probe's window, and "
        "vLLM's engine-ready timeout a few minutes less.",
    )


class ScorerWeights(ApiModel):
    """The weights of the endpoint picker's scorers in its default scheduling profile."""

    queue: Annotated[int, Field(ge=0, le=100)] = Field(
        2, description="Weight of queue-scorer (fewest requests waiting); 0 leaves it out."
    )
    kv_cache_utilization: Annotated[int, Field(ge=0, le=100)] = Field(
        2,
        description="Weight of kv-cache-utilization-scorer (most KV cache free); 0 leaves it out.",
    )
    prefix_cache: Annotated[int, Field(ge=0, le=100)] = Field(
        3,
        description="Weight of prefix-cache-scorer (the group most likely to hold the request's "
        "prefix); 0 leaves it out.",
    )


class EndpointPickerSpec(ApiModel):
    image: str = Field(
        "",
        max_length=512,
        description="Endpoint picker image; empty: the operator's configured default (llm-d-router "
        "v0.10.0's).",
    )
    weights: ScorerWeights = Field(
        default_factory=ScorerWeights,
        json_schema_extra=nested_default(),
        description="Scorer weights of the default scheduling profile.",
    )


class GatewayRef(ApiModel):
    name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)] = Field(
        description="Name of the Gateway (gateway.networking.k8s.io) that routes to the pool."
    )
    namespace: Annotated[
        str, Field(max_length=63, pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$")
    ] = Field("", description="Namespace of the Gateway; empty: the deployment's.")
    section_name: Annotated[
        str, Field(max_length=253, pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$")
    ] = Field("", description="Listener of the Gateway to attach to; empty: all of them.")


class RoutingSpec(ApiModel):
    """How requests reach the TP groups (docs/routing.md)."""

    mode: Literal["Service", "InferencePool"] = Field(
        "Service",
        description="Service: one Service in front of the leaders (kube-proxy picks a group per "
        "connection). InferencePool: also an InferencePool and llm-d's endpoint picker, which a "
        "Gateway asks for the group holding a request's prefix; the Service stays.",
    )
    gateway_ref: GatewayRef | None = Field(
        None,
        description="With mode InferencePool: the Gateway an HTTPRoute attaches the pool to; "
        "omitted: no HTTPRoute (route to the pool yourself).",
    )
    endpoint_picker: EndpointPickerSpec = Field(
        default_factory=EndpointPickerSpec,
        json_schema_extra=nested_default(),
        description="The endpoint picker, with mode InferencePool.",
    )
    prefix_scoring: Literal["Estimated", "Precise"] = Field(
        "Estimated",
        description="With mode InferencePool, how the picker knows which group holds a "
        "request's prefix: Estimated (from its own routing history) or Precise (the leaders "
        "publish vLLM's KV cache events, GPU and CPU tier, and the picker indexes them).",
    )


class PrefillSpec(ApiModel):
    """Prefill groups that hand the KV cache over to the decode groups (docs/disaggregation.md):
    the spec's other settings (gpus, decode, kvCache, speculative, engineArgs, env) are both
    roles'; these are the prefill role's own."""

    replicas: Annotated[int, Field(ge=1, le=64)] = Field(
        1,
        description="Prefill TP groups (each its own LeaderWorkerSet); with autoscaling, the "
        "count it starts from.",
    )
    decider: Literal["Always", "UncachedTokens"] = Field(
        "Always",
        description="When the endpoint picker sends a request's prefill to a prefill group: "
        "Always, or UncachedTokens (only when more than uncachedTokens of its prompt are not in "
        "the decode group's prefix cache; shorter suffixes prefill on the decode group).",
    )
    uncached_tokens: Annotated[int, Field(ge=1, le=1_048_576)] | None = Field(
        None,
        description="With decider UncachedTokens: the prompt tokens outside the decode group's "
        "cache above which the prefill goes to a prefill group.",
    )
    engine_args: list[Annotated[str, Field(max_length=c.MAX_ENGINE_ARG_LENGTH)]] = Field(
        default=[],
        max_length=c.MAX_ENGINE_ARGS,
        description="vLLM flags for the prefill groups only, after spec.engineArgs; none that "
        "the KV hand-over needs equal on both roles.",
    )
    env: list[EnvVar] = Field(
        default=[],
        max_length=c.MAX_ENV,
        description="Environment variables for the prefill pods only, after spec.env (a name "
        "listed in both takes this value).",
    )
    autoscaling: PrefillAutoscalingSpec | None = Field(
        None,
        description="Scale the prefill groups on their own load, read from Prometheus by the "
        "operator; omitted: spec.prefill.replicas as written.",
    )


class KimiDeploymentSpec(ApiModel):
    model: ModelSpec = Field(description="The model served and where its weights come from.")
    speculative: SpeculativeSpec | None = Field(
        None, description="DSpark speculative decoding; omitted: none."
    )
    gpus: GpuCount = Field(description="GPUs per TP group = tensor-parallel size (8 or 16).")
    gpus_per_node: GpusPerNode = Field(
        4, description="GPUs per node: 4 on GB300 NVL72 compute trays."
    )
    replicas: Annotated[int, Field(ge=0, le=64)] = Field(
        1,
        description="Independent TP groups (each its own LeaderWorkerSet); the scale "
        "subresource's replicas, written by the autoscaler when spec.autoscaling is set.",
    )
    autoscaling: AutoscalingSpec | None = Field(
        None,
        description="Scale spec.replicas on a serving metric (KEDA ScaledObject, or an HPA on an "
        "external metric); omitted: spec.replicas as written.",
    )
    decode: DecodeSpec = Field(
        default_factory=DecodeSpec,
        json_schema_extra=nested_default(),
        description="Decode path settings.",
    )
    kv_cache: KvCacheSpec = Field(
        default_factory=KvCacheSpec,
        json_schema_extra=nested_default(),
        description="KV cache and memory settings.",
    )
    serving: ServingSpec = Field(
        default_factory=ServingSpec,
        json_schema_extra=nested_default(),
        description="Agent endpoint settings (tool calls, reasoning, text only) and the "
        "start-up budget.",
    )
    engine_args: list[Annotated[str, Field(max_length=c.MAX_ENGINE_ARG_LENGTH)]] = Field(
        default=[],
        max_length=c.MAX_ENGINE_ARGS,
        description="Extra vLLM flags; flags the spec owns or the fast path forbids are refused.",
    )
    env: list[EnvVar] = Field(
        default=[],
        max_length=c.MAX_ENV,
        description="Extra environment variables for every pod.",
    )
    image: str = Field(
        "", max_length=512, description="Serving image; empty: the operator's configured default."
    )
    image_policy: Literal["FollowDefault", "Pinned"] = Field(
        "FollowDefault",
        description="With image empty: FollowDefault moves to a new operator default image "
        "(one deployment at a time, group by group); Pinned stays on the image it runs.",
    )
    image_pull_secrets: list[LocalObjectReference] = Field(
        default=[], max_length=c.MAX_PULL_SECRETS, description="Secrets to pull the image with."
    )
    resources: ResourcesSpec = Field(
        default_factory=ResourcesSpec,
        json_schema_extra=nested_default(),
        description="CPU, memory and local disk per pod (defaults sized for a GB300 tray).",
    )
    shared_memory: Annotated[str, Field(min_length=1, max_length=32, pattern=QUANTITY)] = Field(
        "64Gi", description="Size of the memory-backed /dev/shm; counts against resources.memory."
    )
    pod_metadata: PodMetadata = Field(
        default_factory=PodMetadata,
        json_schema_extra=nested_default(),
        description="Extra labels and annotations for every pod.",
    )
    compute_domain: Literal["Auto", "Required", "Disabled"] = Field(
        "Auto",
        description="NVIDIA ComputeDomain for multi-node NVLink: Auto (use it when installed), "
        "Required, Disabled.",
    )
    scheduling: SchedulingSpec = Field(
        default_factory=SchedulingSpec,
        json_schema_extra=nested_default(),
        description="Node selection for the pods.",
    )
    service: ServiceSpec = Field(
        default_factory=ServiceSpec,
        json_schema_extra=nested_default(),
        description="The Service in front of the leaders.",
    )
    monitoring: MonitoringSpec = Field(
        default_factory=MonitoringSpec,
        json_schema_extra=nested_default(),
        description="Prometheus scraping.",
    )
    observability: ObservabilitySpec = Field(
        default_factory=ObservabilitySpec,
        json_schema_extra=nested_default(),
        description="OpenTelemetry traces (Prometheus scraping is spec.monitoring).",
    )
    rollout: RolloutSpec = Field(
        default_factory=RolloutSpec,
        json_schema_extra=nested_default(),
        description="How pod template changes roll through the TP groups.",
    )
    routing: RoutingSpec = Field(
        default_factory=RoutingSpec,
        json_schema_extra=nested_default(),
        description="How requests reach the TP groups: a Service, or also an InferencePool.",
    )
    prefill: PrefillSpec | None = Field(
        None,
        description="Disaggregated prefill: prefill groups whose KV cache NIXL hands to the "
        "groups of spec.replicas, which then only decode (needs routing.mode InferencePool); "
        "omitted: every group prefills and decodes.",
    )

    @model_validator(mode="after")
    def _cross_field_rules(self) -> "KimiDeploymentSpec":
        from kimi_operator.api.rules import failed_rules  # noqa: PLC0415 (rules import this module)

        violations = failed_rules(self.model_dump(exclude_none=True))
        if violations:
            raise PydanticCustomError(
                "kimi_rules", "cross-field rules failed", {"violations": violations}
            )
        return self

    @property
    def nodes_per_group(self) -> int:
        return self.gpus // self.gpus_per_node

    @property
    def slo_scaled(self) -> dict[Literal["decode", "prefill"], ScalingBounds]:
        """The roles whose count the operator's SLO scaler sets, with their autoscaling (one
        with an slo): decode (spec.autoscaling), prefill (spec.prefill.autoscaling)."""
        prefill = self.prefill.autoscaling if self.prefill is not None else None
        roles: dict[Literal["decode", "prefill"], ScalingBounds | None] = {
            "decode": self.autoscaling,
            "prefill": prefill,
        }
        return {r: s for r, s in roles.items() if s is not None and s.slo is not None}


class ObjectMeta(BaseModel):
    """The part of metadata the API server lets CRD validation see (name), plus namespace."""

    model_config = ConfigDict(extra="allow", strict=True)

    name: Annotated[
        str, Field(min_length=1, max_length=c.MAX_NAME_LENGTH, pattern=c.NAME_PATTERN)
    ] = Field(description="Deployment name (a DNS-1035 label of at most 40 characters).")
    namespace: str = "default"


class KimiDeployment(ApiModel):
    api_version: Literal["kimi-operator.io/v1alpha1"]
    kind: Literal["KimiDeployment"]
    metadata: ObjectMeta
    spec: KimiDeploymentSpec
    status: dict[str, Any] | None = None
