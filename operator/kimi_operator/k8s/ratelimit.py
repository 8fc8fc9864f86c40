"""A client-side rate limit on API requests with client-go's semantics (`--kube-api-qps`,
`--kube-api-burst`; client-go's token bucket): up to `burst` requests at once, then `qps` a
second on average; a request over the limit waits its turn, never refused. It keeps a runaway
loop of this operator from flooding the API server.
"""

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """`burst` tokens, refilled at `qps` a second; each request takes one, waiting for it when
    there is none (tokens go into debt, so requests are served in the order they asked)."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a rate limit needs qps > 0 and burst >= 1, got {qps} and {burst}")
        self.qps, self.burst = qps, burst
        self._clock, self._sleep = clock, sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take a token; the seconds to wait before using it (0: at once)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def wait(self) -> None:
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)
