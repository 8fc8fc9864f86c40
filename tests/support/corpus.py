"""The corpus of KimiDeployment specs with the verdict each must get, from pydantic, the generated
CRD and `kimi-operator validate` alike (tests/kimi_operator/api/test_one_verdict.py); the gate,
builders and engineArgs tests draw their cases from it too."""

from typing import Any

from tests.support.specs import DELETE

DRAFT = {"draftSource": {"pvc": {"claimName": "weights", "subPath": "draft"}}}
HF = {"huggingface": {"repo": "moonshotai/Kimi-K3"}}
PVC = {"pvc": {"claimName": "weights"}}
AUTOSCALING = {"maxReplicas": 4, "target": {"waitingRequestsPerGroup": 8}}
OFFLOAD = {"perGPU": "32Gi"}
EXPANDABLE = {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}
POOL = {"spec.routing.mode": "InferencePool"}
PREFILL_AUTOSCALING = {"maxReplicas": 3, "target": {"waitingRequestsPerGroup": 4}}
# First token within 2 s and 40 tok/s per user, each for 90% of requests (the defaults).
SLO = {"ttftSeconds": 2, "decodeTokensPerSecondPerUser": 40}
SLO_AUTOSCALING = {"maxReplicas": 4, "slo": SLO}
COLLECTOR = "http://otel-collector.observability:4317"
HTTPS_COLLECTOR = "https://tempo.example.com/v1/traces"
JAEGER_UI = "https://jaeger.example/trace/{trace_id}"
TRACING = {"endpoint": COLLECTOR, "samplingRatio": 0.25, "detailedTraces": True}


def prefill(**fields: Any) -> dict[str, Any]:
    """Disaggregated prefill (spec.prefill, with the pool it needs) with these fields."""
    return POOL | {"spec.prefill": fields}


def cal(schedule: str) -> dict[str, Any]:
    """A stored calibration kept current on `schedule`."""
    return {"configMapName": "k3-calibration", "schedule": schedule}


def prefill_env(*env: dict[str, Any]) -> dict[str, Any]:
    return prefill(env=list(env))


def prefill_args(*args: str) -> dict[str, Any]:
    return prefill(engineArgs=list(args))


# The variables the operator renders where tracing is on, refused in spec.env also while it is
# off (builders/tracing.py).
TRACING_VARIABLES = frozenset(
    {
        "OTEL_SERVICE_NAME",
        "OTEL_TRACES_SAMPLER",
        "OTEL_TRACES_SAMPLER_ARG",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_RESOURCE_ATTRIBUTES",
        "KIMI_POD_NAME",
        "KIMI_NODE_NAME",
        "KIMI_TP_GROUP",
    }
)
# The compile caches' variables, written out as the issue and vLLM 0.33.0's readers name them
# (the operator owns them: builders/lifecycle.py).
CACHE_VARIABLES = frozenset(
    {
        "VLLM_CACHE_ROOT",
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "DG_JIT_CACHE_DIR",
        "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
        "CUTE_DSL_CACHE_DIR",
    }
)

