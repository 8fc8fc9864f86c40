"""Leader election on a `coordination.k8s.io/v1` Lease, as Kubernetes' own controllers do it
(client-go's leaderelection): of several operator replicas one reconciles, the others stand by
(docs/architecture.md, "Several replicas").

The Lease names its holder and how long a claim lasts. The holder writes `renewTime` every retry
period; a standby takes the Lease over once it has seen the same record unchanged for a whole
lease duration, timed on its own monotonic clock (never by comparing the timestamps written by
another machine, whose clock may be off). Every write is a compare-and-swap on the
resourceVersion read just before, so two standbys never both win. A leader that cannot renew
within the renew deadline stops leading before anyone else can take over (renew deadline <
lease duration); one that stops gracefully gives the Lease up, so a standby takes over within a
retry period instead of a lease duration.

Fencing (docs/architecture.md, "Fencing"): a renewal's requests get only what is left of the
renew deadline; a watchdog declares the leadership lost at the deadline even while a renewal is
in flight; `write_budget()` is what the client asks before every write (how long it may still
take). The leader dates its lease from when its renewal started, a standby dates what it saw from
when its read returned: both err on the side of the other replica.
"""

import datetime
import logging
import math
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kimi_operator.controller.queue import Clock
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import LEASE

log = logging.getLogger("kimi_operator.leader")
WallClock = Callable[[], datetime.datetime]


def default_identity() -> str:
    """The pod's name (its hostname) and a random part: a restarted container is a new
    candidate, not the old leader back."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def micro_time(moment: datetime.datetime) -> str:
    """A Lease's `acquireTime`/`renewTime` (a MicroTime: RFC 3339 with microseconds)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str = "kimi-operator"
    identity: str = field(default_factory=default_identity)
    lease_duration_s: float = 15.0  # how long a standby waits on a record that does not change
    renew_deadline_s: float = 10.0  # how long the leader keeps trying to renew before it stops
    retry_period_s: float = 2.0  # how often the leader renews and a standby tries

    def __post_init__(self) -> None:
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                "leader election needs retry period < renew deadline < lease duration, got "
                f"{self.retry_period_s} s, {self.renew_deadline_s} s, {self.lease_duration_s} s"
            )


