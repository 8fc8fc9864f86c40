"""Faults injected into the embedded API server: error answers (409, 429 with Retry-After, 5xx),
answers held back past a client's timeout, and watch streams cut or gone silent, each on a
schedule; and how many of each kind were answered (the reliability scenarios' report)."""

import asyncio
import collections
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import attrs
import kmock

T = TypeVar("T")


@dataclass(frozen=True)
class Fault:
    """Answer requests whose method and path match with `status`, `times` times in all, hitting
    every `every`-th match only (a schedule: 1 hits each one).

    `retry_after` (seconds) goes with a 429 as its Retry-After header. `delay_s` holds the answer
    back that long first (the request is still served unless `status` is set): longer than the
    client's read timeout, it is a timeout whose write may have happened anyway. `drop_watch`
    (a GET with ?watch=true) cuts a stream, open or to come, in the middle of an event, as a
    dropped connection does.
    """

    method: str
    path_contains: str
    status: int = 0  # 0: no error answer (with delay_s or drop_watch)
    times: int = 1
    every: int = 1
    retry_after: int | None = None
    delay_s: float = 0.0
    drop_watch: bool = False
    # With drop_watch: the stream goes silent instead (open, no event nor bookmark ever again),
    # as a connection lost without a reset does.
    silent: bool = False
    message: str = ""  # the error answer's message ("injected <kind>" when empty)

    @property
    def kind(self) -> str:
        """The label faults are counted under: conflict, throttle, server-error, timeout,
        watch-drop, or http-<status>."""
        if self.drop_watch:
            return "watch-silence" if self.silent else "watch-drop"
        if self.delay_s and not self.status:
            return "timeout"
        return {409: "conflict", 429: "throttle"}.get(
            self.status, "server-error" if self.status >= 500 else f"http-{self.status}"
        )


@attrs.frozen
class InjectedError(kmock.KubernetesError):
    """An injected error answer; `retry_after` becomes the Retry-After header."""

    retry_after: int | None = None


class Faults:
    """The faults injected and not yet used up, and how many of each kind were answered."""

    def __init__(self) -> None:
        # [fault, times left, matches so far] of every injected fault
        self._pending: list[list[Any]] = []
        self.injected: collections.Counter[str] = collections.Counter()  # by `Fault.kind`

    def inject(self, fault: Fault) -> None:
        self._pending.append([fault, fault.times, 0])

    def clear(self) -> None:
        """Forget the faults not yet used up (the counts of those answered stay)."""
        self._pending.clear()

    def match(self, request: kmock.Request, *, streaming: bool = False) -> Fault | None:
        """The fault to answer `request` with; `streaming`: the one to cut its watch stream
        with, now that an event is to be sent on it."""
        for entry in self._pending:
            fault, left, seen = entry
            if (
                left > 0
                and request.method == fault.method
                and fault.path_contains in request.url.path
                and fault.drop_watch == streaming
            ):
                entry[2] = seen + 1
                if (seen + 1) % fault.every:
                    continue
                entry[1] = left - 1
                self.injected[fault.kind] += 1
                return fault  # type: ignore[no-any-return]
        return None


async def answer_with(fault: Fault, serve: Callable[[], Awaitable[T]]) -> T:
    """Answer with an error, or late, as injected (`serve`: the answer without the fault)."""
    if fault.delay_s:
        await asyncio.sleep(fault.delay_s)
    if fault.status:
        raise InjectedError(
            status=fault.status,
            reason="Injected",
            message=fault.message or f"injected {fault.kind}",
            retry_after=fault.retry_after,
        )
    return await serve()
