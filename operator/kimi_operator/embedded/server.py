"""An API server on 127.0.0.1 for the demo, the tests and the benchmark: kmock's emulator with the
bookkeeping and the checks a real API server does.

kmock 0.8's `KubernetesEmulator` stores objects as plain dicts. This subclass adds what the
operator relies on: `uid`, `resourceVersion`, `generation` (bumped on spec changes only), the status
subresource (status writes touch only status, object writes never touch it), the scale subresource
(embedded.scale), 404 for resources whose CRD is not installed, a garbage collector stand-in
(deleting an owner deletes what it controls; embedded.deletion for propagation policies), watches
that resume from a version (embedded.watches), and injectable faults (embedded.faults); and what a
real one refuses or rewrites: every installed CRD's structural schema and CEL rules
(embedded.admission), bearer-token users authorized by the stored RBAC objects, owner references
and RBAC escalation checked (embedded.authorization), validating webhooks (embedded.webhooks).
For the real kubectl and helm: /version, discovery and OpenAPI (embedded.endpoints), namespaces
and list kinds (embedded.namespaces), Tables (embedded.tables), server-side apply and managed
fields (embedded.apply_patch), protobuf bodies (embedded.protobuf), Status errors
(embedded.errors). It records every write, list and watch (embedded.timeline).
`EmbeddedApiServer` (embedded.harness) runs it in a thread of its own.
docs/embedded-api-server.md lists what it reproduces, with the tests, and what it does not.
"""

import asyncio
import collections
import datetime
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock import action

from kimi_operator.embedded import (
    apply_patch,
    discovery,
    namespaces,
    paging,
    protobuf,
    rbac,
    scale,
    tables,
    watches,
    webhooks,
)
from kimi_operator.embedded.admission import CustomResource, Refused
from kimi_operator.embedded.authorization import CURRENT_USER, Authorization
from kimi_operator.embedded.builtin import BUILT_IN, CRDS, EVICTION
from kimi_operator.embedded.deletion import Collector, check_preconditions, propagation_policy
from kimi_operator.embedded.endpoints import Endpoints
from kimi_operator.embedded.errors import (
    already_exists,
    check_version,
    error_response,
    not_found,
    status_object,
    status_response,
    warned,
)
from kimi_operator.embedded.eviction import Evictions
from kimi_operator.embedded.faults import Fault, Faults, answer_with
from kimi_operator.embedded.fieldsets import Schema
from kimi_operator.embedded.patches import merge_diff, patched
from kimi_operator.embedded.timeline import TIMELINE_PATH, Read, Write

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DIRECT = frozenset({action.FETCH, action.CREATE, action.UPDATE, action.DELETE})


def _action(request: kmock.Request) -> action | None:
    """kmock's action for the request; a PUT of a named object (kmock has no action for it) is
    an update, as a PATCH is."""
    if request.action is None and request.method.value == "PUT" and request.name:
        return action.UPDATE
    return request.action


def _replace_data(request: kmock.Request, data: dict[str, Any]) -> None:
    """kmock matches its fallback reactions to the very request object it logged, so the request
    is changed in place (it is a frozen attrs class)."""
    object.__setattr__(request, "data", data)


def key_of(request: kmock.Request, resource: kmock.resource) -> tuple[Any, Any, Any]:
    """(resource, namespace, name) of the object a request is about (a create names it in the
    body)."""
    data = request.data if isinstance(request.data, dict) else {}
    meta = data.get("metadata") or {}
    return resource, request.namespace or meta.get("namespace"), request.name or meta.get("name")


def _retrieved(task: "asyncio.Future[Any]") -> None:
    if not task.cancelled():
        task.exception()


