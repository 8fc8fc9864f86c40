"""What the operator observes, per the Kubernetes API conventions: conditions, never a phase."""

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

ConditionType = Literal[
    "Ready", "Progressing", "Degraded", "SpecValid", "MNNVLReady", "WeightsReady", "RoutingReady"
]


class StatusModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True, extra="forbid"
    )


class Condition(StatusModel):
    type: ConditionType = Field(description="Which aspect of the deployment this describes.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: Annotated[str, Field(pattern=r"^([A-Z][A-Za-z0-9]*)?$", max_length=1024)] = Field(
        "", description="CamelCase reason for the last transition."
    )
    message: str = Field("", max_length=32768, description="Human-readable details.")
    last_transition_time: str | None = Field(
        None, max_length=64, description="When the status last changed (RFC 3339)."
    )
    observed_generation: Annotated[int, Field(ge=0)] | None = Field(
        None, description="The spec generation this condition was computed from."
    )


class WeightsStatus(StatusModel):
    """A Hugging Face source's revision resolved to a commit, once: every group serves it."""

    role: Literal["model", "draft"] = Field(description="spec.model or spec.speculative's draft.")
    repo: str = Field(max_length=256, description="The repository.")
    revision: str = Field(max_length=256, description="The revision the spec names.")
    commit: str = Field(max_length=64, description="The commit it named when resolved.")
    bytes: Annotated[int, Field(ge=0)] = Field(description="Size of the files to fetch.")
    claim_name: str = Field(max_length=253, description="The cache claim holding that commit.")


class GroupFailure(StatusModel):
    reason: str = Field(
        max_length=64,
        description="ImagePull, OOMKilled, NcclOrImex, PreflightFailed, Crashed or Recreated.",
    )
    message: str = Field("", max_length=1024, description="What the failing pod said.")
    at: str = Field("", max_length=64, description="When the operator saw it (RFC 3339).")


class OlderTemplateGroup(StatusModel):
    """A group on an earlier operator's template (docs/group-lifecycle.md)."""

    name: str = Field(max_length=253, description="The group's LeaderWorkerSet.")
    template: str = Field(
        max_length=64,
        description="A hash of the template this operator renders for it: an edit of the spec "
        "that leaves it the same leaves the group on its older template.",
    )


class GroupDisruption(GroupFailure):
    reason: str = Field(
        max_length=64,
        description="Created (a new LeaderWorkerSet), Updated (its spec changed), or the reason "
        "of a pod's DisruptionTarget condition (EvictionByEvictionAPI, PreemptionByScheduler, "
        "DeletionByTaintManager, DeletionByPodGC, TerminationByKubelet).",
    )


class GroupStatus(StatusModel):
    """One TP group's life (docs/group-lifecycle.md): its start-up time and its failures."""

    name: str = Field(max_length=253, description="The group's LeaderWorkerSet.")
    startup_seconds: float | None = Field(
        None, description="Its last start: leader pod scheduled to leader Ready, in seconds."
    )
    started_at: str = Field("", max_length=64, description="When its leader was scheduled.")
    restarts: Annotated[int, Field(ge=0)] = Field(0, description="Failures counted in all.")
    last_failure: GroupFailure | None = Field(None, description="The last failure seen.")
    last_disruption: GroupDisruption | None = Field(
        None,
        description="The last new leader that was no failure, and why (never counted).",
    )
    recent_failures: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list,
        max_length=100,
        description="When the failures within spec.serving.restartBudget.windowMinutes were seen.",
    )
    stopped: bool = Field(
        False, description="Stopped by the restart budget: not recreated until resumed."
    )
    resumed_by: str = Field(
        "", max_length=256, description="The kimi-operator.io/resume value it was stopped under."
    )
    leader_uid: str = Field("", max_length=64, description="The leader pod it was last seen with.")
    generation: Annotated[int, Field(ge=0)] = Field(
        0, description="The LeaderWorkerSet's generation then (a new one: a rollout, no failure)."
    )
    group_uid: str = Field(
        "", max_length=64, description="The LeaderWorkerSet's uid then (a new one: a new group)."
    )
    failed_since_leader: bool = Field(
        False, description="A failure was counted since that leader was seen."
    )
    disrupted_since_leader: str = Field(
        "",
        max_length=64,
        description="The DisruptionTarget reason of a pod seen since that leader was seen.",
    )
    failure_keys: list[Annotated[str, Field(max_length=256)]] = Field(
        default_factory=list,
        max_length=16,
        description="The failures already counted and the disrupted pods already seen.",
    )


