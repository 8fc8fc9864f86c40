"""Lean list-and-watch: the KimiDeployments, and the children whose status the operator reports
(LeaderWorkerSets, ComputeDomains, the weights caches' Jobs and claims).

Each watch is the client-go pattern: list for a resourceVersion, watch from it with bookmarks,
list again on 410 Gone, reconnect from the last version seen after a dropped stream, and wait
quietly while the resource is not served (its CRD not installed). A watch runs in a thread of its
own on the operator's one HTTP client (`Client.watch`) and hands each event to a callback that
must not block (the controller's only enqueue: docs/architecture.md, "The controller loop").
A child event costs one JSON decode: all the operator needs from it is which KimiDeployment to
refresh (`owners_to_refresh`); a KimiDeployment watch hands whole objects, and the objects of
each listing with the event type None (as after a restart: children may have drifted meanwhile).
"""

import json
import logging
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
GONE = 410


def owners_to_refresh(event_type: str | None, obj: Mapping[str, Any]) -> list[str]:
    """The uids of the KimiDeployments to refresh for the event's object, when the event can
    change what their status says: a status appeared or changed, or the object is gone. A child
    the operator has just created has no status yet: nothing to refresh. The KimiDeployment that
    controls the object; for a shared weights cache (no controller), every one using it."""
    if event_type not in ("ADDED", "MODIFIED", "DELETED"):
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
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.on_event = on_event
        self.label_selector = label_selector
        self.with_items = with_items
        self.retry_s = retry_s
        self.not_served_retry_s = not_served_retry_s
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._stream: WatchStream | None = None

    def stop(self) -> None:
        """Ends `run`, at once even when a watch is waiting for the next event."""
        self._stopping.set()
        with self._lock:
            if self._stream is not None:
                self._stream.interrupt()

    def run(self) -> None:
        not_served_said = False
        while not self._stopping.is_set():
            try:
                listing = self.client.listing(
                    self.resource,
                    self.namespace,
                    label_selector=self.label_selector,
                    limit=None if self.with_items else 1,
                )
                if listing is None:
                    if not not_served_said:
                        log.info(
                            "%s is not served; looking again every %.0f s",
                            self.resource.kind,
                            self.not_served_retry_s,
                        )
                        not_served_said = True
                    self._stopping.wait(self.not_served_retry_s)
                    continue
                not_served_said = False
                version = listing.version
                for item in listing.items if self.with_items else ():
                    self.on_event(None, item)
                while not self._stopping.is_set():
                    version = self._watch(version)
            except (ApiError, ValueError) as error:
                if isinstance(error, ApiError) and error.code == GONE:
                    continue
                if self._stopping.is_set():
                    return
                log.warning(
                    "watching %s: %s; again in %.0f s", self.resource.kind, error, self.retry_s
                )
                self._stopping.wait(self.retry_s)

    def _watch(self, version: str) -> str:
        """Stream events until the server ends the watch; the last resourceVersion seen."""
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
                    version = self._handle(event) or version
        finally:
            with self._lock:
                self._stream = None
        return version

    def _handle(self, event: Mapping[str, Any]) -> str | None:
        """Hand the event on (a bookmark only moves the version); its resourceVersion."""
        obj = event.get("object") or {}
        event_type = event.get("type")
        if event_type == "ERROR":
            if obj.get("code") == GONE:
                raise ApiError(f"watch {self.resource.kind}: too old", code=GONE)
            raise ValueError(f"watch error: {obj.get('message', obj)}")
        if event_type in ("ADDED", "MODIFIED", "DELETED"):
            self.on_event(event_type, obj)
        version: str | None = (obj.get("metadata") or {}).get("resourceVersion")
        return version