# (case id, edits to the valid base document, expected verdict)
CORPUS: list[tuple[str, dict[str, Any], bool]] = [
    ("minimal", {}, True),
    ("gpus-8", {"spec.gpus": 8}, True),
    ("gpus-12", {"spec.gpus": 12}, False),
    ("gpus-4", {"spec.gpus": 4}, False),
    ("gpus-32", {"spec.gpus": 32}, False),
    ("gpus-quoted", {"spec.gpus": "16"}, False),
    ("gpus-float", {"spec.gpus": 16.0}, False),
    ("gpus-bool", {"spec.gpus": True}, False),
    ("gpus-missing", {"spec.gpus": DELETE}, False),
    ("gpus-null", {"spec.gpus": None}, False),
    ("gpus-per-node-8-tp16", {"spec.gpusPerNode": 8}, False),
    ("gpus-per-node-8-tp16-stock", {"spec.gpusPerNode": 8, "spec.decode.backend": "auto"}, True),
    ("gpus-per-node-8-tp8", {"spec.gpusPerNode": 8, "spec.gpus": 8}, True),
    ("gpus-per-node-2", {"spec.gpusPerNode": 2}, False),
    ("gpus-per-node-quoted", {"spec.gpusPerNode": "4"}, False),
    ("replicas-0", {"spec.replicas": 0}, True),
    ("replicas-3", {"spec.replicas": 3}, True),
    ("replicas-negative", {"spec.replicas": -1}, False),
    ("replicas-too-many", {"spec.replicas": 65}, False),
    ("autoscaling-waiting", {"spec.autoscaling": AUTOSCALING}, True),
    (
        "autoscaling-all-fields",
        {
            "spec.autoscaling": AUTOSCALING
            | {
                "minReplicas": 2,
                "target": {"decodeRateFloor": 30},
                "scaleDownStabilizationSeconds": 3600,
                "scaleUpPeriodSeconds": 900,
            }
        },
        True,
    ),
    ("autoscaling-min-0", {"spec.autoscaling": AUTOSCALING | {"minReplicas": 0}}, False),
    ("autoscaling-max-below-min", {"spec.autoscaling": AUTOSCALING | {"minReplicas": 5}}, False),
    ("autoscaling-no-max", {"spec.autoscaling": {"target": {"kvCacheUsagePercent": 80}}}, False),
    ("autoscaling-no-target", {"spec.autoscaling": AUTOSCALING | {"target": {}}}, False),
    (
        "autoscaling-two-targets",
        {
            "spec.autoscaling": AUTOSCALING
            | {"target": {"kvCacheUsagePercent": 80, "decodeRateFloor": 30}}
        },
        False,
    ),
    (
        "autoscaling-kv-over-100",
        {"spec.autoscaling": AUTOSCALING | {"target": {"kvCacheUsagePercent": 101}}},
        False,
    ),
    (
        "autoscaling-long-window",
        {"spec.autoscaling": AUTOSCALING | {"scaleDownStabilizationSeconds": 3601}},
        False,
    ),
    ("autoscaling-slo-ttft", {"spec.autoscaling": SLO_AUTOSCALING}, True),
    (
        "autoscaling-slo-all-fields",
        {
            "spec.autoscaling": SLO_AUTOSCALING
            | {
                "minReplicas": 2,
                "scaleUpPeriodSeconds": 900,
                "slo": SLO | {"ttftPercentile": 99, "decodePercentile": 50},
            }
        },
        True,
    ),
    ("autoscaling-slo-and-target", {"spec.autoscaling": AUTOSCALING | {"slo": SLO}}, False),
    ("autoscaling-neither", {"spec.autoscaling": {"maxReplicas": 4}}, False),
    ("autoscaling-slo-empty", {"spec.autoscaling": SLO_AUTOSCALING | {"slo": {}}}, False),
    (
        "autoscaling-slo-percentile-only",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": {"ttftPercentile": 99}}},
        False,
    ),
    (
        "autoscaling-slo-percentile-75",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"ttftPercentile": 75}}},
        False,
    ),
    (
        "autoscaling-slo-percentile-float",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"decodePercentile": 90.0}}},
        False,
    ),
    (
        "autoscaling-slo-ttft-0",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": {"ttftSeconds": 0}}},
        False,
    ),
    (
        "autoscaling-slo-unknown-field",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"itlSeconds": 0.05}}},
        False,
    ),
    (
        "autoscaling-slo-calibration",
        {
            "spec.autoscaling": SLO_AUTOSCALING
            | {"slo": SLO | {"calibration": {"configMapName": "k3-calibration"}}}
        },
        True,
    ),
    (
        "autoscaling-slo-calibration-key",
        {
            "spec.autoscaling": SLO_AUTOSCALING
            | {"slo": SLO | {"calibration": {"configMapName": "k3.cal", "key": "tp16_v2.json"}}}
        },
        True,
    ),
    (
        "autoscaling-slo-calibration-no-name",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"calibration": {"key": "a.json"}}}},
        False,
    ),
    (
        "autoscaling-slo-calibration-bad-name",
        {
            "spec.autoscaling": SLO_AUTOSCALING
            | {"slo": SLO | {"calibration": {"configMapName": "K3_Calibration"}}}
        },
        False,
    ),
    (
        "autoscaling-slo-calibration-key-path",
        {
            "spec.autoscaling": SLO_AUTOSCALING
            | {"slo": SLO | {"calibration": {"configMapName": "k3", "key": "runs/cal.json"}}}
        },
        False,
    ),
    (
        "autoscaling-slo-calibration-schedule-weekly",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"calibration": cal("0 4 * * 0")}}},
        True,
    ),
    (
        "autoscaling-slo-calibration-schedule-lists-ranges-steps",
        {
            "spec.autoscaling": SLO_AUTOSCALING
            | {"slo": SLO | {"calibration": cal("*/20 1-3,5 1,15 */2 mon-fri")}}
        },
        True,
    ),
    (
        "autoscaling-slo-calibration-schedule-names-upper-any-day",
        {
            "spec.autoscaling": SLO_AUTOSCALING
            | {"slo": SLO | {"calibration": cal("30 23 ? JAN,JUL SUN")}}
        },
        True,
    ),
    (
        "autoscaling-slo-calibration-schedule-macro",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"calibration": cal("@daily")}}},
        True,
    ),
    (
        "autoscaling-slo-calibration-schedule-four-fields",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"calibration": cal("0 4 * *")}}},
        False,
    ),
    (
        "autoscaling-slo-calibration-schedule-minute-60",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"calibration": cal("60 4 * * 0")}}},
        False,
    ),
    (
        "autoscaling-slo-calibration-schedule-day-of-week-7",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"calibration": cal("0 4 * * 7")}}},
        False,
    ),
    (
        "autoscaling-slo-calibration-schedule-time-zone-prefix",
        {
            "spec.autoscaling": SLO_AUTOSCALING
            | {"slo": SLO | {"calibration": cal("CRON_TZ=UTC 0 4 * * 0")}}
        },
        False,
    ),
    (
        "autoscaling-slo-calibration-schedule-every",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"calibration": cal("@every 1h")}}},
        False,
    ),
    (
        "autoscaling-slo-calibration-schedule-words",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"calibration": cal("sundays at 4")}}},
        False,
    ),
    (
        "autoscaling-slo-calibration-schedule-step-0",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"calibration": cal("*/0 * * * *")}}},
        False,
    ),
    (
        "autoscaling-slo-calibration-schedule-empty",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"calibration": cal("")}}},
        False,
    ),
    (
        "prefill-autoscaling-slo-calibration-schedule",
        prefill(
            autoscaling={
                "maxReplicas": 3,
                "slo": {"ttftSeconds": 1.5, "calibration": cal("@weekly")},
            }
        ),
        True,
    ),
    (
        "prefill-autoscaling-slo-calibration-schedule-bad",
        prefill(
            autoscaling={
                "maxReplicas": 3,
                "slo": {"ttftSeconds": 1.5, "calibration": cal("0 25 * * *")},
            }
        ),
        False,
    ),
    ("rollout-default-3", {"spec.replicas": 3}, True),
    ("rollout-unavailable-all", {"spec.replicas": 3, "spec.rollout.maxUnavailable": 3}, False),
    ("rollout-unavailable-2-of-3", {"spec.replicas": 3, "spec.rollout.maxUnavailable": 2}, True),
    ("rollout-unavailable-1-of-1", {"spec.rollout.maxUnavailable": 1}, True),
    ("rollout-unavailable-1-of-0", {"spec.replicas": 0}, True),
    ("rollout-no-progress", {"spec.rollout.maxUnavailable": 0}, False),
    ("rollout-surge", {"spec.rollout.maxUnavailable": 0, "spec.rollout.maxSurge": 1}, True),
    ("rollout-surge-2", {"spec.rollout.maxSurge": 2}, False),
    ("rollout-deadline-0", {"spec.rollout.progressDeadlineSeconds": 0}, False),
    ("image-policy-pinned", {"spec.imagePolicy": "Pinned"}, True),
    ("prefill-always", prefill(), True),
    (
        "prefill-uncached-tokens",
        prefill(replicas=2, decider="UncachedTokens", uncachedTokens=512) | {"spec.replicas": 3},
        True,
    ),
    (
        "prefill-own-args-and-env",
        prefill(
            engineArgs=["--max-num-batched-tokens", "16384"],
            env=[
                {"name": "VLLM_SSM_CONV_STATE_LAYOUT", "value": "DS"},
                {"name": "A", "value": "1"},
            ],
        ),
        True,
    ),
    (
        "prefill-dspark-dcp",
        prefill() | {"spec.speculative": DRAFT, "spec.decode.contextParallelSize": 16},
        True,
    ),
    ("prefill-tp8-stock", prefill() | {"spec.gpus": 8, "spec.decode.backend": "auto"}, True),
    ("prefill-routing-service", {"spec.prefill": {}}, False),
    (
        "prefill-no-prefix-scorer",
        prefill() | {"spec.routing.endpointPicker.weights.prefixCache": 0},
        False,
    ),
    ("prefill-with-cpu-offload", prefill() | {"spec.kvCache.cpuOffload": OFFLOAD}, False),
    (
        "prefill-precise",
        prefill(decider="UncachedTokens", uncachedTokens=256)
        | {"spec.routing.prefixScoring": "Precise"},
        True,
    ),
    ("prefill-replicas-0", prefill(replicas=0), False),
    ("prefill-autoscaling-waiting", prefill(autoscaling=PREFILL_AUTOSCALING), True),
    (
        "prefill-autoscaling-ttft-all-fields",
        prefill(
            replicas=2,
            autoscaling={
                "minReplicas": 2,
                "maxReplicas": 4,
                "target": {"ttftSecondsP90": 1.5},
                "scaleUpPeriodSeconds": 300,
                "scaleDownStabilizationSeconds": 900,
            },
        ),
        True,
    ),
    (
        "prefill-autoscaling-min-0",
        prefill(autoscaling=PREFILL_AUTOSCALING | {"minReplicas": 0}),
        False,
    ),
    (
        "prefill-autoscaling-max-below-min",
        prefill(replicas=4, autoscaling=PREFILL_AUTOSCALING | {"minReplicas": 4}),
        False,
    ),
    (
        "prefill-autoscaling-no-target",
        prefill(autoscaling=PREFILL_AUTOSCALING | {"target": {}}),
        False,
    ),
    (
        "prefill-autoscaling-two-targets",
        prefill(
            autoscaling=PREFILL_AUTOSCALING
            | {"target": {"waitingRequestsPerGroup": 4, "ttftSecondsP90": 2}}
        ),
        False,
    ),
    (
        "prefill-autoscaling-decode-target",
        prefill(autoscaling=PREFILL_AUTOSCALING | {"target": {"kvCacheUsagePercent": 80}}),
        False,
    ),
    (
        "prefill-autoscaling-ttft-0",
        prefill(autoscaling=PREFILL_AUTOSCALING | {"target": {"ttftSecondsP90": 0}}),
        False,
    ),
    (
        "prefill-autoscaling-replicas-above-max",
        prefill(replicas=4, autoscaling=PREFILL_AUTOSCALING),
        False,
    ),
    (
        "prefill-autoscaling-replicas-below-min",
        prefill(replicas=1, autoscaling=PREFILL_AUTOSCALING | {"minReplicas": 2}),
        False,
    ),
    (
        "prefill-autoscaling-slo",
        prefill(autoscaling={"maxReplicas": 3, "slo": {"ttftSeconds": 1.5}}),
        True,
    ),
    (
        "prefill-autoscaling-slo-calibration",
        prefill(
            autoscaling={
                "maxReplicas": 3,
                "slo": {"ttftSeconds": 1.5, "calibration": {"configMapName": "k3-prefill"}},
            }
        ),
        True,
    ),
    (
        "autoscaling-slo-task-completion",
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": {"taskCompletionSeconds": 300}}},
        False,
    ),
    (
        "prefill-autoscaling-slo-decode",
        prefill(autoscaling={"maxReplicas": 3, "slo": SLO}),
        False,
    ),
    (
        "prefill-autoscaling-slo-empty",
        prefill(autoscaling={"maxReplicas": 3, "slo": {"ttftPercentile": 50}}),
        False,
    ),
    (
        "prefill-autoscaling-slo-and-target",
        prefill(autoscaling=PREFILL_AUTOSCALING | {"slo": {"ttftSeconds": 1.5}}),
        False,
    ),
    ("prefill-unknown-field", prefill(gpus=8), False),
    ("prefill-decider-unknown", prefill(decider="Sometimes"), False),
    ("prefill-uncached-no-threshold", prefill(decider="UncachedTokens"), False),
    ("prefill-threshold-with-always", prefill(uncachedTokens=64), False),
    ("prefill-block-size", prefill_args("--block-size", "64"), False),
    ("prefill-attention-backend", prefill_args("--attention-backend=FLASHMLA"), False),
    ("prefill-dtype", prefill_args("--dtype", "float16"), False),
    ("prefill-kv-transfer", prefill_args("--kv-transfer-config", "{}"), False),
    (
        "prefill-decode-kv-transfer",
        prefill() | {"spec.engineArgs": ["--kv-transfer-config={}"]},
        False,
    ),
    ("prefill-tensor-parallel", prefill_args("-tp", "8"), False),
    ("prefill-kv-dtype", prefill_args("--kv-cache-dtype=auto"), False),
    ("prefill-unknown-flag", prefill_args("--max-num-batched-tokenz=8"), False),
    (
        "prefill-decode-conv-layout",
        prefill() | {"spec.env": [{"name": "VLLM_SSM_CONV_STATE_LAYOUT", "value": "SD"}]},
        False,
    ),
    (
        "prefill-side-channel-host",
        prefill_env({"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "value": "10.0.0.1"}),
        False,
    ),
    (
        "prefill-side-channel-port",
        prefill_env({"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": "5700"}),
        False,
    ),
    (
        "prefill-decode-side-channel-host",
        prefill() | {"spec.env": [{"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "value": "0.0.0.0"}]},
        False,
    ),
    (
        "prefill-decode-side-channel-port",
        prefill() | {"spec.env": [{"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": "5700"}]},
        False,
    ),
    (
        "prefill-conv-layout",
        prefill_env({"name": "VLLM_SSM_CONV_STATE_LAYOUT", "value": "SD"}),
        False,
    ),
    ("prefill-v1-runner", prefill_env({"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "0"}), False),
    (
        "prefill-env-twice",
        prefill_env({"name": "A", "value": "1"}, {"name": "A", "value": "2"}),
        False,
    ),
    (
        "prefill-aux-stream-dspark",
        prefill_env({"name": "VLLM_KIMI_K3_AUX_ATTN_RES_STREAM", "value": "1"})
        | {"spec.speculative": DRAFT},
        False,
    ),
    ("routing-service", {"spec.routing.mode": "Service"}, True),
    ("routing-pool", {"spec.routing.mode": "InferencePool"}, True),
    (
        "routing-pool-gateway",
        {
            "spec.routing": {
                "mode": "InferencePool",
                "gatewayRef": {"name": "inference", "namespace": "gw", "sectionName": "http"},
                "endpointPicker": {
                    "image": "registry.example/epp:v0.10.0",
                    "weights": {"queue": 1, "kvCacheUtilization": 0, "prefixCache": 5},
                },
            }
        },
        True,
    ),
    ("routing-gateway-without-pool", {"spec.routing.gatewayRef": {"name": "inference"}}, False),
    (
        "routing-precise",
        {"spec.routing": {"mode": "InferencePool", "prefixScoring": "Precise"}},
        True,
    ),
    (
        "routing-precise-with-cpu-offload",
        {
            "spec.routing": {"mode": "InferencePool", "prefixScoring": "Precise"},
            "spec.kvCache.cpuOffload": OFFLOAD,
        },
        True,
    ),
    ("routing-precise-without-pool", {"spec.routing.prefixScoring": "Precise"}, False),
    (
        "routing-precise-prefix-caching-off",
        {
            "spec.routing": {"mode": "InferencePool", "prefixScoring": "Precise"},
            "spec.kvCache.enablePrefixCaching": False,
        },
        False,
    ),
    (
        "routing-precise-model-with-at",
        {
            "spec.routing": {"mode": "InferencePool", "prefixScoring": "Precise"},
            "spec.model.name": "kimi@k3",
        },
        False,
    ),
    (
        "routing-precise-no-prefix-scorer",
        {
            "spec.routing": {
                "mode": "InferencePool",
                "prefixScoring": "Precise",
                "endpointPicker": {"weights": {"prefixCache": 0}},
            }
        },
        False,
    ),
    ("routing-estimated-model-with-at", {"spec.model.name": "kimi@k3"}, True),
    ("routing-scoring-unknown", {"spec.routing.prefixScoring": "Exact"}, False),
    ("routing-mode-unknown", {"spec.routing.mode": "Mesh"}, False),
    (
        "routing-gateway-no-name",
        {"spec.routing": {"mode": "InferencePool", "gatewayRef": {}}},
        False,
    ),
    (
        "routing-gateway-bad-namespace",
        {
            "spec.routing": {
                "mode": "InferencePool",
                "gatewayRef": {"name": "g", "namespace": "A_b"},
            }
        },
        False,
    ),
    ("routing-weight-over-100", {"spec.routing.endpointPicker.weights.queue": 101}, False),
    ("routing-weight-negative", {"spec.routing.endpointPicker.weights.prefixCache": -1}, False),
    ("routing-unknown-field", {"spec.routing.endpointPicker.replicas": 2}, False),
    ("image-policy-unknown", {"spec.imagePolicy": "Latest"}, False),
    ("unknown-spec-field", {"spec.tensorParallelSize": 16}, False),
    ("unknown-nested-field", {"spec.decode.turbo": True}, False),
    ("snake-case-field", {"spec.gpus_per_node": 4}, False),
    ("model-missing", {"spec.model": DELETE}, False),
    ("model-name-empty", {"spec.model.name": ""}, False),
    ("model-no-source", {"spec.model.source": {}}, False),
    ("model-both-sources", {"spec.model.source": PVC | HF}, False),
    ("model-hf", {"spec.model.source": HF}, True),
    (
        "model-hf-cache",
        {
            "spec.model.source": {
                "huggingface": HF["huggingface"]
                | {
                    "cache": {
                        "storageClassName": "cephfs",
                        "size": "2Ti",
                        "accessMode": "ReadWriteMany",
                        "files": ["*.safetensors", "*.json"],
                        "retain": True,
                    }
                }
            }
        },
        True,
    ),
    *(
        (
            f"model-hf-cache-{mode.lower()}",
            {
                "spec.model.source": {
                    "huggingface": HF["huggingface"] | {"cache": {"accessMode": mode}}
                }
            },
            False,
        )
        for mode in ("ReadWriteOnce", "ReadWriteOncePod", "ReadOnlyMany", "Rwx")
    ),
    (
        "draft-hf-cache-rwo",
        {
            "spec.speculative": {
                "draftSource": HF
                | {"huggingface": HF["huggingface"] | {"cache": {"accessMode": "ReadWriteOnce"}}}
            }
        },
        False,
    ),
    (
        "model-hf-cache-size",
        {"spec.model.source": {"huggingface": HF["huggingface"] | {"cache": {"size": "lots"}}}},
        False,
    ),
    (
        "model-hf-cache-files-empty",
        {"spec.model.source": {"huggingface": HF["huggingface"] | {"cache": {"files": [""]}}}},
        False,
    ),
    (
        "model-hf-cache-unknown",
        {"spec.model.source": {"huggingface": HF["huggingface"] | {"cache": {"sizeGi": 2}}}},
        False,
    ),
    (
        "model-hf-token",
        {
            "spec.model.source": {
                "huggingface": {
                    "repo": "a/b",
                    "revision": "v1",
                    "tokenSecretRef": {"name": "hf", "key": "token"},
                }
            }
        },
        True,
    ),
    ("model-hf-bad-repo", {"spec.model.source": {"huggingface": {"repo": "no-owner"}}}, False),
    ("model-pvc-bad-name", {"spec.model.source": {"pvc": {"claimName": "Weights_1"}}}, False),
    (
        "model-pvc-subpath",
        {"spec.model.source": {"pvc": {"claimName": "w", "subPath": "Kimi-K3"}}},
        True,
    ),
    ("backend-auto", {"spec.decode.backend": "auto"}, True),
    ("backend-unknown", {"spec.decode.backend": "flashinfer"}, False),
    ("dcp-16", {"spec.decode.contextParallelSize": 16}, True),
    ("dcp-8-on-tp8", {"spec.gpus": 8, "spec.decode.contextParallelSize": 8}, True),
    ("dcp-8-on-tp16", {"spec.decode.contextParallelSize": 8}, False),
    ("dcp-16-on-tp8", {"spec.gpus": 8, "spec.decode.contextParallelSize": 16}, False),
    ("dcp-2", {"spec.decode.contextParallelSize": 2}, False),
    ("dcp-0", {"spec.decode.contextParallelSize": 0}, False),
    ("graphs-full", {"spec.decode.cudaGraphMode": "FULL"}, True),
    ("graphs-full-decode-only", {"spec.decode.cudaGraphMode": "FULL_DECODE_ONLY"}, True),
    ("graphs-piecewise", {"spec.decode.cudaGraphMode": "PIECEWISE"}, False),
    ("graphs-none", {"spec.decode.cudaGraphMode": "NONE"}, False),
    ("max-num-seqs-64", {"spec.decode.maxNumSeqs": 64}, True),
    ("max-num-seqs-0", {"spec.decode.maxNumSeqs": 0}, False),
    ("kv-fp8", {"spec.kvCache.dtype": "fp8"}, True),
    ("kv-bf16-specialized", {"spec.kvCache.dtype": "bfloat16"}, False),
    ("kv-auto-specialized", {"spec.kvCache.dtype": "auto"}, False),
    ("kv-bf16-stock", {"spec.kvCache.dtype": "bfloat16", "spec.decode.backend": "auto"}, True),
    ("kv-fp16", {"spec.kvCache.dtype": "float16"}, False),
    ("mamba-bf16", {"spec.kvCache.mambaCacheDtype": "bfloat16"}, True),
    ("mamba-fp32", {"spec.kvCache.mambaCacheDtype": "float32"}, False),
    ("mamba-ssm-fp32", {"spec.kvCache.mambaSsmCacheDtype": "float32"}, True),
    ("mamba-ssm-bf16", {"spec.kvCache.mambaSsmCacheDtype": "bfloat16"}, False),
    ("memory-95", {"spec.kvCache.gpuMemoryUtilizationPercent": 95}, True),
    ("memory-fraction", {"spec.kvCache.gpuMemoryUtilizationPercent": 0.9}, False),
    ("memory-101", {"spec.kvCache.gpuMemoryUtilizationPercent": 101}, False),
    ("max-model-len", {"spec.kvCache.maxModelLen": 131072}, True),
    ("max-model-len-0", {"spec.kvCache.maxModelLen": 0}, False),
    ("prefix-caching-off", {"spec.kvCache.enablePrefixCaching": False}, True),
    ("prefix-caching-string", {"spec.kvCache.enablePrefixCaching": "false"}, False),
    # The CPU KV tier (docs/kv-cache.md): accepted on every decode path and group shape.
    ("cpu-offload", {"spec.kvCache.cpuOffload": OFFLOAD}, True),
    ("cpu-offload-tp8", {"spec.kvCache.cpuOffload": OFFLOAD, "spec.gpus": 8}, True),
    (
        "cpu-offload-one-node",
        {"spec.kvCache.cpuOffload": OFFLOAD, "spec.gpus": 8, "spec.gpusPerNode": 8},
        True,
    ),
    (
        "cpu-offload-dspark",
        {"spec.kvCache.cpuOffload": {"perGPU": "1Gi"}, "spec.speculative": DRAFT},
        True,
    ),
    (
        "cpu-offload-stock",
        {"spec.kvCache.cpuOffload": OFFLOAD, "spec.decode.backend": "auto"},
        True,
    ),
    (
        "cpu-offload-dcp",
        {"spec.kvCache.cpuOffload": OFFLOAD, "spec.decode.contextParallelSize": 16},
        True,
    ),
    (  # accepted with a warning: more than a tray holds
        "cpu-offload-too-big-for-a-tray",
        {"spec.kvCache.cpuOffload": {"perGPU": "9999Gi"}},
        True,
    ),
    ("cpu-offload-no-size", {"spec.kvCache.cpuOffload": {}}, False),
    ("cpu-offload-zero", {"spec.kvCache.cpuOffload": {"perGPU": "0Gi"}}, False),
    ("cpu-offload-mi", {"spec.kvCache.cpuOffload": {"perGPU": "131072Mi"}}, False),
    ("cpu-offload-decimal", {"spec.kvCache.cpuOffload": {"perGPU": "128G"}}, False),
    ("cpu-offload-number", {"spec.kvCache.cpuOffload": {"perGPU": 128}}, False),
    ("cpu-offload-camel", {"spec.kvCache.cpuOffload": {"perGpu": "128Gi"}}, False),
    (
        "cpu-offload-prefix-caching-off",
        {"spec.kvCache.cpuOffload": OFFLOAD, "spec.kvCache.enablePrefixCaching": False},
        False,
    ),
    (
        "cpu-offload-expandable-segments",
        {"spec.kvCache.cpuOffload": OFFLOAD, "spec.env": [EXPANDABLE]},
        False,
    ),
    (
        "cpu-offload-expandable-segments-among-others",
        {
            "spec.kvCache.cpuOffload": OFFLOAD,
            "spec.env": [EXPANDABLE | {"value": "max_split_size_mb:512,expandable_segments:True"}],
        },
        False,
    ),
    (  # vLLM exempts the cumem allocator, which the gate's CPU platform cannot configure
        "cpu-offload-expandable-segments-cumem",
        {
            "spec.kvCache.cpuOffload": OFFLOAD,
            "spec.env": [EXPANDABLE],
            "spec.engineArgs": ["--enable-cumem-allocator"],
        },
        False,
    ),
    ("expandable-segments-without-offload", {"spec.env": [EXPANDABLE]}, True),
    (
        "cpu-offload-expandable-segments-false",
        {
            "spec.kvCache.cpuOffload": OFFLOAD,
            "spec.env": [EXPANDABLE | {"value": "expandable_segments:False"}],
        },
        True,
    ),
    (
        "cpu-offload-lmcache",
        {
            "spec.kvCache.cpuOffload": OFFLOAD,
            "spec.engineArgs": ["--kv-offloading-backend=lmcache"],
        },
        False,
    ),
    (  # vLLM would replace its connector with the offloading connector
        "cpu-offload-kv-transfer-config",
        {
            "spec.kvCache.cpuOffload": OFFLOAD,
            "spec.engineArgs": [
                '--kv-transfer-c={"kv_connector":"NixlConnector","kv_role":"kv_both"}'
            ],
        },
        False,
    ),
    ("offloading-size-in-engine-args", {"spec.engineArgs": ["--kv-offloading-size", "512"]}, False),
    ("offloading-size-abbreviated", {"spec.engineArgs": ["--kv-offloading-s=512"]}, False),
    ("kv-events-in-engine-args", {"spec.engineArgs": ["--kv-events-config={}"]}, False),
    ("dspark", {"spec.speculative": DRAFT}, True),
    ("dspark-1-token", {"spec.speculative": DRAFT | {"numSpeculativeTokens": 1}}, True),
    ("dspark-8-tokens", {"spec.speculative": DRAFT | {"numSpeculativeTokens": 8}}, False),
    ("dspark-0-tokens", {"spec.speculative": DRAFT | {"numSpeculativeTokens": 0}}, False),
    ("eagle", {"spec.speculative": DRAFT | {"method": "eagle3"}}, False),
    ("dspark-no-draft", {"spec.speculative": {"method": "dspark"}}, False),
    ("dspark-two-drafts", {"spec.speculative": {"draftSource": PVC | HF}}, False),
    ("dspark-hf-draft", {"spec.speculative": {"draftSource": HF}}, True),
    (
        "dspark-aux-stream",
        {
            "spec.speculative": DRAFT,
            "spec.env": [{"name": "VLLM_KIMI_K3_AUX_ATTN_RES_STREAM", "value": "1"}],
        },
        False,
    ),
    (
        "aux-stream-no-dspark",
        {"spec.env": [{"name": "VLLM_KIMI_K3_AUX_ATTN_RES_STREAM", "value": "1"}]},
        True,
    ),
    ("env-plain", {"spec.env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}, True),
    ("env-v1-runner", {"spec.env": [{"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "0"}]}, False),
    ("env-v2-runner", {"spec.env": [{"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "1"}]}, True),
    (
        "env-v2-runner-true",
        {"spec.env": [{"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "true"}]},
        False,
    ),
    (
        "env-v2-runner-from",
        {
            "spec.env": [
                {"name": "VLLM_USE_V2_MODEL_RUNNER", "valueFrom": {"fieldRef": {"fieldPath": "a"}}}
            ]
        },
        False,
    ),
    ("env-cumem-off", {"spec.env": [{"name": "NCCL_CUMEM_ENABLE", "value": "0"}]}, False),
    ("env-metrics-port", {"spec.env": [{"name": "KIMI_METRICS_PORT", "value": "9091"}]}, False),
    ("env-metrics-port-same", {"spec.env": [{"name": "KIMI_METRICS_PORT", "value": "9090"}]}, True),
    ("env-hf-home", {"spec.env": [{"name": "HF_HOME", "value": "/tmp/hf"}]}, True),
    ("env-hf-token", {"spec.env": [{"name": "HF_TOKEN", "value": "hf_x"}]}, False),
    ("env-twice", {"spec.env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, False),
    ("env-mnnvl", {"spec.env": [{"name": "NCCL_MNNVL_ENABLE", "value": "0"}]}, False),
    (
        "env-secret",
        {"spec.env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
        True,
    ),
    (
        "env-value-and-from",
        {
            "spec.env": [
                {
                    "name": "T",
                    "value": "x",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                }
            ]
        },
        False,
    ),
    (
        "env-from-two",
        {
            "spec.env": [
                {
                    "name": "T",
                    "valueFrom": {
                        "fieldRef": {"fieldPath": "a"},
                        "secretKeyRef": {"name": "s", "key": "k"},
                    },
                }
            ]
        },
        False,
    ),
    ("env-from-none", {"spec.env": [{"name": "T", "valueFrom": {}}]}, False),
    ("env-bad-name", {"spec.env": [{"name": "1BAD=", "value": "x"}]}, False),
    ("env-value-int", {"spec.env": [{"name": "N", "value": 1}]}, False),
    (
        "env-engine-ready",
        {"spec.env": [{"name": "VLLM_ENGINE_READY_TIMEOUT_S", "value": "3600"}]},
        False,
    ),
    ("serving-multimodal", {"spec.serving.multimodal": True}, True),
    ("serving-plain", {"spec.serving": {"toolCalling": False, "reasoning": False}}, True),
    ("serving-startup-least", {"spec.serving.startupTimeoutMinutes": 15}, True),
    ("serving-startup-most", {"spec.serving.startupTimeoutMinutes": 480}, True),
    ("serving-startup-short", {"spec.serving.startupTimeoutMinutes": 14}, False),
    ("serving-startup-long", {"spec.serving.startupTimeoutMinutes": 481}, False),
    ("serving-startup-quoted", {"spec.serving.startupTimeoutMinutes": "90"}, False),
    ("serving-unknown", {"spec.serving.toolParser": "hermes"}, False),
    ("serving-load-fastsafetensors", {"spec.serving.loadFormat": "fastsafetensors"}, True),
    (
        "serving-load-prefetch",
        {"spec.serving": {"loadFormat": "safetensors", "safetensorsLoadStrategy": "prefetch"}},
        True,
    ),
    ("serving-load-eager", {"spec.serving.safetensorsLoadStrategy": "eager"}, True),
    ("serving-load-pt", {"spec.serving.loadFormat": "pt"}, False),
    ("serving-load-torchao", {"spec.serving.safetensorsLoadStrategy": "torchao"}, False),
    (
        "serving-load-strategy-fastsafetensors",
        {"spec.serving": {"loadFormat": "fastsafetensors", "safetensorsLoadStrategy": "lazy"}},
        False,
    ),
    ("serving-drain-none", {"spec.serving.drainSeconds": 0}, True),
    ("serving-drain-hour", {"spec.serving.drainSeconds": 3600}, True),
    ("serving-drain-long", {"spec.serving.drainSeconds": 3601}, False),
    ("serving-drain-negative", {"spec.serving.drainSeconds": -1}, False),
    ("compile-cache-claim", {"spec.serving.compileCache": {"claimName": "rwx-cache"}}, True),
    (
        "compile-cache-host-path",
        {"spec.serving.compileCache": {"volume": "HostPath", "hostPath": "/mnt/nvme"}},
        True,
    ),
    ("compile-cache-disabled", {"spec.serving.compileCache": {"volume": "Disabled"}}, True),
    (
        "compile-cache-sized",
        {"spec.serving.compileCache": {"storageClassName": "cephfs", "size": "1Ti"}},
        True,
    ),
    ("compile-cache-emptydir", {"spec.serving.compileCache": {"volume": "EmptyDir"}}, False),
    ("compile-cache-bad-claim", {"spec.serving.compileCache": {"claimName": "Cache_1"}}, False),
    ("compile-cache-relative", {"spec.serving.compileCache": {"hostPath": "cache"}}, False),
    ("compile-cache-bad-size", {"spec.serving.compileCache": {"size": "lots"}}, False),
    ("args-load-format", {"spec.engineArgs": ["--load-format", "pt"]}, False),
    ("args-shutdown-timeout", {"spec.engineArgs": ["--shutdown-timeout=5"]}, False),
    ("args-load-strategy", {"spec.engineArgs": ["--safetensors-load-strategy=lazy"]}, False),
    *(
        (f"env-{name.lower()}", {"spec.env": [{"name": name, "value": "/tmp/c"}]}, False)
        for name in sorted(CACHE_VARIABLES)
    ),
    (
        "env-startup-plan-off",
        {"spec.env": [{"name": "VLLM_ENABLE_STARTUP_PLAN", "value": "0"}]},
        False,
    ),
    (
        "env-startup-plan-same",
        {"spec.env": [{"name": "VLLM_ENABLE_STARTUP_PLAN", "value": "1"}]},
        True,
    ),
    ("args-tool-parser", {"spec.engineArgs": ["--tool-call-parser", "kimi_k2"]}, False),
    ("args-auto-tools", {"spec.engineArgs": ["--enable-auto-tool-choice"]}, False),
    ("args-reasoning-parser", {"spec.engineArgs": ["--reasoning-parser=kimi_k3"]}, False),
    ("args-language-model-only", {"spec.engineArgs": ["--no-language-model-only"]}, False),
    (
        "args-recipe-overrides",
        {"spec.engineArgs": ["--no-trust-remote-code", "--max-num-batched-tokens=16k"]},
        True,
    ),
    (
        "args-ok",
        {"spec.engineArgs": ["--trust-remote-code", "--max-num-batched-tokens", "8192"]},
        True,
    ),
    ("args-tp", {"spec.engineArgs": ["--tensor-parallel-size", "8"]}, False),
    ("args-tp-equals", {"spec.engineArgs": ["--tensor-parallel-size=8"]}, False),
    ("args-tp-short", {"spec.engineArgs": ["-tp", "8"]}, False),
    ("args-tp-abbrev", {"spec.engineArgs": ["--tensor-parallel", "8"]}, False),
    ("args-pp", {"spec.engineArgs": ["-pp=2"]}, False),
    ("args-dp", {"spec.engineArgs": ["--data-parallel-size", "2"]}, False),
    ("args-ep", {"spec.engineArgs": ["--enable-expert-parallel"]}, False),
    ("args-ep-short", {"spec.engineArgs": ["-ep"]}, False),
    ("args-dcp", {"spec.engineArgs": ["-dcp", "2"]}, False),
    ("args-lora", {"spec.engineArgs": ["--enable-lora"]}, False),
    ("args-lora-underscore", {"spec.engineArgs": ["--enable_lora"]}, False),
    ("args-lora-modules", {"spec.engineArgs": ["--lora-modules", "a=b"]}, False),
    ("args-max-loras", {"spec.engineArgs": ["--max-loras=4"]}, False),
    ("args-dbo", {"spec.engineArgs": ["--enable-dbo"]}, False),
    ("args-sleep", {"spec.engineArgs": ["--enable-sleep-mode"]}, False),
    ("args-eager", {"spec.engineArgs": ["--enforce-eager"]}, False),
    ("args-kv-dtype", {"spec.engineArgs": ["--kv-cache-dtype", "auto"]}, False),
    ("args-kv-dtype-skip-layers", {"spec.engineArgs": ["--kv-cache-dtype-skip-layers", "0"]}, True),
    ("args-sc", {"spec.engineArgs": ["-sc", "{}"]}, False),
    ("args-additional-config", {"spec.engineArgs": ["--additional-config={}"]}, False),
    ("args-cc-dotted", {"spec.engineArgs": ["--compilation-config.cudagraph_mode", "NONE"]}, False),
    ("args-cc-short", {"spec.engineArgs": ["-cc.mode=0"]}, False),
    ("args-O3", {"spec.engineArgs": ["-O3"]}, False),
    ("args-O-space", {"spec.engineArgs": ["-O", "0"]}, False),
    ("args-nnodes", {"spec.engineArgs": ["-n", "2"]}, False),
    ("args-node-rank", {"spec.engineArgs": ["--node-rank=1"]}, False),
    ("args-master-addr", {"spec.engineArgs": ["--master-addr", "x"]}, False),
    ("args-headless", {"spec.engineArgs": ["--headless"]}, False),
    ("args-executor", {"spec.engineArgs": ["--distributed-executor-backend", "ray"]}, False),
    ("args-max-num-seqs", {"spec.engineArgs": ["--max-num-seqs", "64"]}, False),
    ("args-config-file", {"spec.engineArgs": ["--config", "/models/x.yaml"]}, False),
    ("args-model-impl", {"spec.engineArgs": ["--model-impl", "vllm"]}, True),
    ("args-replayssm", {"spec.engineArgs": ["--use-replayssm"]}, False),
    ("args-help", {"spec.engineArgs": ["--help"]}, False),
    ("args-typo-tp", {"spec.engineArgs": ["--tp=8"]}, False),
    ("args-typo-batched", {"spec.engineArgs": ["--max-num-batch-tokens", "8192"]}, False),
    ("args-abbreviated", {"spec.engineArgs": ["--max-num-batched-token", "8k"]}, True),
    ("args-ambiguous", {"spec.engineArgs": ["--max-num", "3"]}, False),
    ("args-unknown-a", {"spec.engineArgs": ["--asdf"]}, False),
    ("args-unknown-d", {"spec.engineArgs": ["--dtypes", "bfloat16"]}, False),
    ("args-unknown-e", {"spec.engineArgs": ["--enable-turbo"]}, False),
    ("args-unknown-n", {"spec.engineArgs": ["--no-such-flag"]}, False),
    ("args-unknown-uppercase", {"spec.engineArgs": ["--Seed", "1"]}, False),
    ("args-unknown-short", {"spec.engineArgs": ["-x"]}, False),
    ("args-short-abbreviated", {"spec.engineArgs": ["-as", "2"]}, True),
    ("args-short-abbreviated-equals", {"spec.engineArgs": ["-as=2"]}, False),
    ("args-flag-and-value", {"spec.engineArgs": ["--port 9000"]}, False),
    ("args-dotted-json", {"spec.engineArgs": ["--hf-overrides.rope_theta", "10000"]}, True),
    ("args-too-many", {"spec.engineArgs": ["--trust-remote-code"] * 65}, False),
    ("args-too-long", {"spec.engineArgs": ["--chat-template=" + "x" * 600]}, False),
    ("args-not-strings", {"spec.engineArgs": [1, 2]}, False),
    ("args-nnodes-attached", {"spec.engineArgs": ["-n2"]}, False),
    ("args-node-rank-attached", {"spec.engineArgs": ["-r1"]}, False),
    ("args-quantization-attached", {"spec.engineArgs": ["-qfp8"]}, True),
    ("args-lookalike-hyphens", {"spec.engineArgs": ["\u2010\u2010enable-lora"]}, False),
    ("args-minus-sign", {"spec.engineArgs": ["\u2212tp", "8"]}, False),
    ("args-fullwidth", {"spec.engineArgs": ["\uff0d\uff0dheadless"]}, False),
    ("args-small-hyphen", {"spec.engineArgs": ["\ufe63\ufe63enforce-eager"]}, False),
    ("args-nbsp", {"spec.engineArgs": ["--enable-lora\u00a0"]}, False),
    ("args-zero-width", {"spec.engineArgs": ["--seed\u200b", "1"]}, False),
    ("args-bidi-override", {"spec.engineArgs": ["\u202e--seed"]}, False),
    ("args-leading-space", {"spec.engineArgs": [" --enable-lora"]}, False),
    ("args-nul", {"spec.engineArgs": ["--seed\x00"]}, False),
    ("args-quoted", {"spec.engineArgs": ["'--enable-lora'"]}, False),
    ("args-two-in-one", {"spec.engineArgs": ["--trust-remote-code --enable-lora"]}, False),
    ("args-shell-in-name", {"spec.engineArgs": ["--seed;--enable-lora"]}, False),
    ("args-shell-value", {"spec.engineArgs": ["--chat-template", "{{ x }} $(id) `id` | sh"]}, True),
    ("args-multiline-value", {"spec.engineArgs": ["--chat-template={{ a }}\n{{ b }}"]}, True),
    ("args-unicode-value", {"spec.engineArgs": ["--chat-template=\u4f60\u597d {{ x }}"]}, True),
    ("args-negative-value", {"spec.engineArgs": ["--seed", "-1"]}, True),
    ("image-too-long", {"spec.image": "r/" + "x" * 511}, False),
    (
        "node-selector-65",
        {"spec.scheduling": {"nodeSelector": {f"k{i}": "v" for i in range(65)}}},
        False,
    ),
    (
        "fieldref-api-version-too-long",
        {
            "spec.env": [
                {"name": "P", "valueFrom": {"fieldRef": {"fieldPath": "a", "apiVersion": "v" * 65}}}
            ]
        },
        False,
    ),
    ("compute-domain-required", {"spec.computeDomain": "Required"}, True),
    ("compute-domain-disabled-tp16", {"spec.computeDomain": "Disabled"}, False),
    ("compute-domain-disabled-tp8", {"spec.computeDomain": "Disabled", "spec.gpus": 8}, False),
    (
        "compute-domain-disabled-one-node",
        {"spec.computeDomain": "Disabled", "spec.gpus": 8, "spec.gpusPerNode": 8},
        True,
    ),
    (
        "compute-domain-disabled-stock",
        {"spec.computeDomain": "Disabled", "spec.decode.backend": "auto"},
        True,
    ),
    ("compute-domain-lowercase", {"spec.computeDomain": "auto"}, False),
    ("resources", {"spec.resources": {"cpu": "96", "memory": "700Gi", "guaranteed": True}}, True),
    ("resources-millicpu", {"spec.resources": {"cpu": "63500m"}}, True),
    ("resources-int-cpu", {"spec.resources": {"cpu": 64}}, False),
    ("resources-negative", {"spec.resources": {"memory": "-1Gi"}}, False),
    ("resources-unit-typo", {"spec.resources": {"memory": "512GB"}}, False),
    ("resources-limits", {"spec.resources": {"limits": {"cpu": "1"}}}, False),
    ("shared-memory", {"spec.sharedMemory": "16Gi"}, True),
    ("shared-memory-bad", {"spec.sharedMemory": "lots"}, False),
    ("pull-secrets", {"spec.imagePullSecrets": [{"name": "registry"}]}, True),
    ("pull-secrets-bad-name", {"spec.imagePullSecrets": [{"name": "Registry_1"}]}, False),
    ("pull-secrets-9", {"spec.imagePullSecrets": [{"name": f"r{i}"} for i in range(9)]}, False),
    (
        "pod-metadata",
        {
            "spec.podMetadata": {
                "labels": {"team": "inference", "example.com/cost-center": "gpu-42"},
                "annotations": {"example.com/owner": "any text: ok"},
            }
        },
        True,
    ),
    ("pod-label-ours", {"spec.podMetadata": {"labels": {"app.kubernetes.io/name": "x"}}}, False),
    (
        "pod-label-lws",
        {"spec.podMetadata": {"labels": {"leaderworkerset.sigs.k8s.io/n": "x"}}},
        False,
    ),
    (
        "pod-label-part-of",
        {"spec.podMetadata": {"labels": {"app.kubernetes.io/part-of": "x"}}},
        True,
    ),
    ("pod-label-long-key", {"spec.podMetadata": {"labels": {"a" * 318: "x"}}}, False),
    (
        "pod-label-like-ours",
        {"spec.podMetadata": {"labels": {"app.kubernetes.io/names": "x"}}},
        True,
    ),
    ("pod-label-bad-value", {"spec.podMetadata": {"labels": {"team": "not ok"}}}, False),
    (
        "pod-annotation-exclusive",
        {
            "spec.podMetadata": {
                "annotations": {"leaderworkerset.sigs.k8s.io/exclusive-topology": "rack"}
            }
        },
        False,
    ),
    (
        "pod-annotation-operator",
        {"spec.podMetadata": {"annotations": {"kimi-operator.io/x": "1"}}},
        False,
    ),
    ("exclusive-clique", {"spec.scheduling": {"exclusiveClique": True}}, True),
    (
        "affinity",
        {
            "spec.scheduling": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "pool", "operator": "In", "values": ["gb300"]},
                                        {"key": "gen", "operator": "Gt", "values": ["2"]},
                                    ]
                                }
                            ]
                        },
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 10,
                                "preference": {
                                    "matchExpressions": [{"key": "spare", "operator": "Exists"}]
                                },
                            }
                        ],
                    },
                    "podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 50,
                                "podAffinityTerm": {
                                    "labelSelector": {"matchLabels": {"team": "training"}},
                                    "topologyKey": "nvidia.com/gpu.clique",
                                },
                            }
                        ]
                    },
                }
            }
        },
        True,
    ),
    (
        "affinity-in-without-values",
        {
            "spec.scheduling": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "pool", "operator": "In"}]}
                            ]
                        }
                    }
                }
            }
        },
        False,
    ),
    (
        "affinity-gt-not-integer",
        {
            "spec.scheduling": {
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 1,
                                "preference": {
                                    "matchFields": [
                                        {"key": "gen", "operator": "Lt", "values": ["two"]}
                                    ]
                                },
                            }
                        ]
                    }
                }
            }
        },
        False,
    ),
    (
        "affinity-no-terms",
        {
            "spec.scheduling": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
                    }
                }
            }
        },
        False,
    ),
    (
        "pod-affinity-exists-with-values",
        {
            "spec.scheduling": {
                "affinity": {
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {
                                    "matchExpressions": [
                                        {"key": "a", "operator": "Exists", "values": ["b"]}
                                    ]
                                },
                                "topologyKey": "kubernetes.io/hostname",
                            }
                        ]
                    }
                }
            }
        },
        False,
    ),
    (
        "pod-anti-affinity-notin-empty",
        {
            "spec.scheduling": {
                "affinity": {
                    "podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 100,
                                "podAffinityTerm": {
                                    "labelSelector": {
                                        "matchExpressions": [{"key": "a", "operator": "NotIn"}]
                                    },
                                    "topologyKey": "kubernetes.io/hostname",
                                },
                            }
                        ]
                    }
                }
            }
        },
        False,
    ),
    (
        "pod-affinity-gt",
        {
            "spec.scheduling": {
                "affinity": {
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {
                                    "matchExpressions": [
                                        {"key": "a", "operator": "Gt", "values": ["1"]}
                                    ]
                                },
                                "topologyKey": "kubernetes.io/hostname",
                            }
                        ]
                    }
                }
            }
        },
        False,
    ),
    (
        "scheduling",
        {
            "spec.scheduling": {
                "nodeSelector": {"a": "b"},
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                "priorityClassName": "high",
            }
        },
        True,
    ),
    (
        "toleration-exists-with-value",
        {"spec.scheduling": {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}},
        False,
    ),
    ("node-selector-bool", {"spec.scheduling": {"nodeSelector": {"a": True}}}, False),
    ("service-lb", {"spec.service": {"type": "LoadBalancer", "port": 80}}, True),
    ("service-port-0", {"spec.service": {"port": 0}}, False),
    ("service-external-name", {"spec.service": {"type": "ExternalName"}}, False),
    ("monitoring-off", {"spec.monitoring": {"podMonitor": False}}, True),
    ("monitoring-interval-bad", {"spec.monitoring": {"interval": "15 seconds"}}, False),
    # spec.observability.tracing (docs/observability.md#traces).
    ("tracing-grpc", {"spec.observability.tracing": {"endpoint": COLLECTOR}}, True),
    (
        "tracing-detailed-sampled",
        {"spec.observability.tracing": TRACING},
        True,
    ),
    ("tracing-off", {"spec.observability.tracing": {"endpoint": ""}}, True),
    ("tracing-pool", POOL | {"spec.observability.tracing": TRACING}, True),
    (
        "tracing-http-service",
        {"spec.observability.tracing": {"endpoint": HTTPS_COLLECTOR, "protocol": "http/protobuf"}},
        True,
    ),
    (
        "tracing-http-pool",
        POOL
        | {
            "spec.observability.tracing": {"endpoint": HTTPS_COLLECTOR, "protocol": "http/protobuf"}
        },
        False,
    ),
    (
        "tracing-http-pool-no-endpoint",
        POOL | {"spec.observability.tracing": {"protocol": "http/protobuf"}},
        True,
    ),
    ("tracing-grpc-tls", {"spec.observability.tracing": {"endpoint": HTTPS_COLLECTOR}}, False),
    (
        "tracing-detailed-no-endpoint",
        {"spec.observability.tracing": {"detailedTraces": True}},
        False,
    ),
    ("tracing-ratio-above-1", {"spec.observability.tracing": {"samplingRatio": 1.5}}, False),
    ("tracing-ratio-negative", {"spec.observability.tracing": {"samplingRatio": -0.1}}, False),
    ("tracing-ratio-string", {"spec.observability.tracing": {"samplingRatio": "0.5"}}, False),
    ("tracing-ratio-1", {"spec.observability.tracing": {"samplingRatio": 1}}, True),
    (
        "tracing-endpoint-no-scheme",
        {"spec.observability.tracing": {"endpoint": "otel:4317"}},
        False,
    ),
    (
        "tracing-ui-url",
        {"spec.observability.tracing": {"endpoint": COLLECTOR, "uiUrl": JAEGER_UI}},
        True,
    ),
    ("tracing-ui-url-no-endpoint", {"spec.observability.tracing": {"uiUrl": JAEGER_UI}}, False),
    (
        "tracing-ui-url-no-placeholder",
        {"spec.observability.tracing": {"endpoint": COLLECTOR, "uiUrl": "https://jaeger/trace/"}},
        False,
    ),
    (
        "tracing-ui-url-not-http",
        {"spec.observability.tracing": {"endpoint": COLLECTOR, "uiUrl": "jaeger/{trace_id}"}},
        False,
    ),
    (
        "tracing-endpoint-other-scheme",
        {"spec.observability.tracing": {"endpoint": "grpc://otel:4317"}},
        False,
    ),
    (
        "tracing-endpoint-space",
        {"spec.observability.tracing": {"endpoint": "http://otel :4317"}},
        False,
    ),
    ("tracing-protocol-unknown", {"spec.observability.tracing": {"protocol": "http/json"}}, False),
    ("tracing-args", {"spec.engineArgs": ["--otlp-traces-endpoint", COLLECTOR]}, False),
    ("tracing-args-detailed", {"spec.engineArgs": ["--collect-detailed-traces=all"]}, False),
    *(
        (f"env-{name.lower()}", {"spec.env": [{"name": name, "value": "mine"}]}, False)
        for name in sorted(TRACING_VARIABLES)
    ),
    ("image", {"spec.image": "registry.example/vllm-kimi@sha256:" + "a" * 64}, True),
    ("name-uppercase", {"metadata.name": "K3"}, False),
    ("name-too-long", {"metadata.name": "k" * 41}, False),
    ("name-digit-first", {"metadata.name": "3k"}, False),
    ("spec-missing", {"spec": DELETE}, False),
    ("nulls-dropped", {"spec.image": None, "spec.decode": None}, True),
]


