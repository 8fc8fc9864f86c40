"""The embedded API server calls the chart's ValidatingWebhookConfiguration as kube-apiserver does,
and `kimi-operator admission` answers: a spec that the CRD's CEL rules let through refused with the
pydantic model's lines, the fast path's warning as a `Warning` header, updates that leave the spec
alone and status writes never blocked, the namespace selector and the failure policy obeyed."""

import base64
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kimi_operator.embedded.chart import webhook_configuration
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT
from tests.support.admission import Webhook, running_webhook, self_signed
from tests.support.corpus import DRAFT
from tests.support.specs import edited

from .test_embedded_server import send

NS = "inference"
FAIL = {"failurePolicy": "Fail"}
DENIED = 'admission webhook "kimideployments.kimi-operator.io" denied the request: '
BAD_ARGS = {"spec.engineArgs": ["--max-num-batched-tokens", "abc"]}
WARNED = {"spec.decode.maxNumSeqs": 16, "spec.speculative": {**DRAFT, "numSpeculativeTokens": 7}}


@pytest.fixture(scope="module")
def webhook() -> Iterator[Webhook]:
    with running_webhook("--insecure") as process:
        yield process


def _collection(namespace: str = NS) -> str:
    return KIMI_DEPLOYMENT.collection(namespace)


def _doc(edits: dict[str, Any], name: str = "k3", namespace: str = NS) -> dict[str, Any]:
    return edited({**edits, "metadata.name": name, "metadata.namespace": namespace})


def test_cel_lets_it_through_the_webhook_refuses_with_the_models_lines(
    api: EmbeddedApiServer, webhook: Webhook
) -> None:
    doc = _doc({**BAD_ARGS, "spec.replicas": 2})
    api.store([webhook_configuration(webhook.url)])
    code, answer, _ = send(api, "POST", _collection(), doc)
    assert code == 422, answer
    assert answer["message"].startswith(DENIED + "spec.engineArgs: vLLM 0.33.0's serve parser")
    assert "--max-num-batched-tokens abc: not a valid integer" in answer["message"]
    code, _, _ = send(api, "GET", f"{_collection()}/k3")
    assert code == 404  # not stored
    code, _, warnings = send(api, "POST", _collection(), _doc(WARNED))
    assert code == 201
    (warning,) = warnings
    assert warning.startswith('299 - "spec.decode.maxNumSeqs: decode batches of up to 16 x (1 + 7)')


def test_updates_that_leave_the_spec_alone_and_status_writes_pass(
    api: EmbeddedApiServer, webhook: Webhook
) -> None:
    """An object stored before the webhook was registered (an older operator accepted it): its
    labels, finalizers and status can still be written; its spec only into a valid one."""
    code, _, _ = send(api, "POST", _collection(), _doc(BAD_ARGS))
    assert code == 201  # CEL alone
    api.store([webhook_configuration(webhook.url, {"admissionWebhook": {"failurePolicy": "Fail"}})])
    path = f"{_collection()}/k3"
    code, _, _ = send(api, "PATCH", path, {"metadata": {"labels": {"team": "a"}}}, merge=True)
    assert code == 200
    status = {"status": {"observedGeneration": 1}}
    code, _, _ = send(api, "PATCH", f"{path}/status", status, merge=True)
    assert code == 200
    code, answer, _ = send(api, "PATCH", path, {"spec": {"replicas": 2}}, merge=True)
    assert code == 422
    assert answer["message"].startswith(DENIED + "spec.engineArgs: ")
    code, _, _ = send(api, "PATCH", path, {"spec": {"engineArgs": None}}, merge=True)
    assert code == 200


def test_the_namespace_selector_follows_watch_namespaces(
    api: EmbeddedApiServer, webhook: Webhook
) -> None:
    api.store([webhook_configuration(webhook.url, {"watchNamespaces": [NS]})])
    code, _, _ = send(api, "POST", _collection("research"), _doc(BAD_ARGS, namespace="research"))
    assert code == 201  # not watched: CEL alone
    code, _, _ = send(api, "POST", _collection(), _doc(BAD_ARGS))
    assert code == 422


@pytest.mark.parametrize(("policy", "created"), [("Ignore", True), ("Fail", False)])
def test_a_webhook_that_does_not_answer_obeys_the_failure_policy(
    api: EmbeddedApiServer, policy: str, created: bool
) -> None:
    with socket.socket() as closed:  # a port nothing listens on: a webhook that is down
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    api.store([webhook_configuration(url, {"admissionWebhook": {"failurePolicy": policy}})])
    code, answer, _ = send(api, "POST", _collection(), _doc({}))
    assert (code == 201) is created, answer
    if not created:
        assert code == 500
        assert answer["message"].startswith(
            'Internal error occurred: failed calling webhook "kimideployments.kimi-operator.io"'
        )


def test_a_configuration_created_through_the_api_takes_effect_at_once(
    api: EmbeddedApiServer, webhook: Webhook
) -> None:
    configurations = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    code, _, _ = send(api, "POST", configurations, webhook_configuration(webhook.url))
    assert code == 201
    code, answer, _ = send(api, "POST", _collection(), _doc(BAD_ARGS))
    assert code == 422
    assert answer["message"].startswith(DENIED)
    name = webhook_configuration(webhook.url)["metadata"]["name"]
    code, _, _ = send(api, "DELETE", f"{configurations}/{name}")
    assert code == 200
    code, _, _ = send(api, "POST", _collection(), _doc(BAD_ARGS))
    assert code == 201  # CEL alone again


def test_https_with_the_configurations_ca_bundle(api: EmbeddedApiServer, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "webhook")
    other, _ = self_signed(tmp_path, "other")
    args = ["--address", "127.0.0.1", "--cert-file", str(cert), "--key-file", str(key)]
    with running_webhook(*args) as tls:
        configuration = webhook_configuration(tls.url, {"admissionWebhook": FAIL})
        (hook,) = configuration["webhooks"]
        hook["clientConfig"]["caBundle"] = base64.b64encode(other.read_bytes()).decode()
        api.store([configuration])
        code, answer, _ = send(api, "POST", _collection(), _doc(BAD_ARGS))
        assert code == 500  # a CA that did not sign the webhook's certificate
        assert "CERTIFICATE_VERIFY_FAILED" in answer["message"]
        hook["clientConfig"]["caBundle"] = base64.b64encode(cert.read_bytes()).decode()
        api.store([configuration])
        code, answer, _ = send(api, "POST", _collection(), _doc(BAD_ARGS))
        assert code == 422
        assert answer["message"].startswith(DENIED + "spec.engineArgs: ")
