"""Pod templates for the leader (node rank 0, serves HTTP) and the workers of one TP group."""

import copy
from collections.abc import Mapping
from typing import Any, Literal

from kimi_operator.api.constants import ENGINE_READY_MARGIN_S, METRICS_PORT
from kimi_operator.api.host_memory import PodMemory, pod_memory, quantity_text
from kimi_operator.api.owned_env import FAST_PATH_ENV, owned
from kimi_operator.api.spec import KimiDeployment, ServingSpec, TracingSpec, WeightSource
from kimi_operator.builders.disaggregation import (
    ROLE_LABEL,
    Serving,
    handover_env,
    role_env,
    routing_sidecar,
    side_channel_port,
)
from kimi_operator.builders.lifecycle import (
    cache_key,
    cache_volume,
    pre_stop,
    termination_grace_s,
)
from kimi_operator.builders.meta import ROUTABLE, labels
from kimi_operator.builders.tracing import traced_sidecar, vllm_env
from kimi_operator.builders.vllm_args import (
    DRAFT_DIR,
    HTTP_PORT,
    KV_EVENTS_PORT,
    MODEL_DIR,
    http_port,
    leader_args,
    worker_args,
)

Role = Literal["leader", "worker"]
CHANNEL_CLAIM = "compute-domain-channel"
# vLLM and the preflight run no setuid programs: no_new_privs costs nothing (docs/security.md).
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False}
# The startup probe's window is spec.serving.startupTimeoutMinutes, in probes this far apart.
STARTUP_PERIOD_S = 30


