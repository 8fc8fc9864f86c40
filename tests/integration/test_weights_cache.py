"""The weights cache on the embedded API server, end to end (docs/weights.md).

The operator runs as the chart's ServiceAccount; the resolve and download Jobs it creates run for
real (kimi_operator.embedded.jobs): `python -m kimi_kernels.weights` against the fake hub on
127.0.0.1, each claim a local directory. LeaderWorkerSets are marked ready by the stand-in
kubelet as before.
"""

import base64
import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kimi_kernels.weights import MANIFEST
from kimi_operator import caches as weights_caches
from kimi_operator.builders.lifecycle import SHARED_CLAIM
from kimi_operator.builders.weights import RETAIN_ANNOTATION
from kimi_operator.embedded.audit import audit
from kimi_operator.embedded.faults import Fault as ApiFault
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.hub import FakeHub, Fault
from kimi_operator.embedded.jobs import SECRET, JobRunner, running
from kimi_operator.embedded.kubelet import mark_ready
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import (
    JOB,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    PERSISTENT_VOLUME_CLAIM,
    POD,
)
from kimi_operator.runner import OperatorThread
from tests.integration.conftest import metrics_of, resyncs
from tests.support.cluster import condition, sample, status_of, wait_for

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)

NS = "inference"
REPO = "moonshotai/Kimi-K3-tiny"
PRIVATE = "moonshotai/Kimi-K3-private"
TOKEN = "hf_kimiCacheProbe_5Tq8wX2mN7vB"
FILES = {
    "model-00001-of-00002.safetensors": b"\x01" * 300_000,
    "model-00002-of-00002.safetensors": b"\x02" * 200_000,
    "config.json": b'{"model_type": "kimi_k3"}',
    "tokenizer_config.json": b"{}",
    "README.md": b"# not fetched",
}
TIMEOUT_S = 60.0


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    fake = FakeHub()
    fake.push(REPO, FILES)
    fake.push(PRIVATE, FILES, token=TOKEN)
    with fake.running():
        yield fake


@pytest.fixture
def jobs(client: Client, hub: FakeHub, tmp_path: Path) -> Iterator[JobRunner]:
    with running(JobRunner(client, hub.url, tmp_path / "volumes")) as runner:
        yield runner


def deployment(name: str, repo: str = REPO, **cache: Any) -> dict[str, Any]:
    doc = sample("k3-tp8-dspark")
    doc["metadata"] = {"name": name, "namespace": NS}
    source: dict[str, Any] = {"repo": repo}
    if cache:
        source["cache"] = cache
    doc["spec"]["model"]["source"] = {"huggingface": source}
    return doc


def weights_condition(client: Client, name: str) -> dict[str, Any]:
    status = status_of(client, NS, name)
    found = [c for c in status.get("conditions", []) if c["type"] == "WeightsReady"]
    return found[0] if found else {}


def serving(client: Client, name: str) -> dict[str, Any]:
    """The deployment's status once its group is ready (marking groups ready meanwhile)."""

    def ready() -> dict[str, Any] | None:
        mark_ready(client, NS)
        status = status_of(client, NS, name)
        return status if status.get("readyReplicas") == 1 else None

    return wait_for(ready, TIMEOUT_S, f"{name} serving")


def caches(client: Client) -> list[tuple[str, str]]:
    """The weights caches (not the namespace's compile-cache claim: test_group_lifecycle.py)."""
    return sorted(
        (obj["kind"], obj["metadata"]["name"])
        for resource in (PERSISTENT_VOLUME_CLAIM, JOB)
        for obj in client.list(resource, NS)
        if obj["metadata"]["labels"].get("app.kubernetes.io/component") == "weights-cache"
        and obj["metadata"]["name"] != SHARED_CLAIM
    )


