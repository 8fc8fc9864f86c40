"""What a TP group's pods need to start warm and to leave without dropping a request
(docs/group-lifecycle.md): the compile-cache volume and the variables that point every cache
under it, the weight-loading flags, and the drain on the way out.

The caches' folder on the volume is keyed by the serving image and the weights: pods that share
it run the same code on the same checkpoint. Inside it vLLM keys its own compile cache by a hash
of its configuration, code and `VLLM_*` environment (vllm/envs.py, `compile_factors`), and its
start-up plan by that hash and the GPU (vllm/v1/worker/startup_plan.py); TorchInductor, Triton,
DeepGEMM and the CuTe DSL key their artifacts by their own inputs. So a setting vLLM hashes
(VLLM_ENGINE_READY_TIMEOUT_S among them) never makes a pod load another's graphs: it misses.

The start-up plan is the exception: what a saved plan applies (the KV cache's size in bytes) was
measured under settings vLLM's fingerprint of it leaves out, so those settings are in the
folder's key too (`plan_factors`), and a plan is only found by a pod that would measure the same.
"""

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from kimi_operator.api.lifecycle import CACHE_DIRS, STARTUP_PLAN_ENV
from kimi_operator.api.spec import KimiDeployment, KvCacheSpec, ServingSpec, WeightSource
from kimi_operator.api.vllm_parse import destinations
from kimi_operator.builders.disaggregation import Serving, role_engine_args, role_env

CACHE_VOLUME = "compile-cache"
CACHE_MOUNT = "/var/cache/vllm-kimi"
# The claim the operator creates in a namespace when spec.serving.compileCache names none.
SHARED_CLAIM = "kimi-compile-cache"
# Before SIGTERM the leader sleeps this long, out of the Service's endpoints (it is terminating)
# and the InferencePool's, so that no new request is sent to it while vLLM drains.
DEREGISTER_S = 10
# The termination grace beyond the drain and the sleep: vLLM's engine and workers exit.
EXIT_MARGIN_S = 30
# Variables that change what vLLM 0.33.0's memory profile measures, and so the KV cache size a
# start-up plan saves, which the plan's fingerprint (vllm/v1/worker/startup_plan.py: the config's
# compute_hash and the GPU; no environment) does not see: whether the CUDA graphs' estimate is
# taken from the KV cache (gpu_worker.py, determine_available_memory), and the allocator settings
# the profile runs under (gpu_worker.py, _scoped_allocator_max_split keeps them).
PLAN_ENV = ("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "PYTORCH_CUDA_ALLOC_CONF")
# engineArgs options vLLM 0.33.0's hash ignores (vllm/config/model.py, compute_hash) that change
# what the memory profile measures: the multimodal encoder's profile run and its weights' split.
PLAN_OPTIONS = frozenset({"skip_mm_profiling", "mm_encoder_tp_mode"})
_DEFAULT_UTILIZATION = KvCacheSpec.model_fields["gpu_memory_utilization_percent"].default


def _identity(source: WeightSource, cache: str | None) -> str:
    if source.pvc is not None:
        return f"pvc:{source.pvc.claim_name}/{source.pvc.sub_path}"
    return f"hf:{cache}"  # the weights cache's name is a digest of repository, commit and files


def cache_key(
    kd: KimiDeployment, image: str, caches: Mapping[str, str], serving: Serving = "aggregated"
) -> str:
    """The caches' folder on the volume: the same for pods running `image` on the same weights
    (`caches`: the weights cache claim of each Hugging Face source, by role) whose start-up plan
    would measure the same (`plan_factors`)."""
    parts = [image, _identity(kd.spec.model.source, caches.get("model"))]
    if kd.spec.speculative is not None:
        parts.append(_identity(kd.spec.speculative.draft_source, caches.get("draft")))
    factors = plan_factors(kd, serving)
    if factors:  # none: the folder of the operators before them
        parts.append(json.dumps(factors, sort_keys=True))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def plan_factors(kd: KimiDeployment, serving: Serving) -> dict[str, Any]:
    """What the KV cache size a vLLM 0.33.0 start-up plan applies depends on, that the plan's
    fingerprint leaves out, where not at the operator's defaults: `--gpu-memory-utilization`
    (vllm/config/cache.py ignores it in compute_hash; the plan's size is the requested memory,
    total times utilization, less what the profile measured), the role's `PLAN_ENV` variables, and
    the role's engineArgs when they set a `PLAN_OPTIONS` option."""
    factors: dict[str, Any] = {}
    utilization = kd.spec.kv_cache.gpu_memory_utilization_percent
    if utilization != _DEFAULT_UTILIZATION:
        factors["gpu_memory_utilization_percent"] = utilization
    env = [e for e in role_env(kd, serving) if e["name"] in PLAN_ENV]
    if env:
        factors["env"] = env
    engine_args = role_engine_args(kd.spec, serving)
    if destinations(engine_args) & PLAN_OPTIONS:
        factors["engine_args"] = engine_args
    return factors


def cache_volume(
    kd: KimiDeployment, key: str
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]] | None:
    """(volume, mount, env) of the compile caches; None with compileCache.volume Disabled."""
    cache = kd.spec.serving.compile_cache
    if cache.volume == "Disabled":
        return None
    if cache.volume == "HostPath":
        path = f"{cache.host_path.rstrip('/')}/{key}"
        volume = {"name": CACHE_VOLUME, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}
        mount = {"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT}
    else:
        claim = {"claimName": cache.claim_name or SHARED_CLAIM}
        volume = {"name": CACHE_VOLUME, "persistentVolumeClaim": claim}
        mount = {"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT, "subPath": key}
    return volume, mount, cache_env(CACHE_MOUNT)


def cache_env(root: str) -> list[dict[str, Any]]:
    """Every cache under `root`, and vLLM's start-up plan on (also what the CPU measurement
    gives its server: tests/vllm/test_group_lifecycle.py)."""
    env = [{"name": name, "value": f"{root}/{folder}"} for name, folder in CACHE_DIRS]
    return [*env, {"name": STARTUP_PLAN_ENV, "value": "1"}]


def load_flags(serving: ServingSpec) -> list[str]:
    """How vLLM reads the weights; nothing for vLLM's defaults."""
    flags = [] if serving.load_format == "auto" else ["--load-format", serving.load_format]
    if serving.safetensors_load_strategy is not None:
        flags += ["--safetensors-load-strategy", serving.safetensors_load_strategy]
    return flags


def drain_flags(serving: ServingSpec) -> list[str]:
    """vLLM 0.33.0 on SIGTERM: with --shutdown-timeout 0 it aborts the requests in flight, with
    N > 0 it waits up to N seconds for them (vllm/entrypoints/launchers/launcher.py,
    handle_shutdown: mode abort or drain)."""
    return ["--shutdown-timeout", str(serving.drain_seconds)]


def termination_grace_s(serving: ServingSpec) -> int:
    """The pods' terminationGracePeriodSeconds: the leader's sleep out of routing, its drain,
    and the engine's exit; past it the kubelet kills."""
    return DEREGISTER_S + serving.drain_seconds + EXIT_MARGIN_S


def pre_stop() -> dict[str, Any]:
    """The leader's preStop: a sleep while the endpoints controllers take it out of routing."""
    return {"preStop": {"sleep": {"seconds": DEREGISTER_S}}}
