"""When the operator reconciles again: retries back off, and nothing cuts a retry's wait short."""

import time

import kopf

from kimi_operator.builders import OperatorDefaults
from kimi_operator.embedded.server import EmbeddedApiServer
from kimi_operator.handlers import OperatorContext, attempt
from kimi_operator.k8s.client import ApiUnavailable, Client, load_configuration
from kimi_operator.metrics import Metrics


def context() -> OperatorContext:
    configuration = load_configuration("http://127.0.0.1:9")  # never called
    return OperatorContext(configuration, Client(configuration), OperatorDefaults(), Metrics())


def test_a_refresh_comes_at_once_but_never_before_a_pending_retry() -> None:
    ctx = context()
    now = time.monotonic()
    ctx.schedule("a", 0.0, "refresh")
    assert ctx.due(now + 0.01) == {"a": "refresh"}
    ctx.retry_later("b", ApiUnavailable("throttled", code=429, delay=2.0, server_delay=True))
    ctx.schedule("b", 0.0, "refresh")  # a child changed meanwhile
    assert ctx.due(now + 1.0) == {}
    assert ctx.backing_off(now + 1.0) == {"b"}  # the periodic resync leaves it alone too
    assert ctx.due(now + 2.5) == {"b": "retry"}
    assert ctx.backing_off(now + 2.5) == set()


def test_failures_in_a_row_double_the_wait_and_success_resets_it() -> None:
    ctx = context()
    error = ApiUnavailable("HTTP 500", code=500, delay=1.0)
    for wait in (1.0, 2.0, 4.0):
        start = time.monotonic()
        ctx.retry_later("a", error)
        assert ctx.backing_off(start + wait - 0.05) == {"a"}
        assert ctx.due(start + wait + 0.05) == {"a": "retry"}
    ctx.retry_done("a")
    start = time.monotonic()
    ctx.retry_later("a", kopf.TemporaryError("again", delay=1.0))
    assert ctx.due(start + 1.05) == {"a": "retry"}


def test_a_deployment_found_gone_at_its_resync_is_forgotten() -> None:
    """Its DELETED event may have been lost with a dropped watch: it must not be resynced (and
    kept in memory) forever."""
    with EmbeddedApiServer() as api:
        ctx = OperatorContext(
            load_configuration(api.url),
            Client(load_configuration(api.url)),
            OperatorDefaults(),
            Metrics(),
        )
        ctx.track("u-1", "inference", "gone")
        ctx.retry_later("u-1", kopf.TemporaryError("x", delay=0.0))
        attempt(
            ctx,
            "resync",
            {"metadata": {"uid": "u-1", "namespace": "inference", "name": "gone"}},
            fresh=False,
        )
        assert ctx.snapshot() == {}
        assert ctx.failures == {}
        assert ctx.due(time.monotonic() + 100) == {}
