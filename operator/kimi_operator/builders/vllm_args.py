"""The `vllm serve` command line of leader and worker pods."""

import json

from kimi_operator.api.host_memory import offloading_size_gib
from kimi_operator.api.spec import KimiDeploymentSpec, ServingSpec, TracingSpec
from kimi_operator.api.vllm_parse import destinations
from kimi_operator.builders.disaggregation import (
    DECODE_VLLM_PORT,
    Serving,
    kv_transfer_flags,
    role_engine_args,
)
from kimi_operator.builders.lifecycle import drain_flags, load_flags
from kimi_operator.builders.tracing import vllm_flags

HTTP_PORT = 8000
# The leaders' ZMQ publisher of KV cache events (vLLM's default endpoint; llm-d-router's default
# socketPort), which the endpoint picker subscribes to with precise prefix scoring.
KV_EVENTS_PORT = 5557
DISABLE_CUSTOM_ALL_REDUCE = "--disable-custom-all-reduce"
MODEL_DIR = "/models/weights"
DRAFT_DIR = "/models/draft"
KIMI_K3_PARSER = "kimi_k3"  # vLLM 0.33.0's tool and reasoning parsers for K3's XTML output
# Settings of the public GB200/GB300 recipes that the operator adopts as defaults without owning
# them (docs/serving.md): (vLLM destination, flags). Left out when spec.engineArgs sets the same
# option, which then decides (vLLM would take the later one and warn about the duplicate).
RECIPE_DEFAULTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # K3's tokenizer is the checkpoint's own code (tokenization_kimi.py, named by auto_map in its
    # tokenizer_config.json): without this vLLM exits at start with "Failed to load the tokenizer".
    ("trust_remote_code", ("--trust-remote-code",)),
    # Prefill chunks of at most 8,192 tokens (vLLM's default on a GB300 is 16,384): a long agent
    # prompt holds the decoders of the group for half as long per step.
    ("max_num_batched_tokens", ("--max-num-batched-tokens", "8192")),
)


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def engine_flags(spec: KimiDeploymentSpec, serving: Serving = "aggregated") -> list[str]:
    """Flags common to leader and workers: everything but node rank and role. Both roles of
    spec.prefill share all of them but the KV connector's role."""
    kv = spec.kv_cache
    flags = [
        MODEL_DIR,  # a claim (the spec's or the weights cache), mounted read-only
        "--served-model-name", spec.model.name,
        "--tensor-parallel-size", str(spec.gpus),
        "--additional-config", _json({"decode_backend": spec.decode.backend}),
        "--compilation-config", _json({"cudagraph_mode": spec.decode.cuda_graph_mode}),
        "--decode-context-parallel-size", str(spec.decode.context_parallel_size),
        "--max-num-seqs", str(spec.decode.max_num_seqs),
        "--kv-cache-dtype", kv.dtype,
        "--gpu-memory-utilization", f"{kv.gpu_memory_utilization_percent / 100:.2f}",
        "--enable-prefix-caching" if kv.enable_prefix_caching else "--disable-prefix-caching",
    ]  # fmt: skip
    if kv.max_model_len is not None:
        flags += ["--max-model-len", str(kv.max_model_len)]
    if kv.mamba_cache_dtype != "auto":
        flags += ["--mamba-cache-dtype", kv.mamba_cache_dtype]
    if kv.mamba_ssm_cache_dtype != "auto":
        flags += ["--mamba-ssm-cache-dtype", kv.mamba_ssm_cache_dtype]
    flags += serving_flags(spec.serving) + recipe_defaults(role_engine_args(spec, serving))
    flags += cpu_offload_flags(spec) + kv_events_flags(spec)
    flags += load_flags(spec.serving) + drain_flags(spec.serving)
    if spec.speculative is not None:
        draft = {
            "method": spec.speculative.method,
            "model": DRAFT_DIR,
            "num_speculative_tokens": spec.speculative.num_speculative_tokens,
        }
        flags += ["--speculative-config", _json(draft)]
    return flags + kv_transfer_flags(serving)


def cpu_offload_flags(spec: KimiDeploymentSpec) -> list[str]:
    """The CPU KV tier: its size for the whole TP group, on vLLM's native offloading connector
    (api/host_memory.py)."""
    offload = spec.kv_cache.cpu_offload
    if offload is None:
        return []
    size = offloading_size_gib(offload.per_gpu, spec.gpus)
    return ["--kv-offloading-size", str(size), "--kv-offloading-backend", "native"]


