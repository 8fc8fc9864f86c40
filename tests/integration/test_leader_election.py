"""Leader election on a Lease (controller/leader.py) against the embedded API server: the
candidates' decisions on a virtual clock, then whole operators as the chart runs them (its RBAC,
two replicas): one reconciles, the other stands by and takes over when the leader stops or loses
the Lease."""

import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from kimi_operator.controller.leader import LeaderElector, LeaseConfig, Watchdog
from kimi_operator.embedded.chart import NAMESPACE as RELEASE_NAMESPACE
from kimi_operator.embedded.chart import operator_identity
from kimi_operator.embedded.faults import Fault
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.errors import ApiError, NotLeading
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, LEASE, Resource
from kimi_operator.runner import LeadershipLost, OperatorThread, RunConfig
from tests.integration.conftest import metrics_of, resyncs
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
    started = time.monotonic()  # the renew deadline counts from the acquisition, not after it
    assert a.try_acquire_or_renew()
    api.inject(Fault("GET", "/leases/", status=500, times=1000))
    stop = threading.Event()
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


class RecordingClient(Client):
    """Records the bound given to each Lease request; `slow_by` advances the virtual clock
    during a read, as a slow answer would."""

    def __init__(self, url: str, clock: Clock) -> None:
        super().__init__(load_configuration(url))
        self.clock, self.slow_by = clock, 0.0
        self.timeouts: list[float | None] = []

    def get(
        self, resource: Resource, namespace: str, name: str, *, timeout_s: float | None = None
    ) -> dict[str, Any] | None:
        self.timeouts.append(timeout_s)
        found = super().get(resource, namespace, name, timeout_s=timeout_s)
        self.clock.now += self.slow_by
        return found

    def replace(
        self, resource: Resource, body: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        self.timeouts.append(timeout_s)
        return super().replace(resource, body, timeout_s=timeout_s)


@pytest.fixture
def recording(api: EmbeddedApiServer) -> Iterator[tuple[RecordingClient, Clock]]:
    clock = Clock()
    client = RecordingClient(api.url, clock)
    yield client, clock
    client.close()


def test_a_renewal_gets_only_what_is_left_of_the_renew_deadline(
    recording: tuple[RecordingClient, Clock],
) -> None:
    """client-go bounds each renewal by the renew deadline: a leader whose API connection hangs
    must not lead on past it while a standby takes over."""
    client, clock = recording
    a = candidate(client, "a", clock)
    assert a.try_acquire_or_renew()  # at 100: leads until 110 unless renewed
    assert a.deadline() == 110.0
    client.timeouts.clear()
    clock.now = 108.5
    assert a.try_acquire_or_renew(a.deadline())
    assert client.timeouts == [1.5, 1.5]  # the GET and the PUT, each within what is left
    assert a.deadline() == 118.5
    client.timeouts.clear()
    clock.now = 118.5
    assert not a.try_acquire_or_renew(a.deadline())  # nothing left: no request at all
    assert client.timeouts == []
    assert not a.leading()


def test_a_standby_dates_what_it_saw_from_after_its_read(
    recording: tuple[RecordingClient, Clock], client: Client
) -> None:
    """A slow GET must not eat the margin between the lease duration and the renew deadline:
    the standby's lease duration runs from when the answer came, not from when it asked."""
    slow, clock = recording
    a = candidate(client, "a", clock)
    b = candidate(slow, "b", clock)
    assert a.try_acquire_or_renew()  # at 100, and never again
    slow.slow_by = 6.0
    assert not b.try_acquire_or_renew()  # asked at 100, answered at 106
    slow.slow_by = 0.0
    clock.now = 115.5  # a lease duration after the question, not after the answer
    assert not b.try_acquire_or_renew()
    assert lease(client)["holderIdentity"] == "a"
    clock.now = 121.1
    assert b.try_acquire_or_renew()


def test_the_watchdog_declares_the_loss_at_the_deadline_while_a_renewal_hangs(
    client: Client, api: EmbeddedApiServer
) -> None:
    clock = Clock()
    a = candidate(client, "a", clock)
    assert a.try_acquire_or_renew()  # at 100: the deadline is 110
    losses: list[float] = []
    watchdog = Watchdog(a, lambda: losses.append(clock.now), clock=clock)
    api.inject(Fault("GET", "/leases/", delay_s=1.0))
    renewal = threading.Thread(target=a.try_acquire_or_renew)
    renewal.start()
    wait_for(lambda: api.injected().get("timeout"), what="the renewal in flight")
    clock.now = 109.9
    assert not watchdog.poll()
    clock.now = 110.0
    assert watchdog.poll()
    assert watchdog.poll()  # said once
    assert losses == [110.0]
    renewal.join()


def test_the_client_refuses_writes_without_a_fresh_lease(
    client: Client, api: EmbeddedApiServer
) -> None:
    clock = Clock()
    a = candidate(client, "a", clock)
    client.write_budget = a.write_budget
    body = sample()
    body["metadata"] = {"name": "fenced", "namespace": "inference"}
    with pytest.raises(NotLeading, match="not the leader"):
        client.create(KIMI_DEPLOYMENT, body)  # not leading yet
    assert a.try_acquire_or_renew()  # the Lease's own writes are never fenced
    client.create(KIMI_DEPLOYMENT, body)
    clock.now += 10.0  # the renew deadline passed without a renewal
    mark = api.mark()
    with pytest.raises(NotLeading):
        client.patch(KIMI_DEPLOYMENT, "inference", "fenced", {"spec": {"replicas": 2}})
    with pytest.raises(NotLeading):
        client.delete(KIMI_DEPLOYMENT, "inference", "fenced")
    assert api.writes(mark) == []  # refused before anything was sent


def test_a_write_never_outlasts_the_leadership_left_plus_the_margin(
    client: Client, api: EmbeddedApiServer
) -> None:
    """The budget is what is left of the renew deadline plus the margin before a standby can
    take over (lease duration - renew deadline): a request still unanswered then is abandoned,
    however long the client's own timeouts would wait."""
    clock = Clock()
    a = candidate(client, "a", clock)
    assert a.write_budget() == 0.0  # not leading
    assert a.try_acquire_or_renew()  # at 100: leading until 110, a standby may lead at 115
    clock.now = 109.0
    assert a.write_budget() == pytest.approx(6.0)
    clock.now = 110.0
    assert a.write_budget() == 0.0  # the renew deadline passed: no write at all
    client.write_budget = lambda: 0.2
    api.inject(Fault("POST", "/services", delay_s=3.0))  # answered after 3 s, had it waited
    body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "late", "namespace": "x"}}
    with pytest.raises(ApiError) as abandoned:
        client.create(Resource("", "v1", "services", "Service"), body)
    assert abandoned.value.code == 0