@attrs.define(kw_only=True)
class ApiServer(kmock.KubernetesEmulator):
    _version: int = attrs.field(default=0, init=False)  # the last resourceVersion given out
    faults: Faults = attrs.field(factory=Faults, init=False)  # embedded.faults
    # ("namespace/name", status) of every status write to a KimiDeployment: what it said when
    status_log: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list, init=False)
    # KimiDeployment statuses sent on a stale resourceVersion (refused with 409): the object was
    # edited after the reconcile that made them read it.
    stale_status_log: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list, init=False)
    # (monotonic time, method, path, object name) of every state-changing request: the
    # benchmark's clock (monotonic time is shared by the processes of one machine).
    timeline: list[Write] = attrs.field(factory=list, init=False)
    reads: list[Read] = attrs.field(factory=list, init=False)  # every list and watch, in order
    # The schema and rules of each custom resource, by (group, version, plural).
    _custom: dict[tuple[str, str, str], CustomResource] = attrs.field(factory=dict, init=False)
    # Tokens, RBAC and the checks made (embedded.authorization).
    authorization: Authorization = attrs.field(init=False)
    _plurals: discovery.Plurals = attrs.field(factory=discovery.Plurals, init=False)
    # Called on the server's thread after every write to an object, before the next request is
    # served: a check of the whole cluster at every step (the rollout tests' audit).
    observers: list[Callable[["ApiServer"], None]] = attrs.field(factory=list, init=False)
    # /version, discovery and OpenAPI (embedded.endpoints).
    _endpoints: Endpoints | None = attrs.field(default=None, init=False)
    # The stored ValidatingWebhookConfigurations (None: to be read again after a write to them).
    _webhooks: list[dict[str, Any]] | None = attrs.field(default=None, init=False)

    _deletion: Collector = attrs.field(init=False)  # deletions, garbage (embedded.deletion)
    _evictions: Evictions = attrs.field(init=False)  # pods/eviction (embedded.eviction)
    # Watches (embedded.watches): how many events of each resource are kept for watches that
    # resume from a version (kube-apiserver keeps at least 75 s' worth), and how often a watch
    # that allows bookmarks gets one (kube-apiserver: about every minute).
    history_window: int = 10_000
    bookmark_interval_s: float = 60.0
    _history: collections.defaultdict[kmock.resource, watches.Log] = attrs.field(
        factory=lambda: collections.defaultdict(watches.Log), init=False
    )

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._deletion = Collector(self.objects, self._announce, self._next_version)
        self._evictions = Evictions(
            self.objects, self._announce, self._next_version, self._deletion
        )
        self.authorization = Authorization(self._rbac_objects, self._plural_of)
        for key, info in BUILT_IN.items():
            self.resources[key] = info
        for name in namespaces.INITIAL:
            self.store(namespaces.initial(name))
        self._endpoints = Endpoints(
            lambda: discovery.served(self.resources.items()), self.crds, self._served_state
        )

    def crds(self) -> list[dict[str, Any]]:
        """The CustomResourceDefinitions stored now."""
        return [
            obj.raw
            for (resource, _, _), obj in self.objects.items()
            if resource == kmock.resource(CRDS) and not obj.deleted
        ]

    def _served_state(self) -> tuple[Any, ...]:
        """What the OpenAPI documents depend on: the served resources and the CRDs' versions."""
        versions = tuple(c["metadata"].get("resourceVersion") for c in self.crds())
        return (tuple(self.resources), versions)

    async def _announce(self, resource: kmock.resource, kind: str, obj: dict[str, Any]) -> None:
        """Record a watch event (embedded.watches) at once, with the version just given out (an
        await in between would let a watcher bookmark past it). A deletion gets a version of
        its own, as in kube-apiserver, so that a watcher's version only moves forward."""
        if kind == "DELETED":
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": self._next_version()}}
        version = int(obj["metadata"]["resourceVersion"])
        event = {"type": kind, "object": obj}
        self._history[resource].record(version, event, window=self.history_window)

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def stored(self, plural: str) -> list[dict[str, Any]]:
        """The objects of a resource (by its plural) that exist now: for an observer."""
        return [
            obj.raw
            for (resource, _, _), obj in self.objects.items()
            if resource.plural == plural and not obj.deleted
        ]

    def store(self, obj: Mapping[str, Any]) -> None:
        """Keep `obj` as the cluster admin's `kubectl apply` would, admission aside: the chart's
        ServiceAccount and RBAC objects."""
        group, _, version = obj["apiVersion"].rpartition("/")
        plural = self._plural_of(obj["apiVersion"], obj["kind"])
        if plural is None:
            raise ValueError(f"{obj['apiVersion']} {obj['kind']} is not served here")
        meta = obj["metadata"]
        key = (kmock.resource(group, version, plural), meta.get("namespace"), meta["name"])
        self.objects[key] = self._new_object(dict(obj))
        self.authorization.forget_rbac()
        self._webhooks = None

    def _rbac_objects(self) -> list[dict[str, Any]]:
        return [
            obj.raw
            for (resource, _, _), obj in self.objects.items()
            if resource.group == rbac.RBAC_GROUP and not obj.deleted
        ]

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        user = self.authorization.user_of(raw_request.headers.get("Authorization", ""))
        if user is None:
            return status_response(401, "Unauthorized", "Unauthorized", {})
        refusal = self.authorization.refusal(
            user, raw_request.method, raw_request.path, raw_request.query
        )
        if refusal is not None:
            return status_response(403, "Forbidden", *refusal)
        CURRENT_USER.set(user)
        if raw_request.method == "GET" and raw_request.path == TIMELINE_PATH:
            since = int(raw_request.query.get("since", "0"))
            return aiohttp.web.json_response(self.timeline[since:])
        decoded = None
        if "protobuf" in raw_request.headers.get("Content-Type", ""):
            try:
                decoded = protobuf.decode(await raw_request.read())
            except protobuf.Unsupported:
                message = (
                    "the body of the request was in an unknown format - accepted media types "
                    "include: application/json, application/yaml"
                )
                return status_response(415, "UnsupportedMediaType", message, {})
        assert self._endpoints is not None
        accept = raw_request.headers.get("Accept", "")
        answer = self._endpoints.answer(raw_request.method, raw_request.path, accept)
        if answer is not None:
            return answer
        if decoded is not None or namespaces.is_namespace_path(raw_request.path):
            # Parsed here: kmock does not parse these paths, nor read binary bodies.
            try:
                request = await namespaces.request_of(raw_request, decoded)
                if request is None:
                    raise kmock.KubernetesNotFoundError()
                response: aiohttp.web.StreamResponse = await self._handle(request)
                return response
            except Exception as error:  # answered as kmock answers the others
                return await self._render_error(error)
        return await super().__call__(raw_request)

    def install_crd(self, crd: Mapping[str, Any], *, keep: bool = True) -> None:
        """Serve the CRD's versions and (`keep`) keep the CRD object, as `kubectl apply` of it
        would (written through the API, it is kept already)."""
        spec, names = crd["spec"], crd["spec"]["names"]
        for version in spec["versions"]:
            key = f"{spec['group']}/{version['name']}/{names['plural']}"
            self.resources[key] = discovery.custom_resource_info(crd, version)
            plural = (spec["group"], version["name"], names["plural"])
            self._custom[plural] = CustomResource(crd, version)
        if keep:
            stored = self._new_object(dict(crd))
            self.objects[kmock.resource(CRDS), None, crd["metadata"]["name"]] = stored

    async def remove_crd(self, name: str) -> None:
        """Stop serving the CRD's API and delete its objects, as deleting a CRD does (the
        children of the deleted objects are collected too)."""
        key = (kmock.resource(CRDS), None, name)
        if key not in self.objects or self.objects[key].deleted:
            return
        spec = self.objects[key].raw["spec"]
        self.objects[key].delete()
        await self._stop_serving(spec)

    async def _stop_serving(self, spec: Mapping[str, Any]) -> None:
        """Stop serving a deleted CRD's API and delete its objects and their children."""
        for version in spec["versions"]:
            self._custom.pop((spec["group"], version["name"], spec["names"]["plural"]), None)
            gone = kmock.resource(f"{spec['group']}/{version['name']}/{spec['names']['plural']}")
            for known in list(self.resources):
                if gone == known:
                    del self.resources[known]
            for (resource, _, _), obj in list(self.objects.items()):
                if resource == gone and not obj.deleted:
                    raw = obj.raw
                    obj.delete()
                    await self._announce(resource, "DELETED", raw)
        await self._deletion.collect_garbage()

    def _get_resources(self) -> list[kmock.resource]:
        """Only the declared resources (kmock also counts those it holds objects of, so that an
        API whose CRD was removed would still be discovered)."""
        return list(iter(self.resources))

    def _declared(self, resource: kmock.resource) -> bool:
        return any(resource == known for known in self.resources)

    def _has_status(self, resource: kmock.resource) -> bool:
        return discovery.has_status(self.resources, resource)

    async def _faulted(self, request: kmock.Request, fault: Fault) -> Any:
        return await answer_with(fault, lambda: self._serve_object(request))

    async def _watch_events(self, request: kmock.Request, start: int | None) -> AsyncIterator[Any]:
        """A watch as kube-apiserver serves it (embedded.watches), narrowed by namespace, name,
        label and field selectors: after the version `start`, the events since (a 410 Gone
        ERROR event when it is older than the history kept); from no version, the objects
        there are as ADDED events (with `sendInitialEvents=true`, client-go's watch-list, then
        the bookmark that says so); then each event as it comes, and with
        `allowWatchBookmarks=true` a bookmark every `bookmark_interval_s`. Cut where a
        `drop_watch` fault says: in the middle of an event newer than the connection, closed
        without the end of the chunked body."""
        resource = request.resource
        assert resource is not None
        connected = self._version
        api_version, kind = self._kind(resource)
        yield b""
        if start is None:
            async with self._lock:
                existing = self._rows(request, resource)
            for obj in existing:
                yield {"type": "ADDED", "object": obj}
            if request.url.query.get("sendInitialEvents") == "true":
                end = {"k8s.io/initial-events-end": "true"}
                yield watches.bookmark(api_version, kind, connected, annotations=end)
            start = connected
        bookmarks = request.url.query.get("allowWatchBookmarks") == "true"
        events = watches.follow(
            self._history[resource],
            start,
            latest=lambda: self._version,
            bookmark_every_s=self.bookmark_interval_s if bookmarks else None,
            bookmark=lambda version: watches.bookmark(api_version, kind, version),
        )
        try:
            async for event in events:
                if event["type"] == "BOOKMARK":
                    yield event
                    continue
                if not self._selects(request, event["object"]):
                    continue
                version = int(event["object"]["metadata"]["resourceVersion"])
                fault = self.faults.match(request, streaming=True) if version > connected else None
                if fault is not None and fault.silent:
                    await asyncio.Event().wait()  # until the client gives up on it
                if fault is not None:
                    line = json.dumps(event).encode()
                    yield line[: len(line) // 2]
                    raw = request._raw_request  # private in kmock: no public way to cut a stream
                    if raw is not None and raw.transport is not None:
                        raw.transport.close()
                    return
                yield event
        except watches.Expired as expired:
            yield {"type": "ERROR", "object": status_object(410, "Expired", str(expired), {})}

    def _new_object(self, data: dict[str, Any]) -> dict[str, Any]:
        metadata = dict(data.get("metadata") or {})
        metadata.update(
            uid=str(uuid.uuid4()),
            resourceVersion=self._next_version(),
            generation=1,
            creationTimestamp=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        return {**data, "metadata": metadata}

    def _updated_noting_stale(
        self, request: kmock.Request, current: Mapping[str, Any], namespace: str
    ) -> tuple[dict[str, Any], list[str]]:
        """`_updated`, keeping a KimiDeployment status refused as stale (the fault report's)."""
        try:
            return self._updated(request, current)
        except kmock.KubernetesError as error:
            resource = request.resource
            if (
                error.status == HTTPStatus.CONFLICT
                and request.subresource == "status"
                and resource is not None
                and resource.plural == "kimideployments"
                and isinstance(request.data, dict)
            ):
                name = f"{namespace}/{current['metadata']['name']}"
                self.stale_status_log.append((name, request.data.get("status") or {}))
            raise

    def _updated(
        self, request: kmock.Request, current: Mapping[str, Any]
    ) -> tuple[dict[str, Any], list[str]]:
        """What a patch or a PUT makes of the object, as a merge patch kmock can apply; the
        warnings. A resourceVersion in what was sent is a precondition (409 when it is stale)."""
        if isinstance(request.data, dict):
            check_version(request.data, current)
        patch_type = apply_patch.content_type(request.headers)
        if request.method.value == "PUT" or patch_type == apply_patch.APPLY:
            new = dict(request.data) if isinstance(request.data, dict) else {}
            new.setdefault("metadata", {})
        elif patch_type == apply_patch.STRATEGIC and isinstance(request.data, dict):
            assert request.resource is not None
            schema = self._schema(request.resource)
            new = apply_patch.strategic_merge(current, request.data, schema)
        else:
            new = patched(current, request.data)
        if request.subresource == "status":
            new = {**current, "status": new.get("status")}
        elif request.resource is not None and self._has_status(request.resource):
            new["status"] = current.get("status")
        if new.get("status") is None:
            new.pop("status", None)
        if patch_type != apply_patch.APPLY:
            self._track_update(request, current, new)
        return self._stamped(request, current, new)

    def _schema(self, resource: kmock.resource) -> Schema:
        assert self._endpoints is not None
        _, kind = self._kind(resource)
        return self._endpoints.schema(resource.group or "", str(resource.version), kind)

    def _track_update(
        self, request: kmock.Request, current: Mapping[str, Any], new: dict[str, Any]
    ) -> None:
        """managedFields through a write other than an apply: kept when it leaves them out; the
        fields it changed recorded as its manager's when it names one (`fieldManager`) or the
        object has managedFields already (objects never written with a manager have none: the
        operator's writes are not tracked, which keeps them cheap)."""
        meta = new.setdefault("metadata", {})
        before = (current.get("metadata") or {}).get("managedFields")
        if "managedFields" not in meta and before:
            meta["managedFields"] = before
        query = request.url.query
        if query.get("fieldManager") or meta.get("managedFields"):
            assert request.resource is not None
            apply_patch.updated(
                current,
                new,
                self._schema(request.resource),
                manager=apply_patch.manager_of(query, request.headers),
                subresource=request.subresource or "",
            )

    def _apply(self, request: kmock.Request, resource: kmock.resource) -> None:
        """Server-side apply: the request becomes the write of the merged object (a create
        where there is none yet)."""
        applied = apply_patch.parse(request.text)
        key = key_of(request, resource)
        obj = self.objects[key] if key in self.objects else None  # noqa: SIM401 (no .get)
        live = None if obj is None or obj.deleted else obj.raw
        query = request.url.query
        result = apply_patch.apply(
            live,
            applied,
            self._schema(resource),
            manager=query.get("fieldManager", ""),
            force=query.get("force") == "true",
            subresource=request.subresource or "",
        )
        if live is None:
            meta = result.setdefault("metadata", {})
            meta["name"] = key[2]
            if key[1]:
                meta["namespace"] = key[1]
            object.__setattr__(request, "action", action.CREATE)
        _replace_data(request, result)

    def _stamped(
        self, request: kmock.Request, current: Mapping[str, Any], new: dict[str, Any]
    ) -> tuple[dict[str, Any], list[str]]:
        """Admit `new`, keep what a write cannot change, stamp a new resourceVersion and bump
        the generation when the spec changed: (merge patch from `current`, warnings)."""
        new, warnings = self._admit(request, new, current)
        metadata = dict(new.get("metadata") or {})
        for key in ("uid", "creationTimestamp", "name", "namespace"):
            if key in current.get("metadata", {}):
                metadata[key] = current["metadata"][key]
        metadata["resourceVersion"] = self._next_version()
        if new.get("spec") != current.get("spec"):
            metadata["generation"] = int(current.get("metadata", {}).get("generation", 1)) + 1
        new["metadata"] = metadata
        return merge_diff(current, new), warnings

    def _admit(
        self, request: kmock.Request, new: dict[str, Any], old: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any], list[str]]:
        """(the object as stored, warnings): the CRD's schema and rules, then the owner
        references' permissions; a kmock.KubernetesError when admission refuses it."""
        resource = request.resource
        assert resource is not None
        key = (resource.group or "", resource.version or "", resource.plural or "")
        custom, warnings = self._custom.get(key), []
        if custom is not None:
            strict = request.url.query.get("fieldValidation") == "Strict"
            try:
                admitted = custom.admit(new, old=old, strict=strict)
            except Refused as refused:
                raise kmock.KubernetesError(
                    refused.status, refused.reason, refused.message, refused.details
                ) from None
            new, warnings = admitted.obj, admitted.warnings
        self.authorization.check_owner_references(request, new, old)
        self.authorization.check_escalation(request, new, old)
        if self._webhooks is None:
            self._webhooks = self.stored(webhooks.CONFIGURATIONS)
        attempt = webhooks.Attempt(resource, request.subresource, new, old, CURRENT_USER.get())
        warnings = [*warnings, *webhooks.review(self._webhooks, self.stored, attempt)]
        return new, warnings

    def _plural_of(self, api_version: str, kind: str) -> str | None:
        return self._plurals.plural_of(self.resources, api_version, kind)

    async def _handle(self, request: kmock.Request) -> Any:
        try:
            return await self._serve(request)
        finally:
            # kmock keeps every request and matches each new one against all of them, so that a
            # request costs O(requests so far). Forget each one once matched (the writes are
            # logged in `timeline`): requests stay O(1).
            for index, known in enumerate(self._requests):
                if known is request:
                    del self._requests[index]
                    break

    async def _serve(self, request: kmock.Request) -> Any:
        resource = request.resource
        # PUT and a named POST have no kmock action
        named = request.subresource in {"scale", EVICTION} and bool(request.name)
        if resource is None or resource.plural is None or (_action(request) is None and not named):
            return await super()._handle(request)  # discovery and other non-object paths
        if request.method.value not in WRITES:
            return await self._answer(request)
        data = request.data if isinstance(request.data, dict) else {}
        name = request.name or (data.get("metadata") or {}).get("name") or ""
        logged = len(self.timeline)
        self.timeline.append(Write(time.monotonic(), request.method.value, request.url.path, name))
        return await self._answer(request, logged)

    async def _answer(self, request: kmock.Request, logged: int | None = None) -> Any:
        """A fault's answer, or the object's; `logged`: the write's place in the timeline."""
        fault = self.faults.match(request)
        if fault is not None and fault.delay_s:
            # A real server finishes what it started though the client gave up waiting.
            task = asyncio.ensure_future(self._logged(self._faulted(request, fault), logged))
            task.add_done_callback(_retrieved)  # its failure may have nobody left to hear it
            return await asyncio.shield(task)
        if fault is not None:
            return await self._logged(self._faulted(request, fault), logged)
        return await self._logged(self._serve_object(request), logged)

    async def _logged(self, answer: Awaitable[Any], logged: int | None) -> Any:
        """`answer`, its HTTP status noted at `logged` in the timeline (None: a read)."""
        if logged is None:
            return await answer
        code = 500
        try:
            response = await answer
            code = getattr(response, "status", 200)
            return response
        except kmock.KubernetesError as error:
            code = error.status
            raise
        finally:
            self.timeline[logged] = self.timeline[logged]._replace(code=code)

    async def _serve_object(self, request: kmock.Request) -> Any:
        resource = request.resource
        assert resource is not None
        if not self._declared(resource):
            raise kmock.KubernetesResourceNotFoundError()
        if request.subresource == "scale":
            return await self._scale(request, resource)
        if request.subresource == EVICTION:
            async with self._lock:
                evicted = await self._evictions.evict(request, resource)
            await self._deletion.collect_garbage()
            for observe in self.observers:
                observe(self)
            return evicted
        if apply_patch.content_type(request.headers) == apply_patch.APPLY and request.name:
            async with self._lock:
                self._apply(request, resource)
        elif (
            request.action == action.CREATE
            and request.url.query.get("fieldManager")
            and isinstance(request.data, dict)
        ):
            self._track_update(request, {}, request.data)
        if _action(request) in DIRECT and (request.name or request.action == action.CREATE):
            response = await self._direct(request, resource)
            if resource.group == rbac.RBAC_GROUP:
                self.authorization.forget_rbac()  # roles or bindings changed
            if resource.plural == webhooks.CONFIGURATIONS:
                self._webhooks = None
            if request.action == action.DELETE or self._deletion.terminating:
                await self._deletion.collect_garbage()
            elif request.action == action.CREATE:
                await self._deletion.collect_orphan(key_of(request, resource))
            if request.method.value in WRITES:
                await self._after_write(request, resource)
                for observe in self.observers:
                    observe(self)
            return response
        verb = "list" if request.action == action.LIST else "watch"
        version = request.url.query.get("resourceVersion", "")
        self.reads.append(Read(verb, request.url.path, version))
        if request.action == action.LIST:
            return await self._list(request, resource)
        return await self._stream(request)

    async def _stream(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """A watch (embedded.watches), of Tables when asked (embedded.tables)."""
        raw, resource = request._raw_request, request.resource  # kmock's private: written here
        assert raw is not None
        assert resource is not None
        start = watches.start_of(request.url.query)  # a 400 before the stream when invalid
        events = self._watch_events(request, start)
        if tables.wanted(request.headers.get("Accept", "")):
            events = tables.table_events(
                events, lambda obj: self._table_body(request, resource, [obj])
            )
        return await watches.send(raw, events)

    async def _after_write(self, request: kmock.Request, resource: kmock.resource) -> None:
        """What follows a write through the API: a CRD written is served (or no longer), a
        namespace deleted takes what is in it along."""
        name = key_of(request, resource)[2]
        if resource == kmock.resource(CRDS):
            key = (resource, None, name)
            stored = self.objects[key] if key in self.objects else None  # noqa: SIM401
            if stored is not None and stored.deleted:
                await self._stop_serving(stored.last.raw["spec"])
            elif stored is not None:
                self.install_crd(stored.raw, keep=False)
        elif resource == namespaces.NAMESPACES and request.action == action.DELETE:
            await self._empty_namespace(name)

    async def _empty_namespace(self, name: str) -> None:
        for (resource, namespace, _), obj in list(self.objects.items()):
            if namespace == name and not obj.deleted:
                raw = obj.raw
                obj.delete()
                await self._announce(resource, "DELETED", raw)
        await self._deletion.collect_garbage()

    def _rows(self, request: kmock.Request, resource: kmock.resource) -> list[dict[str, Any]]:
        return [
            obj.raw
            for (kind, _, _), obj in self.objects.items()
            if kind == resource and not obj.deleted and self._selects(request, obj.raw)
        ]

    @staticmethod
    def _selects(request: kmock.Request, obj: Mapping[str, Any]) -> bool:
        """Whether a list or watch request covers `obj`: its namespace, name and selectors."""
        meta = obj["metadata"]
        return (
            request.namespace in (None, meta.get("namespace"))
            and request.name in (None, meta.get("name"))
            and namespaces.selected(obj, request.url.query)
        )

    def _kind(self, resource: kmock.resource) -> tuple[str, str]:
        return discovery.kind_of(self.resources, resource)

    def _table_body(
        self, request: kmock.Request, resource: kmock.resource, objects: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return tables.table(
            objects,
            tables.printer_columns(self.crds(), resource.group, resource.version, resource.plural),
            str(resource.plural),
            resource_version=str(self._version),
            include=request.url.query.get("includeObject", "Metadata"),
        )

    def _table(
        self, request: kmock.Request, resource: kmock.resource, objects: list[dict[str, Any]]
    ) -> aiohttp.web.Response:
        return aiohttp.web.json_response(self._table_body(request, resource, objects))

    async def _list(
        self, request: kmock.Request, resource: kmock.resource
    ) -> aiohttp.web.StreamResponse:
        """A list with its kind, narrowed by label and field selectors, in pages
        (embedded.paging); a Table when asked."""
        api_version, kind = self._kind(resource)
        async with self._lock:
            items = self._rows(request, resource)
        if tables.wanted(request.headers.get("Accept", "")):
            return self._table(request, resource, items)
        version = str(self._version)
        paged = paging.page(items, request.url.query, version)
        body = namespaces.list_of(kind, api_version, paged["items"], version)
        body["metadata"] = paged["metadata"]
        return aiohttp.web.json_response(body)

    async def _direct(
        self, request: kmock.Request, resource: kmock.resource
    ) -> aiohttp.web.StreamResponse:
        """Object reads and writes, by key. (kmock's own path matches every request against all
        of its reactions and finds objects by scanning them: too slow for the benchmark.)"""
        data = request.data if isinstance(request.data, dict) else {}
        key = key_of(request, resource)
        namespace = key[1]
        async with self._lock:
            obj = self.objects[key] if key in self.objects else None  # noqa: SIM401 (no .get)
            gone = obj is None or obj.deleted
            if request.action == action.CREATE:
                if not gone:
                    raise already_exists(resource, key[2])
                new = self._new_object(data)
                # kube-apiserver decodes a body without them into the kind of the URL, and every
                # answer and watch event carries them (kubectl reads them from a DELETE's answer).
                api_version, kind = self._kind(resource)
                new.setdefault("apiVersion", api_version)
                new.setdefault("kind", kind)
                if resource == namespaces.NAMESPACES:
                    new = namespaces.new_namespace(new)
                if namespace:
                    new["metadata"]["namespace"] = namespace
                if self._has_status(resource):
                    new.pop("status", None)
                new, warnings = self._admit(request, new, None)
                _replace_data(request, new)
                if obj is None:
                    self.objects[key] = new
                else:
                    obj.create(new)
                raw = self.objects[key].raw
                self._deletion.uids.add(new["metadata"]["uid"])
                await self._announce(resource, "ADDED", raw)
                return aiohttp.web.json_response(raw, status=201, headers=warned(warnings))
            if gone:
                raise not_found(resource, key[2])
            assert obj is not None
            if request.action == action.FETCH:
                if tables.wanted(request.headers.get("Accept", "")):
                    return self._table(request, resource, [obj.raw])
                return aiohttp.web.json_response(obj.raw)
            if _action(request) == action.UPDATE:
                change, warnings = self._updated_noting_stale(request, obj.raw, namespace)
                obj.patch(change)
                raw = obj.raw
                if request.subresource == "status" and resource.plural == "kimideployments":
                    self.status_log.append((f"{namespace}/{key[2]}", raw.get("status") or {}))
                await self._announce(resource, "MODIFIED", raw)
                if raw["metadata"].get("deletionTimestamp") and not raw["metadata"].get(
                    "finalizers"
                ):
                    obj.delete()
                    await self._announce(resource, "DELETED", raw)
                return aiohttp.web.json_response(raw, headers=warned(warnings))
            policy = propagation_policy(request.url.query, request.data)
            check_preconditions(
                request.data, obj.raw, self._kind(resource)[1], resource.group or ""
            )
            return aiohttp.web.json_response(await self._deletion.delete(key, obj, policy))

    async def _scale(
        self, request: kmock.Request, resource: kmock.resource
    ) -> aiohttp.web.StreamResponse:
        """The scale subresource as kube-apiserver serves it for a CRD: an autoscaling/v1 Scale
        read from, and written to, the paths the CRD names (GET, PUT as the HPA controller and
        KEDA write it, PATCH as `kubectl scale` does)."""
        custom = self._custom.get(
            (resource.group or "", resource.version or "", resource.plural or "")
        )
        paths = custom.scale if custom is not None else None
        if paths is None:
            raise kmock.KubernetesResourceNotFoundError()
        key = key_of(request, resource)
        async with self._lock:
            obj = self.objects[key] if key in self.objects else None  # noqa: SIM401 (no .get)
            if obj is None or obj.deleted:
                raise not_found(resource, key[2])
            current = obj.raw
            now = scale.scale_of(current, paths)
            if request.method.value == "GET":
                return aiohttp.web.json_response(now)
            put = request.method.value == "PUT"
            wanted = request.data if put else patched(now, request.data)
            wanted = wanted if isinstance(wanted, dict) else {}
            replicas = scale.replicas_of(wanted)
            check_version(wanted, current)
            new = scale.scaled(current, paths, replicas)
            change, warnings = self._stamped(request, current, new)
            obj.patch(change)
            await self._announce(resource, "MODIFIED", obj.raw)
            answer = scale.scale_of(obj.raw, paths)
            return aiohttp.web.json_response(answer, headers=warned(warnings))

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        """Any failure as kube-apiserver answers it (embedded.errors), not as kmock does."""
        return error_response(exc)
