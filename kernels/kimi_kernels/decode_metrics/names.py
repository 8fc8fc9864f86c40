"""Names, labels and buckets of every metric the kimi_kernels plugins export.

The rules and dashboards of the operator (`kimi_operator.observability`) reference these names;
a test checks every name they use exists here, in vLLM's catalog or in the recording rules.
"""

REQUEST_DECODE_TPS = "kimi_request_decode_tokens_per_second"
REQUEST_TTFT = "kimi_request_time_to_first_token_seconds"
BUILD_INFO = "kimi_build_info"
ENGINE_GPUS = "kimi_engine_gpus"
SCHEDULER_CONFIG_INFO = "kimi_scheduler_config_info"
DECODE_STEPS = "kimi_decode_steps"  # exposed as kimi_decode_steps_total
DECODE_PATH_INSTRUMENTED = "kimi_decode_path_instrumented"

# Labels of the per-request metrics (the scrape adds namespace, pod and deployment).
REQUEST_LABELS = ("model_name", "decode_backend")
BUILD_INFO_LABELS = (
    "model_name",
    "vllm_version",
    "cutlass_dsl_version",
    "decode_backend",
    "gpu_name",
)
# What the scheduler was configured with, after vLLM's platform adjusted it (vLLM exports the cache
# configuration as vllm:cache_config_info, not this): what a calibration plans with.
SCHEDULER_CONFIG_LABELS = (
    "model_name",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "max_model_len",
)
DECODE_STEP_LABELS = ("model_name", "decode_backend", "path", "reason")

PATH_SPECIALIZED = "specialized"
PATH_FALLBACK = "fallback"
# Why a step ran the stock forward, in the words of the planner's docstring
# (vllm/models/kimi_k3/nvidia/specialized_decode/runtime/decode.py: SpecializedDecode.plan).
REASON_NONE = "none"  # the specialized path ran
REASON_PREFILL = "prefill"
REASON_MIXED_BATCH = "mixed_batch"
REASON_BATCH_TOO_LARGE = "batch_too_large"  # above the 64 tokens of the prepared providers
REASON_BATCH_NOT_PREPARED = "batch_size_not_prepared"  # <= 64 tokens, no provider of that size
REASON_OUTSIDE_CUDA_GRAPHS = "outside_cuda_graphs"
REASON_PIECEWISE_GRAPHS = "piecewise_graphs"
REASON_PIPELINE_STAGE = "pipeline_stage"
FALLBACK_REASONS = (
    REASON_PREFILL,
    REASON_MIXED_BATCH,
    REASON_BATCH_TOO_LARGE,
    REASON_BATCH_NOT_PREPARED,
    REASON_OUTSIDE_CUDA_GRAPHS,
    REASON_PIECEWISE_GRAPHS,
    REASON_PIPELINE_STAGE,
)

# Per-user decode throughput: vLLM's headline for Kimi K3 is 842 tok/s per user. Linear
# interpolation inside a bucket is exact for evenly spread rates; steps of <= 25% above 100 tok/s.
DECODE_TPS_BUCKETS = (
    1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 80.0, 100.0, 125.0, 150.0, 200.0, 250.0,
    300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1250.0, 1500.0, 2000.0, 3000.0,
)  # fmt: skip
# Same buckets as vLLM 0.33.0's vllm:time_to_first_token_seconds.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip

METRICS_PORT_ENV = "KIMI_METRICS_PORT"
METRICS_ADDR_ENV = "KIMI_METRICS_ADDR"
