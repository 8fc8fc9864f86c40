"""The weights cache's children (builders/weights.py): the resolve Job, the claim and the download
Job of a Hugging Face source, and the serving pods that mount the claim."""

from typing import Any

import pytest

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.api.status import WeightsStatus
from kimi_operator.api.validation import check_document
from kimi_operator.builders import (
    OperatorDefaults,
    build_caches,
    build_children,
    preview_weights,
)
from kimi_operator.builders.lifecycle import SHARED_CLAIM
from kimi_operator.builders.weights import cache_name, claim_size, resolve_job_name
from tests.support.pods import pod_specs
from tests.support.specs import edited

TOKEN_REF = {"name": "hf", "key": "token"}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def deployment(**huggingface: Any) -> KimiDeployment:
    source = {"repo": "moonshotai/Kimi-K3", **huggingface}
    report = check_document(edited({"spec.model.source": {"huggingface": source}}))
    assert report.deployment is not None, [str(p) for p in report.problems]
    return report.deployment


def resolved(kd: KimiDeployment, size: int = 5 << 30) -> dict[str, WeightsStatus]:
    source = kd.spec.model.source.huggingface
    assert source is not None
    return {
        "model": WeightsStatus(
            role="model",
            repo=source.repo,
            revision=source.revision,
            commit=COMMIT,
            bytes=size,
            claim_name=cache_name(source, COMMIT),
        )
    }


def weights_caches(kd: KimiDeployment, weights: dict[str, WeightsStatus]) -> list[dict[str, Any]]:
    """build_caches but the namespace's compile-cache claim (tests/kimi_operator/builders/
    test_lifecycle.py)."""
    built = build_caches(kd, OperatorDefaults(), weights)
    return [c for c in built if c["metadata"]["name"] != SHARED_CLAIM]


def of_kind(children: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [c for c in children if c["kind"] == kind]


def test_unresolved_a_resolve_job_and_no_group() -> None:
    kd = deployment(revision="v1", tokenSecretRef=TOKEN_REF)
    children = build_children(kd, OperatorDefaults(), weights={})
    assert of_kind(children, "LeaderWorkerSet") == []
    assert of_kind(children, "ComputeDomain") == []
    (job,) = of_kind(children, "Job")
    source = kd.spec.model.source.huggingface
    assert source is not None
    assert job["metadata"]["name"] == resolve_job_name(kd, "model", source)
    assert job["metadata"]["labels"]["app.kubernetes.io/instance"] == kd.metadata.name
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][-3:] == ["--revision", "v1", "--plan"]
    assert "volumes" not in pod  # it only resolves: nothing to write
    assert container["env"] == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": TOKEN_REF}}]
    assert pod["automountServiceAccountToken"] is False  # no API access
    # Not selected by the deployment's Service, PodMonitor or disruption budget.
    assert "app.kubernetes.io/instance" not in job["spec"]["template"]["metadata"]["labels"]