@pytest.mark.usefixtures("operator")
def test_resolved_once_downloaded_then_served_from_the_claim_read_only(
    api: EmbeddedApiServer, client: Client, hub: FakeHub, jobs: JobRunner
) -> None:
    commit = hub.repos[REPO].refs["main"]
    client.create(KIMI_DEPLOYMENT, deployment("k3"))
    status = serving(client, "k3")
    (weights,) = status["weights"]
    assert (weights["repo"], weights["revision"], weights["commit"]) == (REPO, "main", commit)
    assert weights["bytes"] == 500_000 + len(FILES["config.json"]) + 2
    assert condition(status, "WeightsReady")["status"] == "True"
    claim = weights["claimName"]
    cache = jobs.claim_dir(NS, claim)
    manifest = json.loads((cache / MANIFEST).read_text())
    assert manifest["commit"] == commit
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) == sorted(
        f for f in FILES if f != "README.md"
    )
    # The claim's default size: the listing's total plus headroom.
    pvc = client.get(PERSISTENT_VOLUME_CLAIM, NS, claim)
    assert pvc is not None
    assert pvc["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]

    # No group before the download completed: the first LeaderWorkerSet was created after the
    # download Job's last status write, and the status said so meanwhile.
    writes = api.writes()
    job_done = max(w.time for w in writes if w.path.endswith(f"/jobs/{claim}/status"))
    group_created = min(
        w.time for w in writes if w.method == "POST" and w.path.endswith("/leaderworkersets")
    )
    assert group_created > job_done
    reasons = [
        c["reason"]
        for _, s in api.status_writes()
        for c in s.get("conditions", [])
        if c["type"] == "WeightsReady"
    ]
    assert reasons[0] == "Resolving"
    assert reasons[-1] == "Downloaded"
    assert "Downloading" in reasons

    # The pods mount the claim read-only and load it from there; nothing to download.
    (group,) = client.list(LEADER_WORKER_SET, NS)
    for template in ("leaderTemplate", "workerTemplate"):
        pod = group["spec"]["leaderWorkerTemplate"][template]["spec"]
        volume = next(v for v in pod["volumes"] if v["name"] == "weights")
        assert volume["persistentVolumeClaim"] == {"claimName": claim, "readOnly": True}
        (vllm,) = pod["containers"]
        assert vllm["args"][0] == "/models/weights"
        assert "--revision" not in vllm["args"]
    # The resolve Job is gone once its answer is in the status; one download ran.
    assert caches(client) == [("Job", claim), ("PersistentVolumeClaim", claim)]
    assert [a.job for a in jobs.attempts].count(claim) == 1

    # The branch moves and the spec changes elsewhere: same commit, no new download.
    hub.push(REPO, {**FILES, "config.json": b'{"model_type": "kimi_k3", "v": 2}'})
    client.patch(KIMI_DEPLOYMENT, NS, "k3", {"spec": {"decode": {"maxNumSeqs": 4}}})
    wait_for(lambda: status_of(client, NS, "k3").get("observedGeneration") == 2, TIMEOUT_S)
    assert status_of(client, NS, "k3")["weights"] == [weights]
    assert len(jobs.attempts) == 2  # the resolve and the download, of the first generation


@pytest.mark.usefixtures("operator")
def test_two_deployments_share_one_cache_deleted_with_the_last(
    client: Client, jobs: JobRunner
) -> None:
    for name in ("a", "b"):
        client.create(KIMI_DEPLOYMENT, deployment(name))
    claims = {serving(client, name)["weights"][0]["claimName"] for name in ("a", "b")}
    (claim,) = claims
    assert caches(client) == [("Job", claim), ("PersistentVolumeClaim", claim)]
    assert [a.job for a in jobs.attempts].count(claim) == 1

    def users() -> list[str]:
        obj = client.get(PERSISTENT_VOLUME_CLAIM, NS, claim) or {"metadata": {}}
        return sorted(ref["name"] for ref in obj["metadata"].get("ownerReferences", []))

    wait_for(lambda: users() == ["a", "b"], TIMEOUT_S, "both deployments using the claim")
    assert audit(client).exact, audit(client).summary()
    client.delete(KIMI_DEPLOYMENT, NS, "a")
    wait_for(lambda: users() == ["b"], TIMEOUT_S, "the claim kept for b")
    assert caches(client) == [("Job", claim), ("PersistentVolumeClaim", claim)]
    assert audit(client).exact, audit(client).summary()
    client.delete(KIMI_DEPLOYMENT, NS, "b")
    wait_for(lambda: caches(client) == [], TIMEOUT_S, "the cache deleted with the last user")
    assert audit(client).orphans == []


@pytest.mark.usefixtures("operator", "jobs")
def test_retain_keeps_the_claim(client: Client) -> None:
    client.create(KIMI_DEPLOYMENT, deployment("kept", retain=True))
    claim = serving(client, "kept")["weights"][0]["claimName"]
    client.delete(KIMI_DEPLOYMENT, NS, "kept")
    wait_for(lambda: caches(client) == [("PersistentVolumeClaim", claim)], TIMEOUT_S, "Job gone")
    pvc = client.get(PERSISTENT_VOLUME_CLAIM, NS, claim)
    assert pvc is not None
    assert pvc["metadata"]["annotations"][RETAIN_ANNOTATION] == "true"
    assert not pvc["metadata"].get("ownerReferences")
    assert audit(client).orphans == []
    # Unmarked, nobody's claim would be an orphan: the audit of the reliability tests says so.
    unmarked = {"metadata": {"annotations": {RETAIN_ANNOTATION: None}}}
    client.patch(PERSISTENT_VOLUME_CLAIM, NS, claim, unmarked)
    assert audit(client).orphans == [f"PersistentVolumeClaim {NS}/{claim}"]


def test_read_write_once_is_refused_naming_the_field(client: Client) -> None:
    with pytest.raises(ApiError) as refused:
        client.create(KIMI_DEPLOYMENT, deployment("rwo", accessMode="ReadWriteOnce"))
    assert "spec.model.source.huggingface.cache.accessMode" in str(refused.value)
    assert "ReadWriteMany" in str(refused.value)


def no_groups_and_failed(client: Client, name: str, reason: str) -> dict[str, Any]:
    def failed() -> dict[str, Any] | None:
        found = weights_condition(client, name)
        return found if found.get("reason") == reason else None

    found = wait_for(failed, TIMEOUT_S, f"WeightsReady {reason}")
    assert found["status"] == "False"
    ready = condition(status_of(client, NS, name), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", reason)
    assert client.list(LEADER_WORKER_SET, NS) == []
    return found


@pytest.mark.usefixtures("operator", "jobs")
def test_a_failed_resolve_says_why_and_creates_nothing_more(client: Client) -> None:
    client.create(KIMI_DEPLOYMENT, deployment("private", repo=PRIVATE))  # no token
    found = no_groups_and_failed(client, "private", "ResolveFailed")
    assert "BackoffLimitExceeded" in found["message"]
    assert "401" in found["message"]
    assert caches(client) == []


@pytest.mark.usefixtures("operator")
def test_a_failed_download_says_why_and_creates_no_group(
    client: Client, hub: FakeHub, jobs: JobRunner
) -> None:
    hub.faults.append(Fault("model-00002-of-00002.safetensors", times=100, status=404))
    client.create(KIMI_DEPLOYMENT, deployment("broken"))
    found = no_groups_and_failed(client, "broken", "DownloadFailed")
    assert "BackoffLimitExceeded" in found["message"]
    assert "404" in found["message"]
    (claim,) = {name for _, name in caches(client)}
    assert not (jobs.claim_dir(NS, claim) / MANIFEST).exists()


@pytest.mark.usefixtures("operator")
def test_the_token_reaches_the_jobs_only(client: Client, jobs: JobRunner) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hf", "namespace": NS},
        "data": {"token": base64.b64encode(TOKEN.encode()).decode()},
    }
    client.create(SECRET, secret)
    doc = deployment("private", repo=PRIVATE)
    doc["spec"]["model"]["source"]["huggingface"]["tokenSecretRef"] = {"name": "hf", "key": "token"}
    client.create(KIMI_DEPLOYMENT, doc)
    claim = serving(client, "private")["weights"][0]["claimName"]
    (group,) = client.list(LEADER_WORKER_SET, NS)
    assert "HF_TOKEN" not in json.dumps(group)
    assert '"hf"' not in json.dumps(group)  # nor the Secret, by any name
    job = client.get(JOB, NS, claim)
    assert job is not None
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["env"] == [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    ]
    assert [a.exit_code for a in jobs.attempts] == [0, 0]  # resolved and downloaded with it
    assert all(TOKEN not in a.output for a in jobs.attempts)


@pytest.mark.usefixtures("operator")
@pytest.mark.usefixtures("jobs")
def test_a_new_revision_downloads_a_new_cache_then_lets_go_of_the_old(
    api: EmbeddedApiServer, client: Client, hub: FakeHub
) -> None:
    client.create(KIMI_DEPLOYMENT, deployment("k3"))
    old = serving(client, "k3")["weights"][0]["claimName"]
    v2 = hub.push(REPO, {**FILES, "config.json": b'{"model_type": "kimi_k3", "v": 2}'}, "v2")
    mark = api.mark()
    moved = {"spec": {"model": {"source": {"huggingface": {"revision": "v2"}}}}}
    client.patch(KIMI_DEPLOYMENT, NS, "k3", moved)

    def moved_over() -> dict[str, Any] | None:
        mark_ready(client, NS)
        status = status_of(client, NS, "k3")
        weights = status.get("weights") or [{}]
        names = {name for _, name in caches(client)}
        if weights[0].get("commit") != v2 or names != {weights[0]["claimName"]}:
            return None
        return status

    status = wait_for(moved_over, TIMEOUT_S, "the new cache alone")
    new = status["weights"][0]["claimName"]
    assert new != old
    assert caches(client) == [("Job", new), ("PersistentVolumeClaim", new)]
    (group,) = client.list(LEADER_WORKER_SET, NS)
    volumes = group["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["volumes"]
    assert {"name": "weights", "persistentVolumeClaim": {"claimName": new, "readOnly": True}} in (
        volumes
    )
    # The group was switched to the new claim only after its download completed.
    writes = api.writes(mark)
    job_done = max(w.time for w in writes if w.path.endswith(f"/jobs/{new}/status"))
    switched = min(
        w.time for w in writes if w.method == "PATCH" and w.name == group["metadata"]["name"]
    )
    assert switched > job_done


@pytest.mark.usefixtures("operator")
def test_a_claim_left_pending_is_said_and_nothing_runs(
    client: Client, hub: FakeHub, tmp_path: Path
) -> None:
    with running(JobRunner(client, hub.url, tmp_path, provision=False)) as runner:
        client.create(KIMI_DEPLOYMENT, deployment("pending"))

        def pending() -> dict[str, Any] | None:
            found = weights_condition(client, "pending")
            return found if found.get("reason") == "ClaimPending" else None

        found = wait_for(pending, TIMEOUT_S, "WeightsReady ClaimPending")
        assert found["status"] == "False"
        assert "is Pending: no volume bound yet" in found["message"]
        # The resolve Job ran (it needs no claim); the download Job's pod is not scheduled.
        assert [a.exit_code for a in runner.attempts] == [0]
        assert client.list(LEADER_WORKER_SET, NS) == []

    # What the operator says of the same claim once it has waited past the limit: no volume comes.
    live = [obj for resource in (PERSISTENT_VOLUME_CLAIM, JOB) for obj in client.list(resource, NS)]
    live = [
        o
        for o in live
        if o["metadata"]["labels"].get("app.kubernetes.io/component")
        and o["metadata"]["name"] != SHARED_CLAIM
    ]
    (claim,) = (o for o in live if o["kind"] == "PersistentVolumeClaim")
    created = datetime.datetime.strptime(
        claim["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"
    )

    def after(seconds: float) -> list[str]:
        later = created + datetime.timedelta(seconds=seconds)
        weights = weights_caches.Weights(resolved={})
        jobs = (o for o in live if o["kind"] == JOB.kind)
        messages = {
            job["metadata"]["name"]: weights_caches.termination_message(
                client.list(POD, NS, label_selector=weights_caches.job_pods(job))
            )
            for job in jobs
        }
        weights_caches.downloads(weights, live, messages, now=later.strftime("%Y-%m-%dT%H:%M:%SZ"))
        return [p.reason for p in weights.waiting]

    limit = weights_caches.CLAIM_PENDING_LIMIT_S
    assert after(limit - 60) == ["ClaimPending"]
    assert after(limit + 60) == ["StorageUnavailable"]


# kube-apiserver's ResourceQuota admission, refusing the claim (its exact shape of message).
QUOTA = (
    'persistentvolumeclaims "{name}" is forbidden: exceeded quota: storage, requested: '
    "requests.storage=2Gi, used: requests.storage=0, limited: requests.storage=1Gi"
)


@pytest.mark.usefixtures("jobs")
def test_a_quota_refusal_is_said_and_a_later_resync_creates_the_claim(
    api: EmbeddedApiServer, client: Client, operator: OperatorThread
) -> None:
    # The quota stands until a person raises it: every claim refused until the fault is cleared
    # (a refusal used up at once left the test racing the next resync, 0.5 s, for the condition).
    refusal = ApiFault(
        "POST", "/persistentvolumeclaims", 403, message=QUOTA.format(name="c"), times=1000
    )
    api.inject(refusal)
    client.create(KIMI_DEPLOYMENT, deployment("quota"))

    def refused() -> dict[str, Any] | None:
        found = weights_condition(client, "quota")
        return found if found.get("reason") == "QuotaExceeded" else None

    wait_for(refused, TIMEOUT_S, "WeightsReady QuotaExceeded")
    # Tried again at the resyncs only, not in a tight loop, once the children made meanwhile
    # (their events each a reconcile) have settled; said the same meanwhile.
    resyncs(metrics_of(operator), 2)
    since = api.mark()
    resyncs(metrics_of(operator), 4)
    attempts = [r for r in api.writes(since) if r.path.endswith("/persistentvolumeclaims")]
    assert 1 <= len(attempts) <= 6
    found = refused()
    assert found is not None
    assert found["status"] == "False"
    assert "exceeded quota: storage" in found["message"]
    assert condition(status_of(client, NS, "quota"), "Ready")["status"] == "False"
    assert client.list(PERSISTENT_VOLUME_CLAIM, NS) == []
    assert client.list(LEADER_WORKER_SET, NS) == []
    # The quota raised: a resync creates the claim and the download goes on.
    api.clear_faults()
    wait_for(lambda: client.list(PERSISTENT_VOLUME_CLAIM, NS) or None, TIMEOUT_S, "the claim")
    assert serving(client, "quota")["readyReplicas"] == 1
