"""An API server on 127.0.0.1 for the demo, the tests and the benchmark: kmock's emulator with the
bookkeeping a real API server does.

kmock 0.8's `KubernetesEmulator` stores objects as plain dicts. This subclass adds what kopf and the
operator rely on: `uid`, `resourceVersion`, `generation` (bumped on spec changes only), the status
subresource (status writes touch only status, object writes never touch it), 404 for resources
whose CRD is not installed, a garbage collector stand-in (deleting an owner deletes what it
controls), and injectable faults. It does no schema or CEL validation.
"""

import asyncio
import contextlib
import datetime
import itertools
import json
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import aiohttp.web
import attrs
import jsonpatch
import kmock
from kmock import action

T = TypeVar("T")
CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"
BUILT_IN = {
    "v1/namespaces": kmock.ResourceInfo(kind="Namespace", namespaced=False),
    "v1/events": kmock.ResourceInfo(kind="Event", namespaced=True),
    "v1/services": kmock.ResourceInfo(kind="Service", namespaced=True),
    "events.k8s.io/v1/events": kmock.ResourceInfo(kind="Event", namespaced=True),
    "policy/v1/poddisruptionbudgets": kmock.ResourceInfo(
        kind="PodDisruptionBudget", namespaced=True
    ),
    CRDS: kmock.ResourceInfo(kind="CustomResourceDefinition", namespaced=False),
}


