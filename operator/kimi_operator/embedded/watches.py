"""Watches resumed from a resourceVersion, as kube-apiserver's watch cache serves them, for the
embedded API server (embedded.server).

kube-apiserver keeps a window of recent events of each resource. A watch that names a
`resourceVersion` gets every event after it, in order, then the live ones; one whose version is
older than the window gets 410 Gone (`Expired`: the client lists again). With
`allowWatchBookmarks=true` a BOOKMARK carrying the current resourceVersion comes about every
minute, so a client whose objects do not change still resumes from a recent version. Here each
resource's `Log` keeps its last `window` events (a server attribute); `follow` streams from a
version. Versions are global and every event carries a new one (a deletion's too), recorded on the
server's thread as soon as it is given out, so "every event after N" is exact.
"""

import asyncio
import collections
import json
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp.web
import kmock

Event = dict[str, Any]


class Expired(Exception):
    """A watch from a version older than the history kept (kube-apiserver's 410 Gone, reason
    Expired, in its words)."""

    def __init__(self, version: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {version} ({oldest})")


def start_of(query: Mapping[str, str]) -> int | None:
    """The version a watch starts after; None: from the objects there are (no resourceVersion,
    "0", or `sendInitialEvents=true`). 400 for a version that is not one."""
    version = query.get("resourceVersion") or "0"
    if query.get("sendInitialEvents") == "true" or version == "0":
        return None
    if not version.isdigit():
        message = f'resourceVersion: Invalid value: "{version}": not a resource version'
        raise kmock.KubernetesError(400, "BadRequest", message)
    return int(version)


def bookmark(
    api_version: str, kind: str, version: int, annotations: Mapping[str, str] | None = None
) -> Event:
    """A BOOKMARK event: all the events of the watch up to `version` have been sent."""
    metadata: dict[str, Any] = {"resourceVersion": str(version)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "type": "BOOKMARK",
        "object": {"kind": kind, "apiVersion": api_version, "metadata": metadata},
    }


class Log:
    """The last events of one resource, oldest first, with their versions."""

    def __init__(self) -> None:
        self._events: collections.deque[tuple[int, Event]] = collections.deque()
        self._expired_through = 0  # the version of the last event pushed out of the window
        self._arrived = asyncio.Event()  # set (and replaced) by each event recorded

    def record(self, version: int, event: Event, *, window: int) -> None:
        self._events.append((version, event))
        while len(self._events) > window:
            self._expired_through = self._events.popleft()[0]
        self._arrived.set()
        self._arrived = asyncio.Event()

    def since(self, version: int) -> list[tuple[int, Event]]:
        """The events after `version`, oldest first; `Expired` when one has left the window."""
        if version < self._expired_through:
            raise Expired(version, self._expired_through)
        newer = []
        for entry in reversed(self._events):  # a watcher is mostly caught up: the newest few
            if entry[0] <= version:
                break
            newer.append(entry)
        newer.reverse()
        return newer

    async def wait(self, timeout_s: float) -> None:
        """Until the next event is recorded, or `timeout_s` passed."""
        arrived = self._arrived
        try:
            async with asyncio.timeout(None if math.isinf(timeout_s) else timeout_s):
                await arrived.wait()
        except TimeoutError:
            pass


async def follow(
    log: Log,
    version: int,
    *,
    latest: Callable[[], int],
    bookmark_every_s: float | None,
    bookmark: Callable[[int], Event],
) -> AsyncIterator[Event]:
    """The events of `log` after `version`, then each one as it comes; with `bookmark_every_s`,
    `bookmark(version)` that often, carrying the newest version whose events have all been
    sent (`latest()` when caught up). `Expired` at once when `version` is too old; the stream
    ends when the watcher fell so far behind that events it had not sent left the window (the
    client resumes from its last version, and gets 410 if that is too old)."""
    every_s = bookmark_every_s if bookmark_every_s is not None else math.inf
    deadline = time.monotonic() + every_s
    newer = log.since(version)
    while True:
        if newer:
            for _, event in newer:
                yield event
            version = newer[-1][0]
        else:
            # Caught up (nothing newer, and no await since): every event up to the server's
            # current version has been sent, versions being given out and recorded together.
            version = max(version, latest())
            now = time.monotonic()
            if now >= deadline:
                deadline = now + every_s
                yield bookmark(version)
            else:
                await log.wait(deadline - now)
        try:
            newer = log.since(version)
        except Expired:
            return


async def send(
    raw: aiohttp.web.BaseRequest, events: AsyncIterator[Any]
) -> aiohttp.web.StreamResponse:
    """A watch's events as `application/json` (client-go decodes a stream by its content type):
    one JSON line each, bytes as they are; until they end or the client goes away."""
    response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(raw)
    try:
        async for event in events:
            chunk = event if isinstance(event, bytes) else json.dumps(event).encode() + b"\n"
            if chunk:
                await response.write(chunk)
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away, or a fault cut the stream
    return response
