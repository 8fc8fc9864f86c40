"""A keyed work queue in the style of client-go's workqueue, on an injectable clock.

- A key is processed by one worker at a time: one added while it is processed is queued again
  when the worker is `done` with it, never handed to a second worker.
- A key already waiting is not queued twice (the first reason given is kept, for metrics).
- `add_after`: later, e.g. a reconcile that asked to run again after a deadline; of several, the
  soonest wins.
- `retry`: later and **not before**. A retry folds in whatever was queued for the key, and until
  it is due no `add` or `add_after` brings it forward: the wait was the server's (Retry-After) or
  our backoff after errors, and the retry reads the newest state anyway. `failures` counts the
  retries in a row (the backoff grows with them) until `forget`.
- `remove`: the key's waits and failures are dropped (a deletion is processed at once).

The clock is any monotonic `() -> seconds`; tests pass a virtual one and poll with `get(0)`.
"""

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable

Clock = Callable[[], float]
RETRY = "retry"


class WorkQueue:
    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._ready: deque[str] = deque()
        self._dirty: dict[str, str] = {}  # key -> reason: ready, or queued again once done
        self._processing: set[str] = set()
        self._waiting: dict[str, tuple[float, str]] = {}  # key -> (when, reason)
        self._timers: list[tuple[float, int, str]] = []  # heap of (when, seq, key), lazily pruned
        self._seq = 0
        self._failures: dict[str, int] = {}
        self._shut_down = False

    def add(self, key: str, reason: str) -> None:
        with self._cond:
            self._add(key, reason)

    def add_after(self, key: str, delay_s: float, reason: str) -> None:
        with self._cond:
            if delay_s <= 0:
                self._add(key, reason)
                return
            when = self._clock() + delay_s
            pending = self._waiting.get(key)
            if pending is None or (pending[1] != RETRY and when < pending[0]):
                self._wait(key, when, reason)

    def retry(self, key: str, delay_s: float) -> None:
        with self._cond:
            self._failures[key] = self._failures.get(key, 0) + 1
            if self._dirty.pop(key, None) is not None and key not in self._processing:
                self._ready.remove(key)
            self._wait(key, self._clock() + delay_s, RETRY)

    def failures(self, key: str) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def forget(self, key: str) -> None:
        """The key succeeded: its next failure starts the backoff afresh."""
        with self._cond:
            self._failures.pop(key, None)

    def remove(self, key: str) -> None:
        with self._cond:
            self._failures.pop(key, None)
            self._waiting.pop(key, None)

    def waiting(self, key: str) -> tuple[float, str] | None:
        """(when, reason) of the key's delayed add, if any."""
        with self._cond:
            return self._waiting.get(key)

    def get(self, timeout_s: float | None = None) -> tuple[str, str] | None:
        """The next key to process and why, now the caller's until `done`; None once shut down,
        or when nothing is due within `timeout_s` (0: do not wait)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while not self._shut_down:
                now = self._clock()
                self._promote(now)
                if self._ready:
                    key = self._ready.popleft()
                    self._processing.add(key)
                    return key, self._dirty.pop(key)
                wait = self._timers[0][0] - now if self._timers else None
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)
            return None

    def done(self, key: str) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._ready.append(key)
                self._cond.notify()

    def shut_down(self) -> None:
        with self._cond:
            self._shut_down = True
            self._cond.notify_all()

    def _add(self, key: str, reason: str) -> None:
        pending = self._waiting.get(key)
        if self._shut_down or key in self._dirty or (pending is not None and pending[1] == RETRY):
            return
        self._dirty[key] = reason
        if key not in self._processing:
            self._ready.append(key)
            self._cond.notify()

    def _wait(self, key: str, when: float, reason: str) -> None:
        self._waiting[key] = (when, reason)
        self._seq += 1
        heapq.heappush(self._timers, (when, self._seq, key))
        self._cond.notify()

    def _promote(self, now: float) -> None:
        """Add the keys whose delayed add is due."""
        while self._timers and self._timers[0][0] <= now:
            when, _, key = heapq.heappop(self._timers)
            pending = self._waiting.get(key)
            if pending is None or pending[0] != when:
                continue  # replaced or removed since
            del self._waiting[key]
            self._add(key, pending[1])
