"""The weights cache of a Hugging Face source (docs/weights.md): a Job that resolves the revision
to a commit once, then a claim and a download Job shared by every deployment of the same
(repository, commit, files) in the namespace. Serving pods mount the claim read-only.

The resolve Job belongs to one deployment (controller reference, pruned once resolved). The claim
and the download Job are named from the cache's key, carry no deployment's labels, and get a
non-controller ownerReference from each deployment using them (reconcile/, caches.py). The
namespace's compile-cache claim (builders/lifecycle.py) is shared the same way.
"""

import hashlib
import math
import re
from collections.abc import Iterator
from typing import Any, Literal

from kimi_operator.api.spec import HuggingFaceSource, KimiDeployment
from kimi_operator.api.status import WeightsStatus
from kimi_operator.builders.lifecycle import SHARED_CLAIM
from kimi_operator.builders.meta import APP_NAME, MANAGER, metadata
from kimi_operator.builders.pod import CONTAINER_SECURITY

Role = Literal["model", "draft"]
CACHE_COMPONENT = "weights-cache"
CACHE_LABEL = "kimi-operator.io/weights-cache"
# The repository@commit a cache holds, on its claim and Job.
WEIGHTS_ANNOTATION = "kimi-operator.io/weights"
# Set on a claim once a deployment asked to keep it: nobody owns it from then on.
RETAIN_ANNOTATION = "kimi-operator.io/retain"
# What Kubernetes' Job controller labels a Job's pods with.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CACHE_DIR = "/weights"
TERMINATION_LOG = "/dev/termination-log"
# A killed or failed download pod is retried this often; each attempt continues where the last
# one stopped (the downloader resumes), so a few suffice.
BACKOFF_LIMIT = 3
# Headroom over the files' total: partial files of a resumed attempt, filesystem overhead.
HEADROOM_FRACTION, HEADROOM_BYTES = 0.05, 1 << 30
JOB_RESOURCES = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}


def hf_sources(kd: KimiDeployment) -> Iterator[tuple[Role, HuggingFaceSource]]:
    """The deployment's Hugging Face sources: the model's, then the draft's."""
    spec = kd.spec
    if spec.model.source.huggingface is not None:
        yield "model", spec.model.source.huggingface
    if spec.speculative is not None and spec.speculative.draft_source.huggingface is not None:
        yield "draft", spec.speculative.draft_source.huggingface


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def cache_name(source: HuggingFaceSource, commit: str) -> str:
    """The claim and download Job of (repository, commit, files): readable, unique per key."""
    slug = re.sub(r"[^a-z0-9]+", "-", source.repo.split("/")[-1].lower()).strip("-")[:30]
    key = _digest(source.repo, commit, *source.cache.files)[:10]
    return f"weights-{slug.rstrip('-') or 'repo'}-{key}"


def resolve_job_name(kd: KimiDeployment, role: Role, source: HuggingFaceSource) -> str:
    """Per deployment, role and (repository, revision): a new revision gets a new Job."""
    return f"{kd.metadata.name}-resolve-{role}-{_digest(source.repo, source.revision)[:6]}"


def claim_size(total_bytes: int) -> str:
    """The default size: the files' total plus headroom, in whole GiB."""
    wanted = total_bytes * (1 + HEADROOM_FRACTION) + HEADROOM_BYTES
    return f"{math.ceil(wanted / (1 << 30))}Gi"


def _downloader_args(source: HuggingFaceSource) -> list[str]:
    args = ["--repo", source.repo, "--termination-log", TERMINATION_LOG]
    for pattern in source.cache.files:
        args += ["--include", pattern]
    return args


