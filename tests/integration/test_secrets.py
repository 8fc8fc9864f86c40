"""The operator never reads a Secret: the Hugging Face token reaches the weights Jobs only, as a
secretKeyRef, and no serving pod.

A run with a token set, its weights Jobs run for real against the fake hub (embedded.jobs, which
reads the Secret as a kubelet would): the token value appears in no log line (DEBUG included), no
Event and no object in the namespace, and the operator sends no request at all to the secrets API.
"""

import base64
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.hub import FakeHub
from kimi_operator.embedded.jobs import SECRET, JobRunner, running
from kimi_operator.embedded.kubelet import mark_ready
from kimi_operator.embedded.server import ApiServer
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import (
    COMPUTE_DOMAIN,
    EVENT,
    JOB,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    POD_DISRUPTION_BUDGET,
    POD_MONITOR,
    SERVICE,
)
from kimi_operator.runner import OperatorThread, RunConfig
from tests.integration.conftest import RESYNC_S
from tests.support.cluster import sample, status_of, wait_for

NS = "inference"
TOKEN = "hf_kimiSecurityProbe_7Qz2xW9vL4mN8bR3"
REF = {"name": "hf-token", "key": "token"}


def _deployment() -> dict[str, Any]:
    doc = sample("k3-tp8-dspark")
    doc["spec"]["model"]["source"] = {
        "huggingface": {"repo": "moonshotai/Kimi-K3", "tokenSecretRef": REF}
    }
    doc["spec"]["env"] = [{"name": "EXTRA_TOKEN", "valueFrom": {"secretKeyRef": REF}}]
    # 16 x (1 + 7) tokens exceed the fast path's decode batch: a Warning Event is posted, and
    # checked below for the token too.
    doc["spec"]["decode"]["maxNumSeqs"] = 16
    return doc


def test_the_token_is_never_read_logged_or_written(
    api: EmbeddedApiServer,
    client: Client,
    token: str,
    *,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": REF["name"], "namespace": NS},
    }
    client.create(
        SECRET, {**secret, "data": {REF["key"]: base64.b64encode(TOKEN.encode()).decode()}}
    )
    hub = FakeHub()
    hub.push(
        "moonshotai/Kimi-K3", {"config.json": b"{}", "model.safetensors": b"w" * 1000}, token=TOKEN
    )

    requests: list[tuple[str, str]] = []  # the operator's (its ServiceAccount's)
    serve = ApiServer.__call__

    async def recording(self: ApiServer, raw: Any) -> Any:
        if raw.headers.get("Authorization") == f"Bearer {token}":
            requests.append((raw.method, raw.path_qs))
        return await serve(self, raw)

    monkeypatch.setattr(ApiServer, "__call__", recording)
    caplog.set_level(logging.DEBUG)
    doc = _deployment()
    config = RunConfig(server=api.url, token=token, resync_interval_s=RESYNC_S, workers=4)
    with hub.running():
        runner = JobRunner(client, hub.url, tmp_path)
        with OperatorThread(config), running(runner):
            client.create(KIMI_DEPLOYMENT, doc)
            name = doc["metadata"]["name"]

            def serving() -> bool:
                mark_ready(client, NS)
                return status_of(client, NS, name).get("readyReplicas") == 1

            wait_for(serving, 60, "serving")
            wait_for(lambda: len(requests) > 50, what="a few resyncs")  # several passes
            # The resolve Job is pruned by a resync after the resolution: only the download stays.
            wait_for(lambda: len(client.list(JOB, NS)) == 1 or None, 60, "the resolve Job pruned")

    written = [
        obj
        for resource in (
            KIMI_DEPLOYMENT,
            LEADER_WORKER_SET,
            COMPUTE_DOMAIN,
            SERVICE,
            POD_DISRUPTION_BUDGET,
            POD_MONITOR,
            EVENT,
            JOB,
        )
        for obj in client.list(resource, NS)
    ]
    (lws,) = [o for o in written if o["kind"] == "LeaderWorkerSet"]
    for role in ("leaderTemplate", "workerTemplate"):
        pod = lws["spec"]["leaderWorkerTemplate"][role]["spec"]
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert "HF_TOKEN" not in env  # the weights come from the cache claim
        assert env["EXTRA_TOKEN"]["valueFrom"]["secretKeyRef"].items() >= REF.items()
    (job,) = [
        o for o in written if o["kind"] == "Job"
    ]  # the download Job (resolved: no resolve Job)
    (download,) = job["spec"]["template"]["spec"]["containers"]
    assert download["env"] == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": REF}}]
    assert all(TOKEN not in attempt.output for attempt in runner.attempts)
    assert any(o["kind"] == "Event" for o in written)
    assert TOKEN not in json.dumps(written)
    assert caplog.records  # the scan below looked at something
    assert TOKEN not in caplog.text
    assert TOKEN not in "\n".join(str(r.__dict__) for r in caplog.records)
    assert [r for r in requests if "/secrets" in r[1]] == []