def _weight_volume(
    name: str, source: WeightSource, mount_dir: str, cache: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A read-only mount of the source's claim: the spec's own, or the weights cache (`cache`)
    that the download Job filled."""
    claim = source.pvc.claim_name if source.pvc is not None else cache
    if claim is None:
        raise ValueError(f"{name}: a Hugging Face source needs its cache claim, not yet resolved")
    volume = {"name": name, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
    mount: dict[str, Any] = {"name": name, "mountPath": mount_dir, "readOnly": True}
    if source.pvc is not None and source.pvc.sub_path:
        mount["subPath"] = source.pvc.sub_path
    return volume, mount


def _volumes(
    kd: KimiDeployment, caches: Mapping[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    spec = kd.spec
    shm = {"medium": "Memory", "sizeLimit": _shared_memory(kd)}
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": shm}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    sources = [("weights", "model", spec.model.source, MODEL_DIR)]
    if spec.speculative is not None:
        sources.append(("draft-weights", "draft", spec.speculative.draft_source, DRAFT_DIR))
    for name, role, source, mount_dir in sources:
        volume, mount = _weight_volume(name, source, mount_dir, caches.get(role))
        volumes.append(volume)
        mounts.append(mount)
    return volumes, mounts


def _set(*names: str) -> list[dict[str, Any]]:
    return [{"name": name, "value": owned(name).value} for name in names]


def _fast_path_env(with_domain: bool) -> list[dict[str, Any]]:
    """FAST_PATH_ENV, with NCCL's multi-node NVLink on only where a ComputeDomain gives the pods
    an IMEX channel (without one NCCL's MNNVL setup fails)."""
    env = _set(*FAST_PATH_ENV)
    if not with_domain:
        env = [e | {"value": "0"} if e["name"] == "NCCL_MNNVL_ENABLE" else e for e in env]
    return env


def startup_probe_failures(serving: ServingSpec) -> int:
    """Failed probes the leader's startup probe allows: the start-up budget."""
    return serving.startup_timeout_minutes * 60 // STARTUP_PERIOD_S


def engine_ready_timeout_s(serving: ServingSpec) -> int:
    """vLLM's wait for its engines (VLLM_ENGINE_READY_TIMEOUT_S, 600 s unset): the start-up budget
    less the API server's own start around it, so that vLLM, not the probe, reports a slow
    engine; and never the 600 s that ends a cold start of Kimi K3 half way (docs/serving.md)."""
    return serving.startup_timeout_minutes * 60 - ENGINE_READY_MARGIN_S


def _env(
    kd: KimiDeployment,
    with_domain: bool,
    serving: Serving,
    cache_env: list[dict[str, Any]],
    tracing: TracingSpec | None,
) -> list[dict[str, Any]]:
    """The operator's variables (api/owned_env.py), then the user's for the role: an
    operator-owned name the user also lists (with a value the rules accept as the same) is
    rendered once. No Hugging Face token: the weights come from a claim (the download Job alone
    gets the token)."""
    ready = {
        "name": "VLLM_ENGINE_READY_TIMEOUT_S",
        "value": str(engine_ready_timeout_s(kd.spec.serving)),
    }
    env = [*_fast_path_env(with_domain), *_set("KIMI_METRICS_PORT"), ready, *cache_env]
    env += handover_env(serving) + vllm_env(kd, tracing, serving)
    rendered = {e["name"] for e in env}
    return env + [e for e in role_env(kd, serving) if e["name"] not in rendered]


def _memory(kd: KimiDeployment) -> PodMemory:
    spec = kd.spec
    offload = spec.kv_cache.cpu_offload
    per_gpu = offload.per_gpu if offload is not None else None
    return pod_memory(
        spec.resources.memory, spec.shared_memory, per_gpu, spec.gpus, spec.gpus_per_node
    )


def _shared_memory(kd: KimiDeployment) -> str:
    """spec.sharedMemory, grown by the CPU KV tier (api/host_memory.py)."""
    if kd.spec.kv_cache.cpu_offload is None:
        return kd.spec.shared_memory
    return quantity_text(_memory(kd).shared_memory)


def _resources(kd: KimiDeployment) -> dict[str, Any]:
    """Real requests (Burstable; Guaranteed with `guaranteed`), memory bounded; the CPU KV tier
    grows the memory (api/host_memory.py). Quantities as strings: the API server returns them so,
    and drift checks compare equal."""
    wanted = kd.spec.resources
    request, limit = wanted.memory, wanted.memory
    if kd.spec.kv_cache.cpu_offload is not None:
        memory = _memory(kd)
        request, limit = quantity_text(memory.request), quantity_text(memory.limit)
    requests = {
        "cpu": wanted.cpu,
        "memory": request,
        "ephemeral-storage": wanted.ephemeral_storage,
    }
    limits = {"nvidia.com/gpu": str(kd.spec.gpus_per_node), "memory": limit}
    if wanted.guaranteed:
        limits["cpu"] = wanted.cpu
    return {"requests": requests, "limits": limits}


def _health_probe(**timing: int) -> dict[str, Any]:
    return {"httpGet": {"path": "/health", "port": "http"}, **timing}


def preflight(
    kd: KimiDeployment, image: str, resources: dict[str, Any], *, expect_imex: bool
) -> dict[str, Any]:
    """The node preflight of kimi_kernels, before tens of minutes of weight loading: the GPU
    family, driver, IMEX channel, multicast memory and (for the latency-specialized path) what
    vLLM's fast path needs of the image and GPU: its lazy imports, the CuTe DSL, its MLA attention
    cores (docs/preflight.md). Same GPUs and claim as the serving container."""
    args = ["--expect-imex"] if expect_imex else []
    if kd.spec.decode.backend != "latency_specialized":
        args.append("--no-kernels")  # stock decode never enters the fast path
    return {
        "name": "preflight",
        "image": image,
        "command": ["python3", "-m", "kimi_kernels.preflight"],
        "args": args,
        "env": _fast_path_env(expect_imex),
        "resources": resources,
        "securityContext": dict(CONTAINER_SECURITY),
    }


def pod_template(
    kd: KimiDeployment,
    role: Role,
    *,
    image: str,
    channel_claim: str | None,
    no_custom_all_reduce: bool,
    caches: Mapping[str, str],
    serving: Serving,
    sidecar_image: str,
    tracing: TracingSpec | None,
) -> dict[str, Any]:
    """`caches`: the weights cache claim of each Hugging Face source, by role (model, draft).
    `serving`: the group's part with spec.prefill (disaggregation.py), whose decode leaders run
    `sidecar_image`. `tracing`: the one the deployment runs with (builders/tracing.py)."""
    spec = kd.spec
    volumes, mounts = _volumes(kd, caches)
    compile_cache = cache_volume(kd, cache_key(kd, image, caches, serving))
    cache_env: list[dict[str, Any]] = []
    if compile_cache is not None:
        volumes.append(compile_cache[0])
        mounts.append(compile_cache[1])
        cache_env = compile_cache[2]
    resources = _resources(kd)
    args = (leader_args if role == "leader" else worker_args)(
        spec, no_custom_all_reduce, serving, tracing
    )
    ports = [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}]
    container: dict[str, Any] = {
        "name": "vllm",
        "image": image,
        "command": ["vllm", "serve"],
        "args": args,
        "env": _env(kd, channel_claim is not None, serving, cache_env, tracing),
        "ports": ports,
        "resources": resources,
        "volumeMounts": mounts,
        "securityContext": dict(CONTAINER_SECURITY),
    }
    if role == "leader":
        ports.insert(0, {"name": "http", "containerPort": http_port(serving), "protocol": "TCP"})
        if serving != "aggregated":
            ports.append(side_channel_port())
        if spec.routing.prefix_scoring == "Precise":
            ports.append({"name": "kv-events", "containerPort": KV_EVENTS_PORT, "protocol": "TCP"})
        container["readinessProbe"] = _health_probe(periodSeconds=10, failureThreshold=3)
        container["startupProbe"] = _health_probe(
            periodSeconds=STARTUP_PERIOD_S, failureThreshold=startup_probe_failures(spec.serving)
        )
        container["lifecycle"] = pre_stop()
    # vLLM never talks to the Kubernetes API: no service account token in a pod that runs the
    # user's image (docs/security.md).
    pod: dict[str, Any] = {
        "terminationGracePeriodSeconds": termination_grace_s(spec.serving),
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": volumes,
    }
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [s.model_dump() for s in spec.image_pull_secrets]
    if channel_claim is not None:
        resources["claims"] = [{"name": CHANNEL_CLAIM}]
        pod["resourceClaims"] = [
            {"name": CHANNEL_CLAIM, "resourceClaimTemplateName": channel_claim}
        ]
    checks = preflight(kd, image, copy.deepcopy(resources), expect_imex=channel_claim is not None)
    init = [checks]
    if role == "leader" and serving == "decode":
        sidecar = routing_sidecar(sidecar_image, HTTP_PORT, CONTAINER_SECURITY)
        init.append(traced_sidecar(sidecar, kd, tracing))
    pod = {"initContainers": init, **pod}
    scheduling = spec.scheduling
    if scheduling.node_selector:
        pod["nodeSelector"] = dict(scheduling.node_selector)
    if scheduling.tolerations:
        # Empty strings left out, as the API server returns them (omitempty): else they would
        # look like drift on every resync.
        pod["tolerations"] = [
            {k: v for k, v in t.model_dump(exclude_none=True).items() if v != ""}
            for t in scheduling.tolerations
        ]
    if scheduling.priority_class_name:
        pod["priorityClassName"] = scheduling.priority_class_name
    extra = spec.pod_metadata
    meta: dict[str, Any] = {"labels": dict(extra.labels) | labels(kd, role) | ROUTABLE}
    if serving != "aggregated":
        meta["labels"][ROLE_LABEL] = serving
    if extra.annotations:
        meta["annotations"] = dict(extra.annotations)
    return {"metadata": meta, "spec": pod}
