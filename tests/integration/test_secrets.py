"""The operator never reads a Secret: the Hugging Face token reaches pods only as a secretKeyRef.

A run with a token set: the token value appears in no log line (DEBUG included), no Event and no
object in the namespace, and the operator sends no request at all to the secrets API.
"""

import json
import logging
from typing import Any

import kmock
import pytest

from kimi_operator.embedded.server import ApiServer, EmbeddedApiServer
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import (
    COMPUTE_DOMAIN,
    EVENT,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    POD_DISRUPTION_BUDGET,
    POD_MONITOR,
    SERVICE,
    Resource,
)
from kimi_operator.runner import OperatorThread, RunConfig
from tests.integration.conftest import RESYNC_S
from tests.support.cluster import sample, status_of, wait_for

NS = "inference"
SECRET = Resource("", "v1", "secrets", "Secret")
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
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api.call(
        lambda h: h.resources.__setitem__(
            "v1/secrets", kmock.ResourceInfo(kind="Secret", namespaced=True)
        )
    )
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": REF["name"], "namespace": NS},
    }
    client.create(SECRET, {**secret, "stringData": {REF["key"]: TOKEN}, "data": {}})

    requests: list[tuple[str, str]] = []
    serve = ApiServer.__call__

    async def recording(self: ApiServer, raw: Any) -> Any:
        requests.append((raw.method, raw.path_qs))
        return await serve(self, raw)

    monkeypatch.setattr(ApiServer, "__call__", recording)
    caplog.set_level(logging.DEBUG)
    doc = _deployment()
    config = RunConfig(server=api.url, token=token, resync_interval_s=RESYNC_S, workers=4)
    with OperatorThread(config):
        client.create(KIMI_DEPLOYMENT, doc)
        name = doc["metadata"]["name"]
        wait_for(lambda: status_of(client, NS, name).get("observedGeneration") == 1, what="status")
        wait_for(lambda: len(requests) > 50, what="a few resyncs")  # several passes, not one

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
        )
        for obj in client.list(resource, NS)
    ]
    (lws,) = [o for o in written if o["kind"] == "LeaderWorkerSet"]
    for role in ("leaderTemplate", "workerTemplate"):
        pod = lws["spec"]["leaderWorkerTemplate"][role]["spec"]
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": REF}}
        assert env["EXTRA_TOKEN"]["valueFrom"]["secretKeyRef"].items() >= REF.items()
    assert any(o["kind"] == "Event" for o in written)
    assert TOKEN not in json.dumps(written)
    assert caplog.records  # the scan below looked at something
    assert TOKEN not in caplog.text
    assert TOKEN not in "\n".join(str(r.__dict__) for r in caplog.records)
    assert [r for r in requests if "/secrets" in r[1]] == []
