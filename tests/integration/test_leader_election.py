"""Leader election on a Lease (controller/leader.py) against the embedded API server: the
candidates' decisions on a virtual clock, then whole operators as the chart runs them (its RBAC,
two replicas): one reconciles, the other stands by and takes over when the leader stops or loses
the Lease."""

import threading
import time
from collections.abc import Iterator

import pytest

from kimi_operator.controller.leader import LeaderElector, LeaseConfig
from kimi_operator.embedded.chart import NAMESPACE as RELEASE_NAMESPACE
from kimi_operator.embedded.chart import operator_identity
from kimi_operator.embedded.server import EmbeddedApiServer, Fault
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, LEASE
from kimi_operator.runner import LeadershipLost, OperatorThread, RunConfig
from tests.support.cluster import children, sample, wait_for

NAME = "kimi-kimi-operator"  # the chart's Lease: the release's full name


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def candidate(client: Client, identity: str, clock: Clock) -> LeaderElector:
    config = LeaseConfig(RELEASE_NAMESPACE, NAME, identity, 15.0, 10.0, 2.0)
    return LeaderElector(client, config, clock=clock)


def lease(client: Client) -> dict[str, object]:
    found = client.get(LEASE, RELEASE_NAMESPACE, NAME)
    assert found is not None
    spec: dict[str, object] = found["spec"]
    return spec


def test_the_first_candidate_creates_the_lease_and_the_second_waits_a_whole_lease_duration(
    client: Client,
) -> None:
    clock = Clock()
    a, b = candidate(client, "a", clock), candidate(client, "b", clock)
    assert a.try_acquire_or_renew()
    assert a.leading()
    assert lease(client)["holderIdentity"] == "a"
    assert lease(client)["leaseTransitions"] == 0
    assert not b.try_acquire_or_renew()  # first sight of a's record: b's clock starts now
    for _ in range(20):  # a renews every 2 s: b never takes over, however long it waits
        clock.now += 2.0
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    renewed = lease(client)["renewTime"]
    clock.now += 14.9  # a stopped renewing; b has seen the same record for less than 15 s
    assert not b.try_acquire_or_renew()
    assert lease(client)["renewTime"] == renewed
    clock.now += 0.2
    assert b.try_acquire_or_renew()
    assert b.leading()
    spec = lease(client)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    # a comes back: its renewal sees b's record, new to it, and does not take it back.
    assert not a.try_acquire_or_renew()
    assert not a.leading()
    assert lease(client)["holderIdentity"] == "b"


