"""Lean list-and-watch: the KimiDeployments, and the children whose status the operator reports
(LeaderWorkerSets, ComputeDomains, the weights caches' Jobs and claims).

Each watch is the client-go pattern (docs/architecture.md, "Watches"): list for a
resourceVersion, watch from it with bookmarks, resume from the last version seen after a dropped
or silent stream (no event nor bookmark for `Client`'s inactivity timeout), list again only on
410 Gone (after a jittered delay that doubles while 410s follow each other, as client-go's
reflector backs off), retry after a jittered delay, and wait quietly while the resource is not
served (its CRD not installed). A watch runs in a thread of its own on the operator's one HTTP
client (`Client.watch`) and hands each event to a callback that must not block (the controller's
only enqueue). A child event costs one JSON decode: all the operator needs from it is which
KimiDeployment to refresh (`owners_to_refresh`). A KimiDeployment watch hands whole objects, and
the objects of each listing with the event type None (as after a restart: children may have
drifted meanwhile). A child watch lists one object at first, for the version only; after a 410
it lists them all and hands them on as RELISTED: one that changed during the gap is not lost.
An object the watch knew (listed, or seen in an event) that a listing after a 410 lacks was
deleted during the gap: it is handed on as DELETED, as client-go's Replace does.
A watch whose thread died of an unexpected error says so (`failed`; /healthz fails on it).
"""

import json
import logging
import random
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kimi_operator.api import constants as c
from kimi_operator.k8s.client import Client, WatchStream
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import Resource

log = logging.getLogger("kimi_operator.watch")

# (event type, object): ADDED, MODIFIED or DELETED; None for an object of a listing.
EventHandler = Callable[[str | None, Mapping[str, Any]], None]
# The KimiDeployment uid whose child changed.
OwnerChanged = Callable[[str], None]
RETRY_S = 5.0
NOT_SERVED_RETRY_S = 30.0
# After 410 Gone: list again after this (jittered, doubling while 410s follow each other up to
# RELIST_MAX_S), as client-go's reflector backs off (0.8 s, 30 s).
RELIST_S = 0.8
RELIST_MAX_S = 30.0
HTTP_GONE = 410  # the version asked for is older than the server's history
RELISTED = "RELISTED"  # a child listed again after 410 Gone: it may have changed meanwhile