class Recommendation(StatusModel):
    at: str = Field(
        max_length=64,
        description="When it was replaced (RFC 3339): it held until then; for the last, which "
        "still holds, when it was first made.",
    )
    replicas: Annotated[int, Field(ge=0, le=64)] = Field(description="Groups it asked for.")


class PrefillAutoscalerStatus(StatusModel):
    """The operator's prefill autoscaler (spec.prefill.autoscaling): what it decided, and what it
    remembers across evaluations and operator restarts (docs/scaling.md)."""

    desired_replicas: Annotated[int, Field(ge=0, le=64)] = Field(
        description="Prefill groups wanted now (the groups rendered)."
    )
    value: float | None = Field(
        None,
        description="The target's metric at the last answer: requests waiting in all, or the "
        "TTFT p90 in seconds.",
    )
    last_scale_time: str = Field(
        "", max_length=64, description="When the count last changed (RFC 3339)."
    )
    recommendations: list[Recommendation] = Field(
        default_factory=list,
        max_length=65,
        description="The highest recommendations that held within "
        "scaleDownStabilizationSeconds, each newer than any higher one, and the one that holds "
        "now (a group is removed only when all ask for fewer).",
    )
    message: str = Field("", max_length=1024, description="What the last evaluation found.")


class SloLoad(StatusModel):
    """The load read from Prometheus at the last answer (the chart's recording rules)."""

    request_rate: float = Field(description="Requests per second (finished, 5-minute rate).")
    prompt_tokens: float = Field(description="Mean prompt tokens per request.")
    output_tokens: float = Field(description="Mean output tokens per request.")
    prefix_hit_rate: float = Field(description="Share of prompt tokens from the prefix cache.")


class SloForecast(StatusModel):
    """The request rate forecast one group start-up time ahead (Holt's level and trend)."""

    at: str = Field(
        max_length=64,
        description="When the load it was made from was read: the last reading that moved the "
        "load, the forecast or the correction by more than 10% (a steady load writes no status).",
    )
    level: float = Field(description="Holt's level, requests per second.")
    trend: float = Field(description="Holt's trend, requests per second per second.")
    deviation: float = Field(
        0.0,
        description="The mean absolute error of its forecasts one reading ahead, requests per "
        "second: the forecast keeps a margin of it.",
    )
    rising_seconds: float = Field(
        0.0,
        description="How long the trend has been rising: it is carried no further ahead.",
    )
    horizon_seconds: Annotated[int, Field(ge=0)] = Field(
        description="How far ahead: the groups' measured start-up time."
    )
    request_rate: float = Field(description="The requests per second forecast then.")


class SloCorrection(StatusModel):
    """The model against what the groups measured: how much slower the groups run than their
    calibration says (the running correction of every prediction), and the last answer's error
    (measured / predicted - 1)."""

    slower: float = Field(description="The groups' speed factor: 1 as calibrated, 2 half as fast.")
    ttft_error: float | None = Field(None, description="The last TTFT error of the model.")
    decode_error: float | None = Field(None, description="The last decode-rate error.")


class SloFigures(StatusModel):
    """What the model predicts for the forecast on a count of groups (corrected), at the
    percentiles of the objectives."""

    replicas: Annotated[int, Field(ge=0, le=64)] = Field(description="The count of groups.")
    ttft_seconds: float = Field(description="The predicted time to first token.")
    decode_tokens_per_second: float | None = Field(
        None, description="The predicted decode rate per user (none: no request decodes)."
    )


