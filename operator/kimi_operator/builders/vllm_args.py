"""The `vllm serve` command line of leader and worker pods."""

import json

from kimi_operator.api.spec import KimiDeploymentSpec

HTTP_PORT = 8000
DISABLE_CUSTOM_ALL_REDUCE = "--disable-custom-all-reduce"
MODEL_DIR = "/models/weights"
DRAFT_DIR = "/models/draft"


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def engine_flags(spec: KimiDeploymentSpec) -> list[str]:
    """Flags common to leader and workers: everything but node rank and role."""
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
    if spec.speculative is not None:
        draft = {
            "method": spec.speculative.method,
            "model": DRAFT_DIR,
            "num_speculative_tokens": spec.speculative.num_speculative_tokens,
        }
        flags += ["--speculative-config", _json(draft)]
    return flags


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


def leader_args(spec: KimiDeploymentSpec, no_custom_all_reduce: bool = False) -> list[str]:
    args = [
        *engine_flags(spec),
        *_workarounds(spec, no_custom_all_reduce),
        "--port",
        str(HTTP_PORT),
    ]
    if spec.nodes_per_group > 1:
        args += [
            "--nnodes", str(spec.nodes_per_group),
            "--node-rank", "0",
            "--master-addr", "$(LWS_LEADER_ADDRESS)",
        ]  # fmt: skip
    return [*args, *literal(spec.engine_args)]


def worker_args(spec: KimiDeploymentSpec, no_custom_all_reduce: bool = False) -> list[str]:
    return [
        *engine_flags(spec),
        *_workarounds(spec, no_custom_all_reduce),
        "--nnodes", str(spec.nodes_per_group),
        "--node-rank", "$(LWS_WORKER_INDEX)",
        "--master-addr", "$(LWS_LEADER_ADDRESS)",
        "--headless",
        *literal(spec.engine_args),
    ]  # fmt: skip
