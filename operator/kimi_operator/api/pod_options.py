"""What the serving pods get besides the model: resources, /dev/shm, pull secrets, metadata and
extra affinity. Shapes follow the Kubernetes Pod API (camelCase, same names), bounded so that the
CEL rules in rules.py stay within the API server's cost budget.

Resource defaults are sized for one GB300 NVL72 compute tray, the node a pod fills with its four
GPUs: 2 Grace CPUs (144 Arm cores) and about 960 GB of LPDDR5X. The requests leave the rest to the
kubelet's reservations and the node's daemons (GPU operator, DRA driver and IMEX, monitoring, logs):
- cpu 64: the API server, one engine process per GPU and weight-loading threads, with room to
  spare; no limit unless `guaranteed` (CFS throttling of vLLM's busy loops costs latency);
- memory 512Gi, request and limit: weight loading through the page cache, pinned buffers, and the
  memory-backed /dev/shm (it counts against this limit); a limit equal to the request keeps the
  pod out of the kubelet's first eviction picks under memory pressure;
- ephemeral storage 100Gi, request only: compile caches and logs; a Hugging Face download lives
  there too (raise it to the checkpoint's size), and a limit would evict a pod mid-download.
"""

from typing import Annotated, Literal

from pydantic import Field

from kimi_operator.api.base import DNS_SUBDOMAIN, ApiModel, nested_default

# A Kubernetes quantity without sign or exponent: `64`, `500m`, `512Gi`, `1.5T`.
QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$"
Quantity = Annotated[str, Field(min_length=1, max_length=32, pattern=QUANTITY)]
MAX_TERMS = 8
MAX_EXPRESSIONS = 16
MAX_VALUES = 32
MAX_POD_METADATA = 32
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]
Key = Annotated[str, Field(min_length=1, max_length=317)]


class ResourcesSpec(ApiModel):
    cpu: Quantity = Field("64", description="CPUs requested per pod (no limit unless guaranteed).")
    memory: Quantity = Field(
        "512Gi", description="Memory per pod, request and limit; /dev/shm counts against it."
    )
    ephemeral_storage: Quantity = Field(
        "100Gi",
        alias="ephemeralStorage",
        description="Local disk per pod, request only: caches, logs, Hugging Face downloads.",
    )
    guaranteed: bool = Field(
        False,
        description="Also limit CPU to the request: Guaranteed QoS (the kubelet's static CPU "
        "manager then gives the pod whole cores).",
    )


class LocalObjectReference(ApiModel):
    name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)] = Field(
        description="Secret name."
    )


class PodMetadata(ApiModel):
    labels: dict[str, LabelValue] = Field(
        default={}, max_length=MAX_POD_METADATA, description="Extra labels on every pod."
    )
    annotations: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default={}, max_length=MAX_POD_METADATA, description="Extra annotations on every pod."
    )


class LabelSelectorRequirement(ApiModel):
    key: Key = Field(description="Label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(description="Operator.")
    values: list[LabelValue] = Field(
        default=[], max_length=MAX_VALUES, description="Values: some for In/NotIn, none else."
    )


class LabelSelector(ApiModel):
    match_labels: dict[str, LabelValue] = Field(
        default={}, max_length=MAX_EXPRESSIONS, description="Labels the pods must have."
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default=[], max_length=MAX_EXPRESSIONS, description="Requirements the pods must meet."
    )


class PodAffinityTerm(ApiModel):
    label_selector: LabelSelector = Field(description="The pods this term is about.")
    topology_key: Key = Field(description="Node label whose value is the topology domain.")
    namespaces: list[Annotated[str, Field(max_length=63)]] = Field(
        default=[], max_length=MAX_TERMS, description="Their namespaces; empty: the pod's own."
    )


class WeightedPodAffinityTerm(ApiModel):
    weight: Annotated[int, Field(ge=1, le=100)] = Field(description="Weight (1 to 100).")
    pod_affinity_term: PodAffinityTerm = Field(description="The term.")


class PodAffinity(ApiModel):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = Field(
        default=[], max_length=MAX_TERMS, description="Hard terms."
    )
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = Field(
        default=[], max_length=MAX_TERMS, description="Soft terms."
    )


class NodeSelectorRequirement(ApiModel):
    key: Key = Field(description="Node label or field.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(
        description="Operator."
    )
    values: list[LabelValue] = Field(
        default=[],
        max_length=MAX_VALUES,
        description="Values: some for In/NotIn, one integer for Gt/Lt, none else.",
    )


class NodeSelectorTerm(ApiModel):
    match_expressions: list[NodeSelectorRequirement] = Field(
        default=[], max_length=MAX_EXPRESSIONS, description="Node label requirements."
    )
    match_fields: list[NodeSelectorRequirement] = Field(
        default=[], max_length=MAX_EXPRESSIONS, description="Node field requirements."
    )


class NodeSelector(ApiModel):
    node_selector_terms: list[NodeSelectorTerm] = Field(
        min_length=1, max_length=MAX_TERMS, description="Terms, any of which must match."
    )


class PreferredSchedulingTerm(ApiModel):
    weight: Annotated[int, Field(ge=1, le=100)] = Field(description="Weight (1 to 100).")
    preference: NodeSelectorTerm = Field(description="The term.")


class NodeAffinity(ApiModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        None, description="Hard terms."
    )
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = Field(
        default=[], max_length=MAX_TERMS, description="Soft terms."
    )


class Affinity(ApiModel):
    """Added to the operator's own terms (each TP group within one NVLink clique)."""

    node_affinity: NodeAffinity = Field(
        default_factory=NodeAffinity,
        json_schema_extra=nested_default(),
        description="Which nodes the pods may or prefer to run on.",
    )
    pod_affinity: PodAffinity = Field(
        default_factory=PodAffinity,
        json_schema_extra=nested_default(),
        description="Pods these pods should run near.",
    )
    pod_anti_affinity: PodAffinity = Field(
        default_factory=PodAffinity,
        json_schema_extra=nested_default(),
        description="Pods these pods should run away from.",
    )
