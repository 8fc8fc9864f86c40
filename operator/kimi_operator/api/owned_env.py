"""Environment variables the operator sets on the serving containers: the one list that the
builders render and the spec.env rules check.

A user may list one of them only with a value that means what the operator sets, as its reader
reads it (the container then gets it once); any other value, or a valueFrom, is refused.
"""

from dataclasses import dataclass
from typing import Final

from kimi_operator.api.constants import METRICS_PORT
from kimi_operator.api.lifecycle import CACHE_DIRS, STARTUP_PLAN_ENV

# What vLLM reads as on with bool(int(value)): any nonzero decimal integer.
NONZERO_INT = r"^[+-]?0*[1-9][0-9]*$"


@dataclass(frozen=True)
class OwnedEnv:
    name: str
    value: str  # what the operator renders; "" when it comes from the spec or a secretKeyRef
    why: str  # how and why the operator sets it
    # User values that mean the same, as a regex for Python's re and CEL's matches (RE2);
    # "" when no user value is accepted.
    same: str
    same_words: str  # the same, in words for messages ("" when none)


OWNED_ENV: Final = (
    OwnedEnv(
        "VLLM_USE_V2_MODEL_RUNNER",
        "1",
        "the fast path runs on the V2 model runner",
        # vLLM 0.33.0 reads it as bool(int(value)) (vllm/envs.py:360-363 and 2149-2151): any
        # nonzero decimal integer means on; "true" makes it raise ValueError at start-up.
        NONZERO_INT,
        "1 (or another nonzero integer)",
    ),
    OwnedEnv(
        "NCCL_MNNVL_ENABLE",
        "1",  # 0 where no ComputeDomain gives the pods an IMEX channel (builders/pod.py)
        "1 (NCCL over multi-node NVLink) where a ComputeDomain gives the pods an IMEX channel, "
        "else 0",
        "",
        "",
    ),
    OwnedEnv(
        "NCCL_CUMEM_ENABLE",
        "1",
        "NCCL allocates with cuMem, which multi-node NVLink needs",
        r"^1$",
        "1",
    ),
    OwnedEnv(
        "KIMI_METRICS_PORT",
        str(METRICS_PORT),
        "the decode-path metrics port that the PodMonitor scrapes",
        f"^{METRICS_PORT}$",
        str(METRICS_PORT),
    ),
    OwnedEnv(
        "VLLM_ENGINE_READY_TIMEOUT_S",
        "",  # from spec.serving.startupTimeoutMinutes (builders/pod.py)
        "vLLM's wait for its engines at start, set from spec.serving.startupTimeoutMinutes (5 "
        "minutes inside the startup probe's window)",
        "",
        "",
    ),
    OwnedEnv(
        "HF_TOKEN",
        "",
        "the Hugging Face token goes to the weights download Jobs only (tokenSecretRef of a "
        "huggingface source), never to serving pods",
        "",
        "",
    ),
    *(
        OwnedEnv(
            name,
            "",  # under the compile-cache volume's mount (builders/lifecycle.py)
            "the compile, JIT and autotune caches live on spec.serving.compileCache's volume",
            "",
            "",
        )
        for name, _ in CACHE_DIRS
    ),
    OwnedEnv(
        STARTUP_PLAN_ENV,
        "1",
        "vLLM keeps its memory profiling with the compile cache and skips it at the next start",
        NONZERO_INT,  # read as bool(int(value)) (vllm/envs.py)
        "1 (or another nonzero integer)",
    ),
)
# The part of the list the preflight init container also gets.
FAST_PATH_ENV: Final = ("VLLM_USE_V2_MODEL_RUNNER", "NCCL_MNNVL_ENABLE", "NCCL_CUMEM_ENABLE")


def owned(name: str) -> OwnedEnv:
    return next(e for e in OWNED_ENV if e.name == name)


# What the KV hand-over of spec.prefill needs on both roles (builders/pod.py renders them there).
NIXL_SIDE_CHANNEL_PORT: Final = 5600
DISAGGREGATION_ENV: Final = (
    OwnedEnv(
        "VLLM_SSM_CONV_STATE_LAYOUT",
        "DS",
        "NixlConnector moves Kimi K3's KDA convolution state only in the DS layout and refuses "
        "to start without it (vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py)",
        # vLLM 0.33.0 reads it case-sensitively from the choices SD, DS (vllm/envs.py).
        r"^DS$",
        "DS",
    ),
    OwnedEnv(
        "VLLM_NIXL_SIDE_CHANNEL_HOST",
        "",  # the pod's IP, from status.podIP (builders/pod.py)
        "NIXL's handshake listens on the pod's IP (status.podIP), where the other role reaches it",
        "",
        "",
    ),
    OwnedEnv(
        "VLLM_NIXL_SIDE_CHANNEL_PORT",
        str(NIXL_SIDE_CHANNEL_PORT),
        "the NIXL handshake port, declared on the pods",
        f"^{NIXL_SIDE_CHANNEL_PORT}$",
        str(NIXL_SIDE_CHANNEL_PORT),
    ),
)

# What tracing renders on the serving pods where it is on (builders/tracing.py): the OpenTelemetry
# SDK's variables and the downward-API values its resource attributes are made of.
TRACING_ENV: Final = tuple(
    OwnedEnv(
        name,
        "",
        "the operator sets it from spec.observability.tracing, or the operator's default, "
        "where tracing is on (docs/observability.md#traces)",
        "",
        "",
    )
    for name in (
        "OTEL_SERVICE_NAME",
        "OTEL_TRACES_SAMPLER",
        "OTEL_TRACES_SAMPLER_ARG",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_RESOURCE_ATTRIBUTES",
        "KIMI_POD_NAME",
        "KIMI_NODE_NAME",
        "KIMI_TP_GROUP",
    )
)