def kv_events_topic(spec: KimiDeploymentSpec) -> str:
    """`kv@<pod>@<model>`: llm-d-router's vLLM adapter reads the model from the third part
    (pkg/kvevents/engineadapter/common.go: split on `@`) and knows the pod by the address it
    dialed, whatever the second part says."""
    return f"kv@leader@{spec.model.name}"


def kv_events_flags(spec: KimiDeploymentSpec) -> list[str]:
    """With precise prefix scoring, vLLM publishes every block stored or evicted, in GPU memory
    and in the CPU tier, on a ZMQ socket the endpoint picker subscribes to."""
    if spec.routing.prefix_scoring != "Precise":
        return []
    events = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{KV_EVENTS_PORT}",
        "topic": kv_events_topic(spec),
    }
    return ["--kv-events-config", _json(events)]


def serving_flags(serving: ServingSpec) -> list[str]:
    """What an agent endpoint needs: tool calls and reasoning apart from the answer, text only."""
    flags = []
    if serving.tool_calling:
        flags += ["--enable-auto-tool-choice", "--tool-call-parser", KIMI_K3_PARSER]
    if serving.reasoning:
        flags += ["--reasoning-parser", KIMI_K3_PARSER]
    if not serving.multimodal:
        flags.append("--language-model-only")
    return flags


def recipe_defaults(engine_args: list[str]) -> list[str]:
    """RECIPE_DEFAULTS' flags but those whose option engineArgs sets, however spelled."""
    chosen = destinations(engine_args)
    return [flag for dest, flags in RECIPE_DEFAULTS if dest not in chosen for flag in flags]


def literal(args: list[str]) -> list[str]:
    """User text as Kubernetes passes it on unchanged: `$` doubled, so that `$(HF_TOKEN)` in
    engineArgs reaches vLLM as written instead of being expanded from the container's env (the
    value checks judged the literal text; docs/security.md)."""
    return [arg.replace("$", "$$") for arg in args]


def _workarounds(spec: KimiDeploymentSpec, no_custom_all_reduce: bool) -> list[str]:
    """Known-bad combinations: cross-node custom all-reduce on MNNVL."""
    if no_custom_all_reduce and DISABLE_CUSTOM_ALL_REDUCE not in spec.engine_args:
        return [DISABLE_CUSTOM_ALL_REDUCE]
    return []


def http_port(serving: Serving) -> int:
    """vLLM's port on the leader: behind the routing sidecar on decode groups."""
    return DECODE_VLLM_PORT if serving == "decode" else HTTP_PORT


def leader_args(
    spec: KimiDeploymentSpec,
    no_custom_all_reduce: bool = False,
    serving: Serving = "aggregated",
    tracing: TracingSpec | None = None,
) -> list[str]:
    """`tracing`: the one the deployment runs with (builders/tracing.py, `effective`)."""
    args = [
        *engine_flags(spec, serving),
        *_workarounds(spec, no_custom_all_reduce),
        *vllm_flags(tracing),
        "--port",
        str(http_port(serving)),
    ]
    if spec.routing.prefix_scoring == "Precise":
        # The render endpoints (/v1/chat/completions/render) the picker's token producer calls;
        # vLLM answers them with 403 without it (entrypoints/scale_out/factories.py).
        args.append("--enable-scale-out")
    if spec.nodes_per_group > 1:
        args += [
            "--nnodes", str(spec.nodes_per_group),
            "--node-rank", "0",
            "--master-addr", "$(LWS_LEADER_ADDRESS)",
        ]  # fmt: skip
    return [*args, *literal(role_engine_args(spec, serving))]


def worker_args(
    spec: KimiDeploymentSpec,
    no_custom_all_reduce: bool = False,
    serving: Serving = "aggregated",
    tracing: TracingSpec | None = None,
) -> list[str]:
    return [
        *engine_flags(spec, serving),
        *_workarounds(spec, no_custom_all_reduce),
        *vllm_flags(tracing),
        "--nnodes", str(spec.nodes_per_group),
        "--node-rank", "$(LWS_WORKER_INDEX)",
        "--master-addr", "$(LWS_LEADER_ADDRESS)",
        "--headless",
        *literal(role_engine_args(spec, serving)),
    ]  # fmt: skip
