"""The client-side rate limit (client-go's QPS and burst) on a virtual clock, and the client
holding its requests to it, the Lease's aside."""

import pytest

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.errors import NotLeading
from kimi_operator.k8s.ratelimit import TokenBucket
from kimi_operator.k8s.resources import LEASE, SERVICE
from tests.kimi_operator.controller.clock import VirtualClock

LATE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "late", "namespace": "default"},
    "spec": {"ports": [{"port": 80}]},
}


def test_a_burst_at_once_then_qps_a_second_in_the_order_asked() -> None:
    clock = VirtualClock()
    bucket = TokenBucket(2.0, 3, clock=clock)
    assert [bucket.reserve() for _ in range(5)] == [0.0, 0.0, 0.0, 0.5, 1.0]
    clock.advance(1.0)  # two tokens back, both owed already
    assert bucket.reserve() == 0.5
    clock.advance(10.0)  # refilled, never beyond the burst
    assert [bucket.reserve() for _ in range(4)] == [0.0, 0.0, 0.0, 0.5]


@pytest.mark.parametrize(("qps", "burst"), [(0.0, 1), (-1.0, 5), (5.0, 0)])
def test_a_limit_that_lets_nothing_through_is_refused(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="qps > 0 and burst >= 1"):
        TokenBucket(qps, burst)


def test_the_client_waits_its_turn_but_never_for_the_lease() -> None:
    clock, slept = VirtualClock(), []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    bucket = TokenBucket(10.0, 2, clock=clock, sleep=sleep)
    with EmbeddedApiServer() as api:
        client = Client(load_configuration(api.url), rate_limit=bucket)
        for _ in range(4):
            client.get(SERVICE, "default", "missing")
        assert slept == pytest.approx([0.1, 0.1])
        for _ in range(3):
            client.get(LEASE, "default", "missing")
        assert slept == pytest.approx([0.1, 0.1])  # renewals never wait behind reconciles
        client.close()


def test_a_write_that_waited_its_turn_is_fenced_when_it_is_sent() -> None:
    """The fence is asked after the wait for a token, right before the request goes out: a
    leader whose lease lapsed while its write queued behind a burst (or while it was frozen
    there) sends nothing. Asked before the wait, the write went out after waking."""
    clock, leading = VirtualClock(), [True]

    def sleep(seconds: float) -> None:
        clock.advance(seconds)
        leading[0] = False  # the lease lapsed while the write waited its turn

    bucket = TokenBucket(1.0, 1, clock=clock, sleep=sleep)
    with EmbeddedApiServer() as api:
        client = Client(load_configuration(api.url), rate_limit=bucket)
        client.write_budget = lambda: 1.0 if leading[0] else 0.0
        client.get(SERVICE, "default", "missing")  # the burst's one token
        with pytest.raises(NotLeading):
            client.create(SERVICE, LATE)
        assert [w for w in api.writes() if "/services" in w.path] == []
        client.close()
