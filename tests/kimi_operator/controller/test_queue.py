"""The work queue on a virtual clock: one worker per key, pending keys deduplicated, delayed adds,
and a retry that nothing brings forward."""

import threading

from kimi_operator.controller.queue import WorkQueue
from tests.kimi_operator.controller.clock import VirtualClock


def queue() -> tuple[WorkQueue, VirtualClock]:
    clock = VirtualClock()
    return WorkQueue(clock), clock


def test_a_key_waiting_is_queued_once_with_its_first_reason() -> None:
    q, _ = queue()
    q.add("a", "create")
    q.add("b", "create")
    q.add("a", "refresh")
    assert q.get(0) == ("a", "create")
    assert q.get(0) == ("b", "create")
    assert q.get(0) is None


def test_a_key_added_while_processed_waits_for_done() -> None:
    q, _ = queue()
    q.add("a", "create")
    assert q.get(0) == ("a", "create")
    q.add("a", "refresh")
    q.add("a", "resync")
    assert q.get(0) is None  # never to a second worker
    q.done("a")
    assert q.get(0) == ("a", "refresh")
    q.done("a")
    assert q.get(0) is None


def test_of_several_delayed_adds_the_soonest_wins() -> None:
    q, clock = queue()
    q.add_after("a", 5.0, "requeue")
    q.add_after("a", 1.0, "requeue")
    q.add_after("a", 3.0, "requeue")
    clock.advance(0.99)
    assert q.get(0) is None
    clock.advance(0.01)
    assert q.get(0) == ("a", "requeue")
    q.done("a")
    clock.advance(10)
    assert q.get(0) is None  # the later ones were folded into it


def test_nothing_brings_a_retry_forward() -> None:
    """A 429 said Retry-After: 2. A child's refresh, a late event, a resync and a reconcile's own
    requeue all come meanwhile: the key is not handed out before the 2 s are over."""
    q, clock = queue()
    q.add("a", "create")
    assert q.get(0) == ("a", "create")
    q.add("a", "refresh")  # its new LeaderWorkerSet's watch event, during the reconcile
    q.retry("a", 2.0)  # then its Service got the 429
    q.done("a")
    for reason in ("refresh", "update", "resync"):
        q.add("a", reason)
    q.add_after("a", 0.5, "requeue")
    clock.advance(1.999)
    assert q.get(0) is None
    clock.advance(0.001)
    assert q.get(0) == ("a", "retry")
    assert q.failures("a") == 1


def test_a_retry_takes_a_key_out_of_the_ready_queue() -> None:
    q, clock = queue()
    q.add("a", "refresh")
    q.retry("a", 1.0)
    assert q.get(0) is None
    clock.advance(1.0)
    assert q.get(0) == ("a", "retry")


def test_failures_count_until_forgotten() -> None:
    q, clock = queue()
    for expected in (1, 2, 3):
        q.retry("a", 1.0)
        clock.advance(1.0)
        assert q.get(0) == ("a", "retry")
        q.done("a")
        assert q.failures("a") == expected
    q.forget("a")
    assert q.failures("a") == 0


def test_remove_lets_a_deletion_past_a_pending_retry() -> None:
    q, _ = queue()
    q.retry("a", 60.0)
    q.remove("a")
    q.add("a", "delete")
    assert q.get(0) == ("a", "delete")
    assert (q.failures("a"), q.waiting("a")) == (0, None)


def test_shut_down_wakes_a_waiting_worker() -> None:
    q = WorkQueue()
    got: list[tuple[str, str] | None] = []
    worker = threading.Thread(target=lambda: got.append(q.get()))
    worker.start()
    q.shut_down()
    worker.join(10)
    assert not worker.is_alive()
    assert got == [None]
    q.add("a", "create")
    assert q.get(0) is None