def test_a_released_lease_is_taken_at_the_next_try(client: Client) -> None:
    clock = Clock()
    a, b = candidate(client, "a", clock), candidate(client, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert lease(client)["holderIdentity"] == ""
    assert not a.leading()
    assert b.try_acquire_or_renew()  # no lease duration to wait out
    b.release()
    b.release()  # not the holder any more: nothing written
    assert lease(client)["holderIdentity"] == ""


def test_a_write_from_a_stale_read_is_refused(client: Client, api: EmbeddedApiServer) -> None:
    """Two candidates that both found the Lease expired: the compare-and-swap lets one win."""
    clock = Clock()
    a = candidate(client, "a", clock)
    assert a.try_acquire_or_renew()
    stale = client.get(LEASE, RELEASE_NAMESPACE, NAME)
    assert stale is not None
    assert a.try_acquire_or_renew()  # a renewal moves the resourceVersion on
    with pytest.raises(ApiError, match="409"):
        client.replace(LEASE, {**stale, "spec": {**stale["spec"], "holderIdentity": "b"}})
    assert lease(client)["holderIdentity"] == "a"
    writes = [w for w in api.writes() if w.method == "PUT"]
    assert len(writes) == 2  # the refused one is in the log too (it reached the server)


def test_hold_gives_up_when_renewals_fail_past_the_renew_deadline(
    client: Client, api: EmbeddedApiServer
) -> None:
    config = LeaseConfig(RELEASE_NAMESPACE, NAME, "a", 0.6, 0.3, 0.05)
    a = LeaderElector(client, config)
    assert a.try_acquire_or_renew()
    api.inject(Fault("GET", "/leases/", status=500, times=1000))
    stop = threading.Event()
    started = time.monotonic()
    assert not a.hold(stop)  # lost: no renewal within 0.3 s
    assert 0.3 <= time.monotonic() - started < 5.0
    assert not a.leading()


def test_hold_gives_up_at_once_when_another_candidate_holds_the_lease(client: Client) -> None:
    config = LeaseConfig(RELEASE_NAMESPACE, NAME, "a", 30.0, 20.0, 0.05)
    a = LeaderElector(client, config)
    assert a.try_acquire_or_renew()
    found = client.get(LEASE, RELEASE_NAMESPACE, NAME)
    assert found is not None
    client.replace(LEASE, {**found, "spec": {**found["spec"], "holderIdentity": "intruder"}})
    stop = threading.Event()
    started = time.monotonic()
    assert not a.hold(stop)
    assert time.monotonic() - started < 5.0  # not the renew deadline's 20 s


def test_durations_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseConfig("ns", renew_deadline_s=15.0, lease_duration_s=15.0)


# --- two operators, as the chart runs them -------------------------------------------------


def replica(api: EmbeddedApiServer, identity: str) -> OperatorThread:
    """An operator with the chart's default values: leader election in the release's namespace,
    authorized by the chart's RBAC (its Role for the Lease included)."""
    lease_config = LeaseConfig(RELEASE_NAMESPACE, NAME, identity, 1.5, 1.0, 0.1)
    config = RunConfig(
        server=api.url,
        token=operator_identity(api),
        resync_interval_s=0.5,
        workers=2,
        leader_election=lease_config,
    )
    return OperatorThread(config)


def reconciles(op: OperatorThread) -> float:
    total = 0.0
    for family in op.controller.metrics.registry.collect():
        if family.name == "kimi_operator_reconciles":
            total += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return total


def leader_gauge(op: OperatorThread) -> float | None:
    return op.controller.metrics.registry.get_sample_value("kimi_operator_leader")


@pytest.fixture
def replicas(api: EmbeddedApiServer) -> Iterator[tuple[OperatorThread, OperatorThread]]:
    first, second = replica(api, "first"), replica(api, "second")
    with first:
        wait_for(first.operator.leading.is_set, what="the first replica to lead")
        with second:
            yield first, second


def create(client: Client, name: str) -> None:
    body = sample()
    body["metadata"] = {"name": name, "namespace": "inference"}
    client.create(KIMI_DEPLOYMENT, body)


def has_group(client: Client, name: str) -> bool:
    return any(key.startswith("LeaderWorkerSet/") for key in children(client, name))


def test_one_replica_reconciles_and_the_other_takes_over_when_it_stops(
    replicas: tuple[OperatorThread, OperatorThread], client: Client
) -> None:
    first, second = replicas
    create(client, "k3-a")
    wait_for(lambda: has_group(client, "k3-a"), what="the leader to create k3-a's group")
    time.sleep(1.0)  # two resyncs' worth
    assert reconciles(first) > 0
    assert reconciles(second) == 0
    assert not second.operator.leading.is_set()
    assert (leader_gauge(first), leader_gauge(second)) == (1.0, 0.0)

    first.stop()  # graceful: the Lease is released
    wait_for(second.operator.leading.is_set, 5.0, "the standby to lead")
    assert lease(client)["holderIdentity"] == "second"
    create(client, "k3-b")
    wait_for(lambda: has_group(client, "k3-b"), what="the new leader to create k3-b's group")
    assert leader_gauge(second) == 1.0


def test_a_leader_that_loses_the_lease_stops_reconciling(
    replicas: tuple[OperatorThread, OperatorThread], client: Client
) -> None:
    first, second = replicas
    found = client.get(LEASE, RELEASE_NAMESPACE, NAME)
    assert found is not None
    client.replace(LEASE, {**found, "spec": {**found["spec"], "holderIdentity": "someone-else"}})
    wait_for(lambda: first.failure is not None, what="the leader to stop")
    assert isinstance(first.failure, LeadershipLost)
    assert not first.operator.leading.is_set()
    done = reconciles(first)
    # "someone-else" never renews: after a lease duration the standby takes over.
    wait_for(second.operator.leading.is_set, 10.0, "the standby to lead")
    create(client, "k3-c")
    wait_for(lambda: has_group(client, "k3-c"), what="the new leader to create k3-c's group")
    assert reconciles(first) == done