class LeaderElector:
    """One candidate. `acquire` blocks until it leads; `hold` renews until told to stop or the
    Lease is lost; `release` gives it up."""

    def __init__(
        self,
        client: Client,
        config: LeaseConfig,
        *,
        clock: Clock = time.monotonic,
        wall_clock: WallClock = _utc_now,
    ) -> None:
        self.client, self.config = client, config
        self._clock, self._wall_clock = clock, wall_clock
        self._observed: Mapping[str, Any] | None = None  # the Lease's spec as last read or written
        self._observed_at = 0.0  # when `_observed` was last seen to change (our clock)
        self._renewed_at: float | None = None  # when this candidate last wrote the Lease as holder

    @property
    def holder(self) -> str:
        """The holder this candidate saw last ("" when none)."""
        return str((self._observed or {}).get("holderIdentity") or "")

    def leading(self) -> bool:
        """Whether this candidate holds the Lease and is within its renew deadline."""
        renewed = self._renewed_at
        return (
            renewed is not None
            and self.holder == self.config.identity
            and self._clock() - renewed < self.config.renew_deadline_s
        )

    def write_budget(self) -> float:
        """How long a write may still take: what is left of the renew deadline plus the margin
        before any standby can take over (lease duration - renew deadline); 0 when not leading.
        A request bounded by it ends before another replica can lead."""
        deadline = self.deadline()
        if deadline is None or not self.leading():
            return 0.0
        margin = self.config.lease_duration_s - self.config.renew_deadline_s
        return deadline - self._clock() + margin

    def _time_left(self, deadline: float | None) -> float | None:
        """Seconds a request may take before `deadline` (our clock); None: no deadline."""
        if deadline is None:
            return None
        left = deadline - self._clock()
        if left <= 0:
            raise ApiError("lease renewal: the renew deadline has passed", code=0)
        return left

    def try_acquire_or_renew(self, deadline: float | None = None) -> bool:
        """One attempt: create the Lease, renew it, or take over an expired or released one.
        `deadline` (our clock): every request of it must be answered by then."""
        config, now = self.config, self._clock()
        stamp = micro_time(self._wall_clock())
        try:
            lease = self._read(self._time_left(deadline))
            seen = self._clock()  # after the read: a slow answer must not eat the margin
            if lease is None:
                spec = self._spec(stamp, acquired=stamp, transitions=0)
                body = {
                    "apiVersion": LEASE.api_version,
                    "kind": LEASE.kind,
                    "metadata": {"name": config.name, "namespace": config.namespace},
                    "spec": spec,
                }
                # 409: another candidate created it first
                self.client.create(LEASE, body, timeout_s=self._time_left(deadline))
                return self._won(spec, now)
            spec = lease.get("spec") or {}
            if spec != self._observed:
                self._observed, self._observed_at = spec, seen
            holder = spec.get("holderIdentity") or ""
            mine = holder == config.identity
            duration = float(spec.get("leaseDurationSeconds") or config.lease_duration_s)
            if holder and not mine and seen < self._observed_at + duration:
                return False  # held by another candidate, who renewed it within a lease duration
            transitions = int(spec.get("leaseTransitions") or 0)
            new = self._spec(
                stamp,
                acquired=(spec.get("acquireTime") or stamp) if mine else stamp,
                transitions=transitions if mine else transitions + 1,
            )
            self._write(lease, new, self._time_left(deadline))
        except ApiError as error:
            log.info("lease %s/%s: %s", config.namespace, config.name, error)
            return False
        if not mine:
            log.info("took over lease %s/%s from %r", config.namespace, config.name, holder)
        return self._won(new, now)

    def _read(self, timeout_s: float | None = None) -> dict[str, Any] | None:
        return self.client.get(LEASE, self.config.namespace, self.config.name, timeout_s=timeout_s)

    def _write(
        self, lease: Mapping[str, Any], spec: Mapping[str, Any], timeout_s: float | None = None
    ) -> None:
        """The read's resourceVersion stays in the body: a compare-and-swap (409 when another
        candidate wrote since)."""
        self.client.replace(LEASE, {**lease, "spec": spec}, timeout_s=timeout_s)

    def _spec(self, stamp: str, *, acquired: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.config.identity,
            # Whole seconds, rounded up: never below the renew deadline the config was checked
            # against (2.5 s written as 2 s would let a standby in before this leader stops).
            "leaseDurationSeconds": math.ceil(self.config.lease_duration_s),
            "acquireTime": acquired,
            "renewTime": stamp,
            "leaseTransitions": transitions,
        }

    def _won(self, spec: Mapping[str, Any], started: float) -> bool:
        """Leading, dated from when the winning attempt started (before its requests)."""
        self._observed, self._observed_at, self._renewed_at = spec, started, started
        return True

    def deadline(self) -> float | None:
        """When (our clock) the leadership ends unless renewed; None when not leading."""
        renewed = self._renewed_at
        return None if renewed is None else renewed + self.config.renew_deadline_s

    def acquire(self, stop: threading.Event) -> bool:
        """Try every retry period (with a little jitter, so that standbys do not ask in step)
        until this candidate leads (True) or `stop` is set (False)."""
        said = ""
        while not stop.is_set():
            if self.try_acquire_or_renew():
                log.info("leading: lease %s/%s", self.config.namespace, self.config.name)
                return True
            if self.holder and self.holder != said:
                log.info("standing by: %r leads", self.holder)
                said = self.holder
            stop.wait(self.config.retry_period_s * random.uniform(1.0, 1.2))
        return False

    def hold(self, stop: threading.Event) -> bool:
        """Renew every retry period until `stop` is set (True), or until the Lease is lost
        (False): another candidate holds it, or no renewal succeeded within the renew
        deadline (each renewal is bounded by it). The caller must stop reconciling at once when
        it is lost; a `Watchdog` tells it at the deadline even while a renewal hangs."""
        while not stop.wait(self.config.retry_period_s):
            if self.try_acquire_or_renew(self.deadline()):
                continue
            if self.holder != self.config.identity or not self.leading():
                log.error(
                    "lost lease %s/%s (holder now %r)",
                    self.config.namespace,
                    self.config.name,
                    self.holder,
                )
                self._renewed_at = None
                return False
        return True

    def release(self) -> None:
        """Give the Lease up if this candidate still holds it: a standby takes over at its
        next try. Best effort: a failure leaves the Lease to expire."""
        config = self.config
        try:
            lease = self._read()
            spec = (lease or {}).get("spec") or {}
            if lease is None or spec.get("holderIdentity") != config.identity:
                return
            stamp = micro_time(self._wall_clock())
            released = {
                **spec,
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": stamp,
                "renewTime": stamp,
            }
            self._write(lease, released)
            self._observed, self._renewed_at = released, None
            log.info("released lease %s/%s", config.namespace, config.name)
        except ApiError as error:
            log.warning("lease %s/%s not released: %s", config.namespace, config.name, error)


class Watchdog:
    """Declares the leadership lost at the renew deadline, whether or not a renewal is in
    flight: `on_lost` is called once, from the thread that runs `run` (or `poll`)."""

    def __init__(
        self, elector: LeaderElector, on_lost: Callable[[], None], *, clock: Clock = time.monotonic
    ) -> None:
        self.elector, self.on_lost, self._clock = elector, on_lost, clock
        self.fired = False

    def poll(self) -> bool:
        """Whether the leadership is lost (calling `on_lost` the first time it is found so)."""
        if not self.fired and not self.elector.leading():
            self.fired = True
            log.error("lease %s: renew deadline passed; leadership lost", self.elector.config.name)
            self.on_lost()
        return self.fired

    def run(self, stop: threading.Event) -> None:
        """Until `stop` or the loss: wake at each deadline (it moves on with each renewal)."""
        while not self.poll():
            deadline = self.elector.deadline()
            wait = (
                self.elector.config.retry_period_s if deadline is None else deadline - self._clock()
            )
            if stop.wait(max(0.001, wait)):
                return