class SloNeeded(SloFigures):
    fewer: SloFigures | None = Field(None, description="The same at one group fewer.")


class SloCalibration(StatusModel):
    """The calibration a role was last sized on: the one stored for the deployment
    (spec.autoscaling.slo.calibration), else the GB300 built-in for its shape."""

    name: str = Field(max_length=253, description="Its name (a calibration run's, or built-in).")
    origin: str = Field(max_length=512, description="Where its numbers come from.")
    config_map: str | None = Field(
        None, max_length=512, description="The ConfigMap and key it was read from, if stored."
    )


class SloRoleStatus(StatusModel):
    """One role's SLO scaler (spec.autoscaling.slo, spec.prefill.autoscaling.slo): what it
    decided and why, and what it remembers across evaluations and operator restarts
    (docs/scaling.md)."""

    desired_replicas: Annotated[int, Field(ge=0, le=64)] = Field(
        description="The role's groups wanted now (the groups rendered)."
    )
    message: str = Field("", max_length=1024, description="What the last evaluation found.")
    last_scale_time: str = Field(
        "", max_length=64, description="When the count last changed (RFC 3339)."
    )
    recommendations: list[Recommendation] = Field(
        default_factory=list,
        max_length=65,
        description="As status.prefillAutoscaler's: a group is removed only when all ask for "
        "fewer.",
    )
    load: SloLoad | None = Field(None, description="The load read at forecast.at.")
    forecast: SloForecast | None = Field(None, description="The load forecast.")
    correction: SloCorrection | None = Field(None, description="The model's recent error.")
    needed: SloNeeded | None = Field(
        None, description="The model's TTFT and decode rate at the count chosen and one fewer."
    )
    calibration: SloCalibration | None = Field(
        None, description="The calibration the role was last sized on."
    )


class SloAutoscalerStatus(StatusModel):
    decode: SloRoleStatus | None = Field(None, description="With spec.autoscaling.slo.")
    prefill: SloRoleStatus | None = Field(None, description="With spec.prefill.autoscaling.slo.")


class Evacuation(StatusModel):
    """A TP group leaving an unfit node, replaced first (docs/maintenance.md)."""

    name: str = Field(max_length=253, description="The group leaving.")
    node: str = Field(max_length=253, description="The node it leaves.")
    reason: Literal["Cordoned", "Tainted", "NodeCondition"] = Field(
        description="Why the node is unfit."
    )
    message: str = Field("", max_length=512, description="The node's taint or condition.")
    replacement: str = Field(max_length=253, description="The group that serves in its place.")
    since: str = Field("", max_length=64, description="When the evacuation began.")


