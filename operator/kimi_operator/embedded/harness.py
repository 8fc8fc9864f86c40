"""`EmbeddedApiServer`: the embedded API server (embedded.server) on 127.0.0.1 in a thread of its
own, and what the demo, the tests and the benchmark ask of it: CRDs and objects stored as an admin
would, tokens, faults, and the logs of writes, reads and KimiDeployment statuses."""

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self, TypeVar

import kmock

from kimi_operator.embedded.authorization import Check
from kimi_operator.embedded.faults import Fault
from kimi_operator.embedded.server import ApiServer
from kimi_operator.embedded.timeline import Read, Write

T = TypeVar("T")


class EmbeddedApiServer:
    """`ApiServer` on 127.0.0.1 in a thread of its own; a context manager."""

    def __init__(self) -> None:
        self.url = ""
        self._handler: ApiServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="embedded-api-server", daemon=True)
        self._failure: BaseException | None = None

    def __enter__(self) -> Self:
        self._thread.start()
        self._ready.wait(timeout=30)
        if self._failure is not None or not self.url:
            raise RuntimeError(f"the embedded API server did not start: {self._failure}")
        return self

    def __exit__(self, *_: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:  # reported by __enter__
            self._failure = error
            self._ready.set()

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with ApiServer() as handler, kmock.Server(handler, host="127.0.0.1") as server:
            self._handler = handler
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def call(self, fn: Callable[[ApiServer], T]) -> T:
        """Run `fn` on the server's own thread (its state is not thread-safe)."""
        assert self._loop is not None
        assert self._handler is not None
        handler = self._handler

        async def run() -> T:
            return fn(handler)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    def install_crds(self, crds: list[Mapping[str, Any]]) -> None:
        def install(handler: ApiServer) -> None:
            for crd in crds:
                handler.install_crd(crd)

        self.call(install)

    def store(self, objects: Sequence[Mapping[str, Any]]) -> None:
        """Keep these objects (ServiceAccounts, RBAC) as a cluster admin's apply would."""

        def store(handler: ApiServer) -> None:
            for obj in objects:
                handler.store(obj)

        self.call(store)

    def issue_token(self, namespace: str, name: str) -> str:
        """A bearer token for the ServiceAccount `namespace/name`."""
        return self.call(lambda handler: handler.authorization.issue_token(namespace, name))

    def checks(self) -> set[Check]:
        """Every authorization decision made so far about a user with a token."""
        return self.call(lambda handler: set(handler.authorization.checks))

    def inject(self, *faults: Fault) -> None:
        def inject(handler: ApiServer) -> None:
            for fault in faults:
                handler.faults.inject(fault)

        self.call(inject)

    def clear_faults(self) -> None:
        self.call(lambda handler: handler.faults.clear())

    def injected(self) -> dict[str, int]:
        """How many faults were answered, by `Fault.kind`."""
        return self.call(lambda handler: dict(handler.faults.injected))

    def remove_crd(self, name: str) -> None:
        """Delete the CRD `name` and every object of its API."""
        assert self._loop is not None
        assert self._handler is not None
        removal = self._handler.remove_crd(name)
        asyncio.run_coroutine_threadsafe(removal, self._loop).result(timeout=30)

    def observe(self, observer: Callable[[ApiServer], None]) -> None:
        """Call `observer` (on the server's thread) after every write to an object."""
        self.call(lambda handler: handler.observers.append(observer))

    def status_writes(self, since: int = 0) -> list[tuple[str, dict[str, Any]]]:
        """("namespace/name", status) of each KimiDeployment status write since `since`."""
        return self.call(lambda handler: list(handler.status_log[since:]))

    def status_mark(self) -> int:
        return self.call(lambda handler: len(handler.status_log))

    def stale_status_writes(self, since: int = 0) -> list[tuple[str, dict[str, Any]]]:
        """("namespace/name", status) of each KimiDeployment status refused as stale (409)."""
        return self.call(lambda handler: list(handler.stale_status_log[since:]))

    def stale_status_mark(self) -> int:
        return self.call(lambda handler: len(handler.stale_status_log))

    def mark(self) -> int:
        """A position in the log of writes, for `writes(since=...)`."""
        return self.call(lambda handler: len(handler.timeline))

    def reads(self, since: int = 0) -> list[Read]:
        """The lists and watches since the `since`-th, in order."""
        return self.call(lambda handler: handler.reads[since:])

    def writes(self, since: int = 0) -> list[Write]:
        """The state-changing requests (POST, PUT, PATCH, DELETE) since `since`, in order."""
        return self.call(lambda handler: [Write(*entry) for entry in handler.timeline[since:]])
