"""When the operator reconciles again: retries back off, nothing cuts a retry's wait short, and
a deletion leaves nothing behind."""

import threading
import time
from typing import Any

import kopf
import pytest

from kimi_operator import handlers
from kimi_operator.api.crd import crd
from kimi_operator.builders import OperatorDefaults
from kimi_operator.embedded.reliability import deployment
from kimi_operator.embedded.server import EmbeddedApiServer
from kimi_operator.handlers import OperatorContext, attempt
from kimi_operator.k8s.client import ApiUnavailable, Client, load_configuration
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, Resource
from kimi_operator.metrics import Metrics

THROTTLED = ApiUnavailable("throttled", code=429, delay=2.0, server_delay=True)


def context() -> OperatorContext:
    configuration = load_configuration("http://127.0.0.1:9")  # never called
    return OperatorContext(configuration, Client(configuration), OperatorDefaults(), Metrics())


def test_a_refresh_comes_at_once_but_never_before_a_pending_retry() -> None:
    ctx = context()
    ctx.track("b", "inference", "b")
    now = time.monotonic()
    ctx.schedule("a", 0.0, "refresh")
    assert ctx.due(now + 0.01) == {"a": "refresh"}
    ctx.retry_later("b", THROTTLED)
    ctx.schedule("b", 0.0, "refresh")  # a child changed meanwhile
    assert ctx.due(now + 1.0) == {}
    assert ctx.backing_off(now + 1.0) == {"b"}  # the periodic resync leaves it alone too
    assert ctx.due(now + 2.5) == {"b": "retry"}
    assert ctx.backing_off(now + 2.5) == set()


def test_failures_in_a_row_double_the_wait_and_success_resets_it() -> None:
    ctx = context()
    ctx.track("a", "inference", "a")
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
        assert ctx.due(time.monotonic() + 100) == {"u-1": "retry"}
        ctx.schedule("u-1", 50.0, "refresh")
        attempt(
            ctx,
            "retry",
            {"metadata": {"uid": "u-1", "namespace": "inference", "name": "gone"}},
            fresh=False,
        )
        assert ctx.snapshot() == {}
        assert ctx.failures == {}
        assert ctx.due(time.monotonic() + 100) == {}


def test_a_retry_replaces_the_refresh_its_own_children_asked_for() -> None:
    """A reconcile creates a LeaderWorkerSet (whose watch event schedules a refresh at once),
    then its Service gets a 429: the refresh must not run before the Retry-After is over."""
    ctx = context()
    ctx.track("a", "inference", "a")
    now = time.monotonic()
    ctx.schedule("a", 0.0, "refresh")
    ctx.retry_later("a", THROTTLED)
    assert ctx.due(now + 1.0) == {}
    assert ctx.due(now + 2.5) == {"a": "retry"}


class Unreachable(Client):
    def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        raise AssertionError(f"{resource.kind} {namespace}/{name} reconciled during its retry wait")


def test_a_reconcile_that_waited_for_the_lock_leaves_a_new_retry_to_its_time() -> None:
    """A refresh taken off the schedule waits for the lock while the reconcile holding it fails
    with a 429: once it has the lock it must leave the deployment to that retry."""
    configuration = load_configuration("http://127.0.0.1:9")
    ctx = OperatorContext(configuration, Unreachable(configuration), OperatorDefaults(), Metrics())
    ctx.track("a", "inference", "a")
    ctx.retry_later("a", THROTTLED)
    stub = {"metadata": {"uid": "a", "namespace": "inference", "name": "a"}}
    attempt(ctx, "refresh", stub, fresh=False)
    assert ctx.failures == {"a": 1}
    assert ctx.backing_off(time.monotonic()) == {"a"}


def test_a_deletion_during_a_reconcile_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The DELETED event arrives while a resync of the deployment is in flight: once both are
    done, neither `acted` nor the deployments gauge holds it (nothing would ever remove it)."""
    started, release = threading.Event(), threading.Event()
    reconcile = handlers.reconcile

    def held(*args: Any, **kwargs: Any) -> Any:
        started.set()
        assert release.wait(10)
        return reconcile(*args, **kwargs)

    monkeypatch.setattr(handlers, "reconcile", held)
    with EmbeddedApiServer() as api:
        api.install_crds([crd()])  # no LeaderWorkerSet: the reconcile says so, writes no child
        client = Client(load_configuration(api.url))
        ctx = OperatorContext(load_configuration(api.url), client, OperatorDefaults(), Metrics())
        meta = client.create(KIMI_DEPLOYMENT, deployment("racing"))["metadata"]
        key = (meta["uid"], meta["namespace"], meta["name"])
        ctx.track(*key)
        resync = threading.Thread(
            target=attempt, args=(ctx, "resync", {"metadata": meta}), kwargs={"fresh": False}
        )
        resync.start()
        assert started.wait(10)
        deletion = threading.Thread(target=ctx.forget, args=key)
        deletion.start()
        deletion.join(0.2)  # it waits for the reconcile (or, unserialized, is over already)
        release.set()
        resync.join(10)
        deletion.join(10)
        assert not resync.is_alive()
        assert not deletion.is_alive()
        assert ctx.acted == {}
        assert ctx.metrics.deployments_by_condition() == {}
        assert (ctx.snapshot(), ctx.failures, ctx.backing_off(0.0)) == ({}, {}, set())