def owners_to_refresh(event_type: str | None, obj: Mapping[str, Any]) -> list[str]:
    """The uids of the KimiDeployments to refresh for the event's object, when the event can
    change what their status says: a status appeared or changed, or the object is gone. A child
    the operator has just created has no status yet: nothing to refresh. The KimiDeployment that
    controls the object; for a shared weights cache (no controller), every one using it."""
    if event_type not in ("ADDED", "MODIFIED", "DELETED", RELISTED):
        return []
    if event_type != "DELETED" and not obj.get("status"):
        return []
    refs = [
        ref
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
        if ref.get("kind") == c.KIND and ref.get("uid")
    ]
    controllers = [ref["uid"] for ref in refs if ref.get("controller")]
    return controllers or [ref["uid"] for ref in refs]


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def json_lines(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """Each line of a watch stream, decoded (a line may span chunks)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)


def refreshing(on_owner: OwnerChanged) -> EventHandler:
    """A child watch's handler: refresh the deployments an event concerns."""

    def handle(event_type: str | None, obj: Mapping[str, Any]) -> None:
        for uid in owners_to_refresh(event_type, obj):
            on_owner(uid)

    return handle


class Watch:
    """One resource, in one namespace or all of them; `run` until `stop`. `with_items`: hand
    the listed objects too (a child watch lists one item, for the version only)."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        namespace: str | None,
        on_event: EventHandler,
        *,
        label_selector: str = "",
        with_items: bool = False,
        retry_s: float = RETRY_S,
        not_served_retry_s: float = NOT_SERVED_RETRY_S,
        relist_s: float = RELIST_S,
        on_listed: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.on_event = on_event
        self.label_selector = label_selector
        self.with_items = with_items
        self.retry_s = retry_s
        self.not_served_retry_s = not_served_retry_s
        self.relist_s = relist_s
        self.on_listed = on_listed  # called once each whole list has been handed on
        self._expired = 0  # 410s in a row (the relist's backoff)
        # What the watch knows is there (listed, or seen in an event), by namespace and name: the
        # metadata a DELETED event needs, for those a listing after a 410 no longer has.
        self._known: dict[tuple[str, str], dict[str, Any]] = {}
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._stream: WatchStream | None = None
        self.failed: BaseException | None = None  # what ended `run` unexpectedly
        self.version: str | None = None  # the last resourceVersion seen; None: list first
        self._not_served_said = False

    def stop(self) -> None:
        """Ends `run`, at once even when a watch is waiting for the next event."""
        self._stopping.set()
        with self._lock:
            if self._stream is not None:
                self._stream.interrupt()

    def run(self) -> None:
        try:
            self._run()
        except Exception as error:  # a bug: logged, and /healthz fails on it (runner.healthy)
            log.exception("watching %s: the watch thread died", self.resource.kind)
            self.failed = error

    def _run(self) -> None:
        relisting = False  # a child watch lists every object after a 410, and hands them on
        while not self._stopping.is_set():
            try:
                if self.version is None:
                    self.version = self._list(handing_on=self.with_items or relisting)
                    if self.version is None:
                        self._stopping.wait(self.not_served_retry_s)
                        continue
                self._watch(self.version)  # ended by the server: resumed from the last version
            except (ApiError, ValueError) as error:
                if isinstance(error, ApiError) and error.code == HTTP_GONE:
                    self.version, relisting = None, True
                    self._expired += 1
                    backoff = min(RELIST_MAX_S, self.relist_s * 2 ** (self._expired - 1))
                    self._stopping.wait(backoff * random.uniform(1.0, 2.0))
                    continue
                if self._stopping.is_set():
                    return
                delay = self.retry_s * random.uniform(1.0, 2.0)  # jitter, as client-go's
                log.warning("watching %s: %s; resuming in %.1f s", self.resource.kind, error, delay)
                self._stopping.wait(delay)

    def _list(self, *, handing_on: bool) -> str | None:
        """The collection's resourceVersion (None: not served), its objects handed on when
        `handing_on` (all of them: the client reads every page)."""
        listing = self.client.listing(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            limit=None if handing_on else 1,
        )
        if listing is None:
            if not self._not_served_said:
                log.info(
                    "%s is not served; looking again every %.0f s",
                    self.resource.kind,
                    self.not_served_retry_s,
                )
                self._not_served_said = True
            return None
        self._not_served_said = False
        if not handing_on:
            return listing.version
        event_type = None if self.with_items else RELISTED
        gone = dict(self._known)
        self._known.clear()
        for item in listing.items:
            gone.pop(self._remember(item), None)
            self.on_event(event_type, item)
        for last in gone.values():  # deleted while the watch was too far behind
            self.on_event("DELETED", last)
        if self.on_listed is not None:
            self.on_listed()
        return listing.version

    def _remember(self, obj: Mapping[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        kept = ("name", "namespace", "uid", "resourceVersion", "ownerReferences")
        self._known[key := _key(obj)] = {"metadata": {k: meta[k] for k in kept if k in meta}}
        return key

    def _watch(self, version: str) -> None:
        """Stream events until the server ends the watch, keeping the last resourceVersion seen
        (`version`: a dropped stream resumes from there)."""
        stream = self.client.watch(
            self.resource, self.namespace, version=version, label_selector=self.label_selector
        )
        with self._lock:
            self._stream = stream
        try:
            if self._stopping.is_set():  # stopped while it connected
                stream.interrupt()
            with stream:
                for event in json_lines(stream.chunks()):
                    self.version = self._handle(event) or self.version
        finally:
            with self._lock:
                self._stream = None

    def _handle(self, event: Mapping[str, Any]) -> str | None:
        """Hand the event on (a bookmark only moves the version); its resourceVersion."""
        obj = event.get("object") or {}
        event_type = event.get("type")
        if event_type == "ERROR":
            if obj.get("code") == HTTP_GONE:
                raise ApiError(f"watch {self.resource.kind}: too old", code=HTTP_GONE)
            raise ValueError(f"watch error: {obj.get('message', obj)}")
        self._expired = 0  # the watch is current again
        if event_type in ("ADDED", "MODIFIED"):
            self._remember(obj)
        elif event_type == "DELETED":
            self._known.pop(_key(obj), None)
        if event_type in ("ADDED", "MODIFIED", "DELETED"):
            self.on_event(event_type, obj)
        version: str | None = (obj.get("metadata") or {}).get("resourceVersion")
        return version
