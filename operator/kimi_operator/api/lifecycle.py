"""The parts of spec.serving that shape a TP group's life (docs/group-lifecycle.md): where its
compile, JIT and autotune caches live (so that the next start skips that work), how vLLM reads
the weights, and how long a leaving group may take to finish the requests it is serving.

Kept apart from spec.py so that the API's other blocks evolve without touching these.
"""

from typing import Annotated, Final, Literal

from pydantic import Field

from kimi_operator.api.base import DNS_SUBDOMAIN, ApiModel, nested_default
from kimi_operator.api.pod_options import Quantity

DEFAULT_CACHE_HOST_PATH = "/var/cache/kimi-operator"
MAX_DRAIN_SECONDS = 3600
OPTIONAL_NAME = f"^({DNS_SUBDOMAIN[1:-1]})?$"  # a DNS subdomain, or empty
# Each cache's variable and its folder under the mount. vLLM 0.33.0 ignores VLLM_CACHE_ROOT,
# VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR and VLLM_ENABLE_STARTUP_PLAN in its hash (envs.py,
# compile_factors' ignored_factors), so where the caches live never changes what it compiles.
CACHE_DIRS: Final = (
    ("VLLM_CACHE_ROOT", "vllm"),  # torch.compile artifacts, the start-up plan
    ("TORCHINDUCTOR_CACHE_DIR", "inductor"),  # default: the system temp folder
    ("TRITON_CACHE_DIR", "triton"),
    ("DG_JIT_CACHE_DIR", "deep_gemm"),
    ("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "flashinfer_autotune"),
    # The CuTe DSL's `<DSL name>_CACHE_DIR` (nvidia_cutlass_dsl, base_dsl/env_manager.py).
    ("CUTE_DSL_CACHE_DIR", "cute_dsl"),
)
# vLLM persists its memory profiling under VLLM_CACHE_ROOT/startup_plan and skips it next time.
STARTUP_PLAN_ENV = "VLLM_ENABLE_STARTUP_PLAN"


class CompileCacheSpec(ApiModel):
    """One volume for vLLM's compile cache and the TorchInductor, Triton, DeepGEMM, FlashInfer
    autotune and CuTe DSL caches, shared by every pod of the namespace that runs the same image
    and weights (a folder each such pair)."""

    volume: Literal["Shared", "HostPath", "Disabled"] = Field(
        "Shared",
        description="Shared: a ReadWriteMany claim every pod mounts (claimName, or one the "
        "operator creates in the namespace); HostPath: a folder on each node (no claim, shared "
        "by the pods of one node only); Disabled: the pod's own disk, lost with the pod.",
    )
    claim_name: Annotated[str, Field(max_length=253, pattern=f"^({DNS_SUBDOMAIN[1:-1]})?$")] = (
        Field(
            "",
            description="With Shared: a ReadWriteMany claim of yours to keep the caches on; empty: "
            "the operator creates `kimi-compile-cache` in the namespace, for its deployments.",
        )
    )
    storage_class_name: str = Field(
        "",
        max_length=253,
        description="StorageClass of the claim the operator creates (it must offer "
        "ReadWriteMany); empty: the cluster's default.",
    )
    size: Quantity = Field("200Gi", description="Size of the claim the operator creates.")
    host_path: Annotated[str, Field(min_length=2, max_length=1024, pattern=r"^/[^\x00]*$")] = Field(
        DEFAULT_CACHE_HOST_PATH,
        description="With HostPath: the folder on each node (created if missing).",
    )


class RestartBudgetSpec(ApiModel):
    """When the operator stops recreating a failing group (docs/group-lifecycle.md)."""

    failures: Annotated[int, Field(ge=1, le=100)] = Field(
        3,
        description="Failures of one group (recreated, a container crashed, OOM, NCCL/IMEX, an "
        "image that cannot be pulled) within windowMinutes that stop it: Degraded "
        "GroupStopped, until the kimi-operator.io/resume annotation is set to a new value.",
    )
    window_minutes: Annotated[int, Field(ge=1, le=1440)] = Field(
        60, description="The window the failures are counted in."
    )
    start_grace_minutes: Annotated[int, Field(ge=0, le=480)] = Field(
        30,
        description="While a pod of a starting group still pulls its image or initializes, for "
        "this long after the leader is scheduled, workers giving up on it are not counted.",
    )


class LifecycleFields(ApiModel):
    """The spec.serving fields of a group's life, mixed into ServingSpec."""

    compile_cache: CompileCacheSpec = Field(
        default_factory=CompileCacheSpec,
        json_schema_extra=nested_default(),
        description="Where the compile, JIT and autotune caches live, so that a group's next "
        "start skips that work (docs/group-lifecycle.md).",
    )
    # vLLM 0.33.0's load formats that read a safetensors checkpoint such as Kimi K3's
    # (vllm/model_executor/model_loader/__init__.py, LoadFormats); the others read other files
    # or none (dummy), or need a server of their own (modelexpress).
    load_format: Literal["auto", "safetensors", "fastsafetensors"] = Field(
        "auto",
        description="How vLLM reads the checkpoint (--load-format): auto and safetensors read "
        "it with safetensors, fastsafetensors with GPU direct reads (the image needs the "
        "fastsafetensors package).",
    )
    # vLLM 0.33.0's SafetensorsLoadStrategy (vllm/config/load.py) but `torchao`, which reloads
    # quantized weights in place rather than reading a checkpoint.
    safetensors_load_strategy: Literal["lazy", "eager", "prefetch"] | None = Field(
        None,
        description="With loadFormat auto or safetensors (--safetensors-load-strategy): "
        "prefetch reads the files into the page cache first (network storage), eager reads each "
        "file whole, lazy maps them; omitted: vLLM's choice.",
    )
    restart_budget: RestartBudgetSpec = Field(
        default_factory=RestartBudgetSpec,
        json_schema_extra=nested_default(),
        description="How many failures of a group are retried before it is stopped.",
    )
    drain_seconds: Annotated[int, Field(ge=0, le=MAX_DRAIN_SECONDS)] = Field(
        120,
        description="How long a leaving group's leader may finish the requests it is serving "
        "before it stops (vLLM --shutdown-timeout; the pods' termination grace adds a margin); "
        "0: in-flight requests are aborted.",
    )