def test_resolved_claim_and_download_job_of_exactly_that_commit() -> None:
    kd = deployment(revision="main", tokenSecretRef=TOKEN_REF, cache={"storageClassName": "cephfs"})
    weights = resolved(kd)
    claim, job = weights_caches(kd, weights)
    name = weights["model"].claim_name
    assert (claim["kind"], claim["metadata"]["name"]) == ("PersistentVolumeClaim", name)
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "7Gi"}},  # 5 GiB x 1.05 + 1 GiB, rounded up
        "storageClassName": "cephfs",
    }
    assert (job["kind"], job["metadata"]["name"]) == ("Job", name)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[args.index("--revision") + 1] == COMMIT  # never the branch
    assert args[args.index("--dest") + 1] == "/weights"
    assert pod["volumes"] == [{"name": "weights", "persistentVolumeClaim": {"claimName": name}}]
    assert pod["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] >= 1  # a killed attempt is resumed by the next
    for obj in (claim, job):  # shared: no deployment's labels
        assert "app.kubernetes.io/instance" not in obj["metadata"]["labels"]
        assert obj["metadata"]["annotations"]["kimi-operator.io/weights"] == (
            f"moonshotai/Kimi-K3@{COMMIT}"
        )


def test_serving_pods_mount_the_claim_read_only_and_get_no_token() -> None:
    kd = deployment(tokenSecretRef=TOKEN_REF)
    weights = resolved(kd)
    children = build_children(kd, OperatorDefaults(), weights=weights)
    assert of_kind(children, "Job") == []  # resolved: no resolve Job
    specs = list(pod_specs(children))
    assert specs
    for _, pod in specs:
        volume = next(v for v in pod["volumes"] if v["name"] == "weights")
        assert volume["persistentVolumeClaim"] == {
            "claimName": weights["model"].claim_name,
            "readOnly": True,
        }
        (vllm,) = pod["containers"]
        mount = next(m for m in vllm["volumeMounts"] if m["name"] == "weights")
        assert mount == {"name": "weights", "mountPath": "/models/weights", "readOnly": True}
        assert vllm["args"][0] == "/models/weights"
        assert "--revision" not in vllm["args"]
        assert "secretKeyRef" not in str(pod)


def test_the_cache_key_is_repository_commit_and_files() -> None:
    plain = deployment().spec.model.source.huggingface
    same = deployment(revision="v2", cache={"size": "3Ti", "retain": True}).spec.model.source
    other_files = deployment(cache={"files": ["*.safetensors"]}).spec.model.source.huggingface
    assert plain is not None
    assert same.huggingface is not None
    assert other_files is not None
    assert cache_name(plain, COMMIT) == cache_name(same.huggingface, COMMIT)
    assert cache_name(plain, COMMIT) != cache_name(plain, "f" * 40)
    assert cache_name(plain, COMMIT) != cache_name(other_files, COMMIT)
    assert len(cache_name(plain, COMMIT)) <= 63


def test_given_size_and_files_are_used() -> None:
    kd = deployment(cache={"size": "3Ti", "files": ["*.safetensors", "config.json"]})
    claim, job = weights_caches(kd, resolved(kd))
    assert claim["spec"]["resources"]["requests"]["storage"] == "3Ti"
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args.count("--include") == 2
    assert args[args.index("--include") + 1] == "*.safetensors"


@pytest.mark.parametrize(("total", "size"), [(0, "1Gi"), (1 << 30, "3Gi"), (982 * 10**9, "962Gi")])
def test_default_size_has_headroom(total: int, size: str) -> None:
    assert claim_size(total) == size


def test_draft_from_hugging_face_gets_its_own_cache_and_mount() -> None:
    doc = edited(
        {
            "spec.speculative": {
                "draftSource": {"huggingface": {"repo": "moonshotai/Kimi-K3-DSpark"}}
            }
        }
    )
    report = check_document(doc)
    assert report.deployment is not None
    kd = report.deployment
    assert [c["kind"] for c in build_children(kd, OperatorDefaults(), weights={})].count("Job") == 1
    weights = preview_weights(kd)
    assert list(weights) == ["draft"]
    caches = weights_caches(kd, weights)
    assert [c["kind"] for c in caches] == ["PersistentVolumeClaim", "Job"]
    (_, pod), *_ = pod_specs(build_children(kd, OperatorDefaults(), weights=weights))
    volume = next(v for v in pod["volumes"] if v["name"] == "draft-weights")
    assert volume["persistentVolumeClaim"]["claimName"] == weights["draft"].claim_name


def test_a_pvc_source_has_no_cache() -> None:
    report = check_document(edited({}))
    assert report.deployment is not None
    kd = report.deployment
    assert preview_weights(kd) == {}
    assert weights_caches(kd, {}) == []
    assert of_kind(build_children(kd, OperatorDefaults(), weights={}), "LeaderWorkerSet")
