"""/healthz as the kubelet's liveness probe reads it: it fails once a watch thread has died of an
unexpected error, so that the container is restarted rather than left blind to events."""

from collections.abc import Mapping
from typing import Any

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.processes import free_port, http_status
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT
from kimi_operator.runner import OperatorThread, RunConfig
from tests.integration.conftest import RESYNC_S
from tests.support.cluster import sample, wait_for


def answer(url: str) -> int | None:
    """/healthz's status. With a long timeout: a probe unanswered in 1 s (`healthy`'s) would count
    as failed on a loaded machine, before the watch had died."""
    return http_status(url, timeout=30)


def broken(_: str | None, __: Mapping[str, Any]) -> None:
    raise RuntimeError("a bug in the event handler")


def test_healthz_fails_once_a_watch_thread_has_died(
    api: EmbeddedApiServer, token: str, client: Client
) -> None:
    address = f"127.0.0.1:{free_port()}"
    config = RunConfig(
        server=api.url, token=token, resync_interval_s=RESYNC_S, workers=2, health=address
    )
    url = f"http://{address}/healthz"
    with OperatorThread(config) as op:
        wait_for(lambda: answer(url) == 200, what="/healthz")
        watch = next(w for w in op.operator._watches if w.resource == KIMI_DEPLOYMENT)
        watch.on_event = broken
        client.create(KIMI_DEPLOYMENT, sample())
        wait_for(lambda: answer(url) == 503, what="/healthz to fail")
        assert isinstance(watch.failed, RuntimeError)