class KimiDeploymentStatus(StatusModel):
    observed_generation: Annotated[int, Field(ge=0)] | None = Field(
        None, description="The most recent spec generation the operator has acted on."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=8,  # one per condition type
        description="Ready, Progressing, Degraded, SpecValid, MNNVLReady, WeightsReady.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    replicas: Annotated[int, Field(ge=0)] = Field(
        0,
        description="TP groups of spec.replicas that exist (the decode groups with spec.prefill).",
    )
    ready_replicas: Annotated[int, Field(ge=0)] = Field(
        0, description="TP groups of spec.replicas serving."
    )
    stopped_groups: Annotated[int, Field(ge=0)] = Field(
        0,
        description="TP groups (of both roles) the restart budget stopped: at 0 replicas, not "
        "Ready, until resumed (docs/group-lifecycle.md).",
    )
    prefill_replicas: Annotated[int, Field(ge=0)] = Field(
        0, description="Prefill TP groups that exist (spec.prefill)."
    )
    prefill_ready_replicas: Annotated[int, Field(ge=0)] = Field(
        0, description="Prefill TP groups serving."
    )
    updated_replicas: Annotated[int, Field(ge=0)] = Field(
        0,
        description="TP groups (of spec.replicas) that run the current pod template, or an "
        "earlier operator version's rendering of the same spec (olderTemplateGroups).",
    )
    older_template_groups: list[OlderTemplateGroup] = Field(
        default_factory=list,
        max_length=128,
        description="Groups that run the pod template an earlier operator version rendered "
        "from the same spec: left as they are, they take the current one when they restart, or "
        "group by group when the kimi-operator.io/roll-template annotation gets a new value.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    image: str = Field(
        "", max_length=512, description="The serving image the TP groups are rolled to."
    )
    image_source: Literal["", "Spec", "OperatorDefault", "Pinned"] = Field(
        "",
        description="Where `image` comes from: spec.image, the operator's default image, or "
        "an earlier default kept by spec.imagePolicy Pinned.",
    )
    pending_image: str = Field(
        "",
        max_length=512,
        description="The operator's default image when the deployment does not run it yet: "
        "pinned, or waiting for its turn (one deployment moves at a time).",
    )
    endpoint: str = Field(
        "",
        max_length=1024,
        description="In-cluster URL of the OpenAI-compatible API, once a group is ready.",
    )
    trace_url: str = Field(
        "",
        max_length=1024,
        description="The trace UI's page of a trace, `{trace_id}` where the id goes: "
        "spec.observability.tracing.uiUrl, or the operator's default's for a deployment that "
        "inherits its tracing; `kimi-operator bench --deployment` links the slowest turns with "
        "it. Empty: none.",
    )
    weights: list[WeightsStatus] = Field(
        default_factory=list,
        max_length=2,
        description="The commit each Hugging Face source resolved to, and its cache claim.",
    )
    selector: str = Field(
        "",
        max_length=1024,
        description="Label selector of the groups' leader pods (the scale subresource's).",
    )
    gpus: Annotated[int, Field(ge=0)] = Field(
        0, description="GPUs in total: gpus x (replicas + prefill replicas)."
    )
    groups: Annotated[list[GroupStatus], Field(max_length=128)] | None = Field(
        None,
        description="Each TP group's start-up time, failures and whether the restart budget "
        "stopped it.",
    )
    evacuations: Annotated[list[Evacuation], Field(max_length=128)] | None = Field(
        None,
        description="The TP groups evacuated from unfit nodes, each with its node, why and its "
        "replacement: while under way, and done while that node is not known fit (its name is "
        "not used again meanwhile); Progressing says how far each is.",
    )
    autoscaler: str = Field(
        "",
        max_length=512,
        description="Who sets the decode groups' count: the autoscaler that writes "
        "spec.replicas (`ScaledObject/<name>` or `HorizontalPodAutoscaler/<name>`), or "
        "`kimi-operator/slo` (spec.autoscaling.slo: the operator, sloAutoscaler says why); "
        "empty without spec.autoscaling.",
    )
    slo_autoscaler: SloAutoscalerStatus | None = Field(
        None,
        description="The SLO scaler of each role with an slo: its count, the forecast, the "
        "model's figures and recent error, and why.",
    )
    prefill_autoscaler: PrefillAutoscalerStatus | None = Field(
        None, description="The prefill groups' autoscaler, with spec.prefill.autoscaling."
    )


# Progressing reasons of a deployment in the middle of a rollout (what its status remembers).
ROLLING_REASONS = frozenset({"RollingOut", "RolloutStalled"})


def condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """The condition `kind` of a status, {} if it has none."""
    conditions = status.get("conditions") or []
    found: Mapping[str, Any] = next((c for c in conditions if c.get("type") == kind), {})
    return found


def progressing_reason(status: Mapping[str, Any]) -> str:
    """The reason of a status's Progressing condition ("" if it has none)."""
    return str(condition(status, "Progressing").get("reason", ""))