def _job(
    kd: KimiDeployment,
    meta: dict[str, Any],
    source: HuggingFaceSource,
    image: str,
    *,
    args: list[str],
    claim: str | None,
) -> dict[str, Any]:
    """A Job running the downloader once (retried with resumes); the token only here."""
    container: dict[str, Any] = {
        "name": "download",
        "image": image,
        "command": ["python3", "-m", "kimi_kernels.weights"],
        "args": args,
        "resources": JOB_RESOURCES,
        "terminationMessagePath": TERMINATION_LOG,
        "securityContext": dict(CONTAINER_SECURITY),
    }
    token = source.token_secret_ref
    if token is not None:
        ref = {"name": token.name, "key": token.key}
        container["env"] = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}}]
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [container],
    }
    if claim is not None:
        container["volumeMounts"] = [{"name": "weights", "mountPath": CACHE_DIR}]
        pod["volumes"] = [{"name": "weights", "persistentVolumeClaim": {"claimName": claim}}]
    if kd.spec.image_pull_secrets:
        pod["imagePullSecrets"] = [s.model_dump() for s in kd.spec.image_pull_secrets]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            # Not the deployment's labels: its Service, PodMonitor and disruption budget select
            # by those.
            "template": {"metadata": {"labels": _pod_labels(meta)}, "spec": pod},
        },
    }


def _pod_labels(meta: dict[str, Any]) -> dict[str, str]:
    keep = ("app.kubernetes.io/managed-by", "app.kubernetes.io/component", CACHE_LABEL)
    return {key: value for key, value in meta["labels"].items() if key in keep}


def resolve_job(
    kd: KimiDeployment, role: Role, source: HuggingFaceSource, image: str
) -> dict[str, Any]:
    """Resolves the revision and sizes the files (`--plan`): its pod's termination message
    carries the commit and the total, read by the operator. No volume: it writes nothing."""
    args = [*_downloader_args(source), "--revision", source.revision, "--plan"]
    meta = metadata(kd, resolve_job_name(kd, role, source), "weights-resolve")
    return _job(kd, meta, source, image, args=args, claim=None)


def _shared_metadata(kd: KimiDeployment, name: str) -> dict[str, Any]:
    """A shared cache's: no deployment's labels, and one selector (CACHE_COMPONENT) for all."""
    return {
        "name": name,
        "namespace": kd.metadata.namespace,
        "labels": {
            "app.kubernetes.io/name": APP_NAME,
            "app.kubernetes.io/managed-by": MANAGER,
            "app.kubernetes.io/component": CACHE_COMPONENT,
            CACHE_LABEL: name,
        },
    }


def _cache_metadata(kd: KimiDeployment, name: str, resolved: WeightsStatus) -> dict[str, Any]:
    annotations = {WEIGHTS_ANNOTATION: f"{resolved.repo}@{resolved.commit}"}
    return {**_shared_metadata(kd, name), "annotations": annotations}


def cache_claim(
    kd: KimiDeployment, source: HuggingFaceSource, resolved: WeightsStatus
) -> dict[str, Any]:
    cache = source.cache
    spec: dict[str, Any] = {
        "accessModes": [cache.access_mode],
        "resources": {"requests": {"storage": cache.size or claim_size(resolved.bytes)}},
    }
    if cache.storage_class_name:
        spec["storageClassName"] = cache.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _cache_metadata(kd, resolved.claim_name, resolved),
        "spec": spec,
    }


def compile_cache_claim(kd: KimiDeployment) -> dict[str, Any] | None:
    """The namespace's compile-cache claim, when the spec wants the operator's: created by the
    first deployment that needs it, shared like a weights cache; None otherwise."""
    cache = kd.spec.serving.compile_cache
    if cache.volume != "Shared" or cache.claim_name:
        return None
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": cache.size}},
    }
    if cache.storage_class_name:
        spec["storageClassName"] = cache.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _shared_metadata(kd, SHARED_CLAIM),
        "spec": spec,
    }


def download_job(
    kd: KimiDeployment, source: HuggingFaceSource, resolved: WeightsStatus, image: str
) -> dict[str, Any]:
    """Fills the claim with exactly the resolved commit, verified and sealed by a manifest."""
    args = [*_downloader_args(source), "--revision", resolved.commit, "--dest", CACHE_DIR]
    meta = _cache_metadata(kd, resolved.claim_name, resolved)
    return _job(kd, meta, source, image, args=args, claim=resolved.claim_name)
