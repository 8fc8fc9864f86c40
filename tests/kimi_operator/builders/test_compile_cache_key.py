"""The environment part of vLLM's compile-cache key, as vLLM 0.33.0 computes it for the pods the
operator renders (vllm/envs.py `compile_factors`, hashed by vllm/config/utils.py `hash_factors`
into the `torch_aot_compile/<hash>` folder). Every pod of a role must compute the same key, or each
pod compiles for itself on the shared volume; a setting vLLM hashes must change it (a miss, never
another configuration's graphs). tests/vllm/test_group_lifecycle.py shows the folder on a real
server."""

import inspect
import os
from collections.abc import Iterator
from typing import Any

import pytest
from vllm.config import CacheConfig, ModelConfig, VllmConfig
from vllm.config.utils import hash_factors
from vllm.envs import compile_factors
from vllm.v1.worker.startup_plan import compute_plan_fingerprint

from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.builders.lifecycle import CACHE_MOUNT, PLAN_OPTIONS
from tests.kimi_operator.builders.cases import CASES
from tests.support.specs import edited

ROLE_LABEL = "llm-d.ai/role"


def _vllm_containers(
    doc: dict[str, Any], defaults: OperatorDefaults
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(role, vllm container) of every pod template: leaders and workers of every group."""
    report = check_document(doc)
    assert report.deployment is not None, [str(p) for p in report.problems]
    for child in build_children(report.deployment, defaults):
        if child["kind"] != "LeaderWorkerSet":
            continue
        template = child["spec"]["leaderWorkerTemplate"]
        for role in ("leaderTemplate", "workerTemplate"):
            if role not in template:
                continue
            labels = template[role].get("metadata", {}).get("labels", {})
            for container in template[role]["spec"]["containers"]:
                if container["name"] == "vllm":
                    yield labels.get(ROLE_LABEL, "serving"), container


def _key(container: dict[str, Any], pod: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The key as a process with the container's environment computes it; a variable the kubelet
    fills per pod (`valueFrom`: the pod's IP, name) gets a value of `pod`'s own."""
    with monkeypatch.context() as env:
        for name in [name for name in list(os.environ) if name.startswith("VLLM_")]:
            env.delenv(name)
        for variable in container["env"]:
            env.setenv(variable["name"], variable.get("value", f"{variable['name']}-of-{pod}"))
        return str(hash_factors(compile_factors()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_pod_of_a_role_computes_one_key(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    doc, defaults = CASES[case]
    keys: dict[str, set[str]] = {}
    containers = list(_vllm_containers(doc, defaults))
    assert containers, case
    for index, (role, container) in enumerate(containers):
        keys.setdefault(role, set()).add(_key(container, f"pod-{index}", monkeypatch))
    assert {role: len(found) for role, found in keys.items()} == dict.fromkeys(keys, 1)


def test_pointing_the_caches_at_the_volume_is_not_in_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cache variables (VLLM_CACHE_ROOT, the start-up plan's switch, the autotune folder) are
    left out of vLLM's key: a deployment with the caches on its volume compiles what one without
    them does."""
    (_, cached), *_ = _vllm_containers(edited({}), OperatorDefaults())
    disabled = edited({"spec.serving.compileCache.volume": "Disabled"})
    (_, uncached), *_ = _vllm_containers(disabled, OperatorDefaults())
    assert _value(cached, "VLLM_CACHE_ROOT") is not None
    assert _value(uncached, "VLLM_CACHE_ROOT") is None
    assert _key(cached, "a", monkeypatch) == _key(uncached, "a", monkeypatch)


def test_a_changed_start_up_budget_misses(monkeypatch: pytest.MonkeyPatch) -> None:
    """VLLM_ENGINE_READY_TIMEOUT_S, derived from spec.serving.startupTimeoutMinutes, is hashed:
    changing the budget costs one compile (docs/group-lifecycle.md), and never loads graphs built
    for another configuration."""
    (_, default), *_ = _vllm_containers(edited({}), OperatorDefaults())
    budget = edited({"spec.serving.startupTimeoutMinutes": 91})
    (_, changed), *_ = _vllm_containers(budget, OperatorDefaults())
    assert _key(default, "a", monkeypatch) != _key(changed, "a", monkeypatch)


def _value(container: dict[str, Any], name: str) -> str | None:
    return next((e.get("value") for e in container["env"] if e["name"] == name), None)


def _plan_fingerprint(container: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    """vLLM 0.33.0's start-up plan fingerprint (vllm/v1/worker/startup_plan.py) for the rendered
    container: its --gpu-memory-utilization in the cache config, its environment set."""
    args = container["args"]
    utilization = float(args[args.index("--gpu-memory-utilization") + 1])
    with monkeypatch.context() as env:
        for variable in container["env"]:
            env.setenv(variable["name"], variable.get("value", ""))
        config = VllmConfig(cache_config=CacheConfig(gpu_memory_utilization=utilization))
        return str(compute_plan_fingerprint(config, 0, 8))


def _folder(doc: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The compile-cache folder (sub-path) of the first vLLM container, and the container."""
    _, container = next(_vllm_containers(doc, OperatorDefaults()))
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == CACHE_MOUNT]
    return str(mount["subPath"]), container


@pytest.mark.parametrize(
    "edit",
    [
        {"spec.kvCache.gpuMemoryUtilizationPercent": 80},
        {"spec.env": [{"name": "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "value": "0"}]},
        {"spec.env": [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}]},
    ],
    ids=["utilization", "cuda-graph-estimate", "allocator"],
)
def test_what_a_start_up_plan_applies_is_in_the_folder_key(
    edit: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug once: a saved start-up plan sets the KV cache's size, and vLLM's fingerprint of the
    plan leaves out what that size was measured under (the memory utilization, vllm/config/
    cache.py's ignored factors; the environment), so an edit of spec.kvCache.gpuMemoryUtilization
    Percent did nothing once a plan existed (docs/group-lifecycle.md). Where vLLM would reuse
    the plan, the pod now has another folder, with no plan."""
    folder, container = _folder(edited({}))
    changed_folder, changed = _folder(edited(edit))
    plans = {_plan_fingerprint(c, monkeypatch) for c in (container, changed)}
    assert len(plans) == 1  # vLLM's own key misses each of these...
    assert changed_folder != folder  # ...the folder does not


@pytest.mark.parametrize("option", ["--skip-mm-profiling", "--mm-encoder-tp-mode=data"])
def test_engine_args_that_change_the_profile_are_in_the_folder_key(option: str) -> None:
    """Options vLLM 0.33.0's model config leaves out of its hash (so out of the plan's
    fingerprint) that change what the memory profile measures."""
    ignored = inspect.getsource(ModelConfig.compute_hash)
    assert all(f'"{dest}"' in ignored for dest in PLAN_OPTIONS)
    folder, _ = _folder(edited({}))
    assert _folder(edited({"spec.engineArgs": [option]}))[0] != folder


def test_a_setting_vllm_hashes_keeps_the_folder() -> None:
    """What vLLM's fingerprint does see (here the decode batch, its scheduler config) needs no
    folder of its own: the compiled kernels stay shared."""
    folder, _ = _folder(edited({}))
    assert _folder(edited({"spec.decode.maxNumSeqs": 32}))[0] == folder