def test_only_the_election_s_own_lease_is_exempt_from_the_budget(
    client: Client, api: EmbeddedApiServer
) -> None:
    """The exemption is for coordination.k8s.io's Leases, not for any kind named Lease."""
    client.write_budget = lambda: 0.0
    other = Resource("example.com", "v1", "leases", "Lease")
    metadata = {"name": "x", "namespace": "inference"}
    body = {"apiVersion": "example.com/v1", "kind": "Lease", "metadata": metadata}
    mark = api.mark()
    with pytest.raises(NotLeading):
        client.create(other, body)
    assert api.writes(mark) == []


def test_a_lease_duration_in_fractions_of_a_second_is_written_rounded_up(client: Client) -> None:
    """leaseDurationSeconds is whole seconds: rounded down, 2.5 s was written as 2 s, below
    the 2.2 s renew deadline, and a standby could lead before this leader stopped."""
    config = LeaseConfig(RELEASE_NAMESPACE, NAME, "a", 2.5, 2.2, 0.5)
    assert LeaderElector(client, config).try_acquire_or_renew()
    written = lease(client)["leaseDurationSeconds"]
    assert isinstance(written, int)
    assert written >= config.lease_duration_s


def test_durations_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseConfig("ns", renew_deadline_s=15.0, lease_duration_s=15.0)


# --- two operators, as the chart runs them -------------------------------------------------


# The chart's durations (15 s lease, 10 s renew deadline, 2 s retry period) shortened, keeping
# room for a loaded machine: a leader whose process is stalled for 5 s still has 1 s of its
# renew deadline left. The process stopped (SIGSTOP) for 4 s in the takeover test's body ended
# the leader with a 3 s deadline (2 of 2 runs) and not with 6 s (2 of 2); test_deposed_leader.py's
# durations were doubled for the same cause.
DURATIONS = (8.0, 6.0, 0.2)


def replica(api: EmbeddedApiServer, identity: str) -> OperatorThread:
    """An operator as the chart runs it, on shortened durations (DURATIONS): leader election on
    the chart's Lease in the release's namespace, authorized by the chart's RBAC (its Role for
    the Lease included)."""
    lease_config = LeaseConfig(RELEASE_NAMESPACE, NAME, identity, *DURATIONS)
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
    resyncs(metrics_of(first))  # the leader reconciled k3-a whole since, twice
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
    wait_for(second.operator.leading.is_set, 5 * DURATIONS[0], "the standby to lead")
    create(client, "k3-c")
    wait_for(lambda: has_group(client, "k3-c"), what="the new leader to create k3-c's group")
    assert reconciles(first) == done


def test_a_leader_whose_renewals_hang_is_fenced_at_its_deadline_and_stops(
    replicas: tuple[OperatorThread, OperatorThread], api: EmbeddedApiServer
) -> None:
    """The API server holds every Lease read for 10 minutes (a hung connection): the leader's
    renewal gets only what is left of its renew deadline, the watchdog fences at the deadline,
    and the replica ends long before the hung request would have answered (waiting for it, the
    waits below would time out)."""
    first, _ = replicas
    api.inject(Fault("GET", "/leases/", delay_s=600.0, times=1000))
    wait_for(first.operator.fenced.is_set, 5 * DURATIONS[1], "the leader to fence itself")
    wait_for(lambda: first.failure is not None, 5 * DURATIONS[1], "the leader to stop")
    assert isinstance(first.failure, LeadershipLost)
    assert first.controller.queue.get(0) is None  # shut down: no more work handed out
    api.clear_faults()


def test_a_failed_start_ends_the_renewals_and_gives_the_lease_up(
    api: EmbeddedApiServer, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller fails to start once this replica leads: `run` raises, and the thread that
    renews the Lease ends with it (it went on renewing, in-process, holding the Lease for good:
    no standby could take over)."""
    before = {t for t in threading.enumerate() if t.name == "kimi-lease"}
    op = replica(api, "first")

    def broken() -> None:
        raise RuntimeError("the controller could not start")

    monkeypatch.setattr(op.controller, "start", broken)
    op._thread.start()  # as __enter__ does, without its check that it started
    wait_for(lambda: op.failure is not None, 5 * DURATIONS[0], "the failed start")
    assert isinstance(op.failure, RuntimeError)
    renewing = [t for t in threading.enumerate() if t.name == "kimi-lease" and t not in before]
    assert not any(t.is_alive() for t in renewing)
    assert lease(client)["holderIdentity"] == ""  # given up: a standby takes over at once