def merge_patch(value: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386: apply a JSON merge patch."""
    result = dict(value)
    for key, change in patch.items():
        if change is None:
            result.pop(key, None)
        elif isinstance(change, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = merge_patch(result[key], change)
        elif isinstance(change, Mapping):
            result[key] = merge_patch({}, change)
        else:
            result[key] = change
    return result


def merge_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that turns `old` into `new`."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(before, Mapping) and isinstance(value, Mapping):
            nested = merge_diff(before, value)
            if nested:
                patch[key] = nested
        elif key not in old or before != value:
            patch[key] = value
    return patch


def _replace_data(request: kmock.Request, data: dict[str, Any]) -> None:
    """kmock matches its fallback reactions to the very request object it logged, so the request
    is changed in place (it is a frozen attrs class)."""
    object.__setattr__(request, "data", data)


@dataclass(frozen=True)
class Fault:
    """Answer `times` requests whose method and path match with `status`."""

    method: str
    path_contains: str
    status: int
    times: int = 1


@attrs.define(kw_only=True)
class ApiServer(kmock.KubernetesEmulator):
    _versions: Iterator[int] = attrs.field(factory=lambda: itertools.count(1), init=False)
    _faults: list[list[Any]] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for key, info in BUILT_IN.items():
            self.resources[key] = info

    def inject(self, fault: Fault) -> None:
        self._faults.append([fault, fault.times])

    def namespaces(self) -> list[str]:
        """Every namespace an object lives in, and `default`."""
        return sorted({"default"} | {ns for _, ns, _ in self.objects if ns})

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # kmock cannot parse the namespace collection's path: serve it here, list and watch.
        if raw_request.method == "GET" and raw_request.path == "/api/v1/namespaces":
            if raw_request.query.get("watch") == "true":
                return await self._watch_namespaces(raw_request)
            items = [{"metadata": {"name": ns}} for ns in self.namespaces()]
            return aiohttp.web.json_response(
                {"kind": "NamespaceList", "apiVersion": "v1", "metadata": {}, "items": items}
            )
        return await super().__call__(raw_request)

    async def _watch_namespaces(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """ADDED for each namespace that appears (polled: namespaces come from objects)."""
        response = aiohttp.web.StreamResponse()
        await response.prepare(raw)
        seen = set(self.namespaces())
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while True:
                await asyncio.sleep(0.2)
                for ns in sorted(set(self.namespaces()) - seen):
                    event = {"type": "ADDED", "object": {"metadata": {"name": ns}}}
                    await response.write(json.dumps(event).encode() + b"\n")
                    seen.add(ns)
        return response

    def install_crd(self, crd: Mapping[str, Any]) -> None:
        """Serve the CRD's versions and keep the CRD object, as `kubectl apply` of it would."""
        spec, names = crd["spec"], crd["spec"]["names"]
        for version in spec["versions"]:
            key = f"{spec['group']}/{version['name']}/{names['plural']}"
            self.resources[key] = kmock.ResourceInfo(
                kind=names["kind"],
                singular=names.get("singular"),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                shortnames=set(names.get("shortNames", [])),
                subresources=set(version.get("subresources", {})),
                verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
            )
        stored = self._new_object(dict(crd))
        self.objects[kmock.resource(CRDS), None, crd["metadata"]["name"]] = stored

    def _declared(self, resource: kmock.resource) -> bool:
        return any(resource == known for known in self.resources)

    def _has_status(self, resource: kmock.resource) -> bool:
        for known in self.resources:
            if resource == known:
                return "status" in self.resources[known].subresources
        return False

    def _fault_for(self, request: kmock.Request) -> int | None:
        for entry in self._faults:
            fault, left = entry
            if (
                left > 0
                and request.method == fault.method
                and fault.path_contains in request.url.path
            ):
                entry[1] = left - 1
                return int(fault.status)
        return None

    def _new_object(self, data: dict[str, Any]) -> dict[str, Any]:
        metadata = dict(data.get("metadata") or {})
        metadata.update(
            uid=str(uuid.uuid4()),
            resourceVersion=str(next(self._versions)),
            generation=1,
            creationTimestamp=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        return {**data, "metadata": metadata}

    def _updated(self, request: kmock.Request, current: Mapping[str, Any]) -> dict[str, Any]:
        """What a patch makes of the object, as a merge patch kmock can apply."""
        change = request.data
        try:
            if isinstance(change, list):
                new = jsonpatch.apply_patch(dict(current), change, in_place=False)
            else:
                new = merge_patch(current, change or {})
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, ValueError) as error:
            raise kmock.KubernetesError(status=422, reason="Invalid", message=str(error)) from None
        new = dict(new)
        if request.subresource == "status":
            new = {**current, "status": new.get("status")}
        elif request.resource is not None and self._has_status(request.resource):
            new["status"] = current.get("status")
        if new.get("status") is None:
            new.pop("status", None)
        metadata = dict(new.get("metadata") or {})
        for key in ("uid", "creationTimestamp", "name", "namespace"):
            if key in current.get("metadata", {}):
                metadata[key] = current["metadata"][key]
        metadata["resourceVersion"] = str(next(self._versions))
        if new.get("spec") != current.get("spec"):
            metadata["generation"] = int(current.get("metadata", {}).get("generation", 1)) + 1
        new["metadata"] = metadata
        return merge_diff(current, new)

    async def _handle(self, request: kmock.Request) -> Any:
        resource = request.resource
        if resource is None or resource.plural is None or request.action is None:
            return await super()._handle(request)  # discovery and other non-object paths
        status = self._fault_for(request)
        if status is not None:
            raise kmock.KubernetesError(status=status, reason="Injected", message="injected fault")
        if not self._declared(resource):
            raise kmock.KubernetesResourceNotFoundError()
        if request.action == action.CREATE and isinstance(request.data, dict):
            data = self._new_object(request.data)
            if request.namespace:
                data["metadata"].setdefault("namespace", request.namespace)
            if self._has_status(resource):
                data.pop("status", None)
            _replace_data(request, data)
        elif request.action == action.UPDATE and request.name is not None:
            key = (resource, request.namespace, request.name)
            if key in self.objects and not self.objects[key].deleted:
                current = self.objects[key].raw
                _replace_data(request, self._updated(request, current))
        response = await super()._handle(request)
        if request.action == action.DELETE and request.name is not None:
            await self._collect_garbage()
        elif request.action == action.CREATE and request.data["metadata"].get("ownerReferences"):
            # Created for an owner that is already gone.
            await self._collect_garbage(only=request.data["metadata"]["uid"])
        return response

    async def _collect_garbage(self, only: str | None = None) -> None:
        """Delete every object (or only the one with uid `only`) whose owner is gone, until none
        is left."""
        while True:
            alive = {
                obj.get("metadata", {}).get("uid")
                for obj in self.objects.values()
                if not obj.deleted
            }
            orphans = [
                (key, obj)
                for key, obj in self.objects.items()
                if not obj.deleted
                and (only is None or obj.get("metadata", {}).get("uid") == only)
                and any(
                    ref.get("uid") not in alive
                    for ref in obj.get("metadata", {}).get("ownerReferences") or []
                )
            ]
            if not orphans:
                return
            for (resource, _, _), obj in orphans:
                obj.delete()
                await self._buses[resource].put({"type": "DELETED", "object": obj.last.raw})


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

    def inject(self, fault: Fault) -> None:
        self.call(lambda handler: handler.inject(fault))

    def requests(self) -> list[kmock.Request]:
        """Every request served so far, in order."""
        return self.call(list)

    def writes(self, since: int = 0) -> list[kmock.Request]:
        """The requests since index `since` that change state: POST, PATCH, PUT, DELETE."""
        return [
            r
            for r in self.requests()[since:]
            if r.method.value in {"POST", "PATCH", "PUT", "DELETE"}
        ]