def _for_prefill(edits: dict[str, Any]) -> dict[str, Any] | None:
    """A refused spec.engineArgs or spec.env alone, as the prefill role's own: refused there too
    (the prefill lists get every rule of the shared ones)."""
    if len(edits) != 1:
        return None
    ((key, value),) = edits.items()
    if key == "spec.engineArgs" and isinstance(value, list):
        return prefill(engineArgs=value)
    if key == "spec.env" and isinstance(value, list):
        return prefill(env=value)
    return None


CORPUS += [
    (f"prefill-as-{name}", mirrored, False)
    for name, edits, valid in list(CORPUS)
    if not valid and (mirrored := _for_prefill(edits)) is not None
]


# Refused by vLLM's parser, which the operator and `validate` run on engineArgs; CEL sees list items
# one by one, not an option with the value after it, so the CRD accepts these (docs/rules.md).
PARSER_ONLY: list[tuple[str, list[str]]] = [
    ("args-bad-int", ["--max-num-batched-tokens", "abc"]),
    ("args-bad-float", ["--cpu-offload-gb", "1.5x"]),
    ("args-bad-choice", ["--dtype", "bf16"]),
    ("args-bad-json", ["--override-generation-config", "{temperature: 0}"]),
    ("args-missing-value", ["--seed"]),
    ("args-flag-with-value", ["--trust-remote-code=yes"]),
    ("args-stray-value", ["--trust-remote-code", "yes"]),
]
