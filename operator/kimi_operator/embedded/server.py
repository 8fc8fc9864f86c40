"""An API server on 127.0.0.1 for the demo, the tests and the benchmark: kmock's emulator with the
bookkeeping and the checks a real API server does.

kmock 0.8's `KubernetesEmulator` stores objects as plain dicts. This subclass adds what the
operator relies on: `uid`, `resourceVersion`, `generation` (bumped on spec changes only), the status
subresource (status writes touch only status, object writes never touch it), 404 for resources
whose CRD is not installed, a garbage collector stand-in (deleting an owner deletes what it
controls), and injectable faults; and what a real one refuses or rewrites: every installed CRD's
structural schema and CEL rules (embedded.admission), bearer-token users authorized by the stored
RBAC objects, and the OwnerReferencesPermissionEnforcement admission plugin (embedded.rbac).
For the real kubectl and helm: /version, discovery and OpenAPI (embedded.endpoints), namespaces
and list kinds (embedded.namespaces), Tables (embedded.tables), server-side apply and managed
fields (embedded.apply_patch), protobuf bodies (embedded.protobuf), Status errors.
docs/embedded-api-server.md lists what it reproduces, with the tests, and what it does not.
"""

import asyncio
import collections
import contextvars
import copy
import dataclasses
import datetime
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, NamedTuple, Self, TypeVar

import aiohttp.web
import attrs
import jsonpatch
import kmock
import multidict
from kmock import action

from kimi_operator.embedded import (
    apply_patch,
    discovery,
    namespaces,
    paging,
    protobuf,
    rbac,
    tables,
    watches,
    webhooks,
)
from kimi_operator.embedded.admission import CustomResource, Refused
from kimi_operator.embedded.deletion import Collector, check_preconditions, propagation_policy
from kimi_operator.embedded.endpoints import Endpoints
from kimi_operator.embedded.fieldsets import Schema

T = TypeVar("T")
LOG = logging.getLogger(__name__)
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
TIMELINE_PATH = "/_kimi/timeline"
DIRECT = frozenset({action.FETCH, action.CREATE, action.UPDATE, action.DELETE})
CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"
RBAC_KINDS = ("clusterroles", "clusterrolebindings", "roles", "rolebindings")
# The user of the request being served (set by `ApiServer.__call__`).
_USER: contextvars.ContextVar[rbac.User] = contextvars.ContextVar("user", default=rbac.ADMIN_USER)

BUILT_IN = {
    "v1/namespaces": kmock.ResourceInfo(kind="Namespace", namespaced=False),
    "v1/events": kmock.ResourceInfo(kind="Event", namespaced=True),
    "v1/services": kmock.ResourceInfo(kind="Service", namespaced=True),
    "v1/configmaps": kmock.ResourceInfo(kind="ConfigMap", namespaced=True),
    "apps/v1/deployments": kmock.ResourceInfo(
        kind="Deployment", namespaced=True, subresources={"status"}
    ),
    "autoscaling/v2/horizontalpodautoscalers": kmock.ResourceInfo(
        kind="HorizontalPodAutoscaler", namespaced=True
    ),
    "events.k8s.io/v1/events": kmock.ResourceInfo(kind="Event", namespaced=True),
    "policy/v1/poddisruptionbudgets": kmock.ResourceInfo(
        kind="PodDisruptionBudget", namespaced=True
    ),
    "v1/serviceaccounts": kmock.ResourceInfo(kind="ServiceAccount", namespaced=True),
    "v1/secrets": kmock.ResourceInfo(kind="Secret", namespaced=True),
    "v1/pods": kmock.ResourceInfo(kind="Pod", namespaced=True, subresources={"status"}),
    "v1/persistentvolumeclaims": kmock.ResourceInfo(
        kind="PersistentVolumeClaim", namespaced=True, subresources={"status"}
    ),
    "batch/v1/jobs": kmock.ResourceInfo(kind="Job", namespaced=True, subresources={"status"}),
    "coordination.k8s.io/v1/leases": kmock.ResourceInfo(kind="Lease", namespaced=True),
    f"admissionregistration.k8s.io/v1/{webhooks.CONFIGURATIONS}": kmock.ResourceInfo(
        kind="ValidatingWebhookConfiguration", namespaced=False
    ),
    CRDS: kmock.ResourceInfo(kind="CustomResourceDefinition", namespaced=False),
    **{
        f"{rbac.RBAC_GROUP}/v1/{plural}": kmock.ResourceInfo(
            kind=kind, namespaced=plural.startswith("role")
        )
        for plural, kind in zip(
            RBAC_KINDS, ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"), strict=True
        )
    },
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


def _patched(current: Mapping[str, Any], change: Any) -> dict[str, Any]:
    """`current` with a JSON patch (a list) or a merge patch applied; 422 when it does not apply."""
    try:
        if isinstance(change, list):
            return dict(jsonpatch.apply_patch(dict(current), change, in_place=False))
        return dict(merge_patch(current, change or {}))
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, ValueError) as error:
        raise kmock.KubernetesError(status=422, reason="Invalid", message=str(error)) from None


def _action(request: kmock.Request) -> action | None:
    """kmock's action for the request; a PUT of a named object (kmock has no action for it) is
    an update, as a PATCH is."""
    if request.action is None and request.method.value == "PUT" and request.name:
        return action.UPDATE
    return request.action


def _check_version(sent: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """kube-apiserver's optimistic concurrency: a write naming a resourceVersion other than the
    object's is refused with 409 Conflict."""
    version = (sent.get("metadata") or {}).get("resourceVersion")
    if version and version != current["metadata"]["resourceVersion"]:
        name = current["metadata"].get("name")
        message = f"{name}: the object has been modified; apply your changes to the latest"
        raise kmock.KubernetesError(409, "Conflict", message + " version and try again")


def _object_error(
    resource: kmock.resource, name: str, status: int, reason: str, what: str
) -> kmock.KubernetesError:
    """kube-apiserver's error about one object: `<plural>.<group> "<name>" <what>`."""
    group = resource.group or ""
    qualified = f"{resource.plural}.{group}" if group else str(resource.plural)
    details = {"name": name, "group": group, "kind": resource.plural}
    return kmock.KubernetesError(status, reason, f'{qualified} "{name}" {what}', details)


def not_found(resource: kmock.resource, name: str) -> kmock.KubernetesError:
    return _object_error(resource, name, 404, "NotFound", "not found")


def already_exists(resource: kmock.resource, name: str) -> kmock.KubernetesError:
    return _object_error(resource, name, 409, "AlreadyExists", "already exists")


def _get_path(obj: Mapping[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.strip(".").split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.strip(".").split(".")
    for part in parents:
        obj = obj.setdefault(part, {})
    obj[last] = value


def _scale_of(obj: Mapping[str, Any], paths: Mapping[str, str]) -> dict[str, Any]:
    """The autoscaling/v1 Scale of a custom resource (kube-apiserver's scale subresource)."""
    meta = obj["metadata"]
    status: dict[str, Any] = {"replicas": _get_path(obj, paths["statusReplicasPath"]) or 0}
    selector = (
        _get_path(obj, paths.get("labelSelectorPath", "")) if "labelSelectorPath" in paths else None
    )
    if selector:
        status["selector"] = selector
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in meta
        },
        "spec": {"replicas": _get_path(obj, paths["specReplicasPath"]) or 0},
        "status": status,
    }


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


def _warned(warnings: list[str]) -> multidict.CIMultiDict[str]:
    """The Warning headers kube-apiserver sends (RFC 7234 code 299) for unknown fields pruned."""
    return multidict.CIMultiDict(("Warning", f"299 - {json.dumps(w)}") for w in warnings)


def status_object(code: int, reason: str, message: str, details: Any) -> dict[str, Any]:
    """Kubernetes' Status object of a failure (an error answer, a watch's ERROR event)."""
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        **({"details": details} if details else {}),
        "code": code,
    }


def _retrieved(task: "asyncio.Future[Any]") -> None:
    if not task.cancelled():
        task.exception()


class Check(NamedTuple):
    """An authorization decision about a user's request (or about what its object says)."""

    user: str
    group: str
    resource: str  # with the subresource: kimideployments/status
    verb: str
    namespaced: bool
    allowed: bool


class Write(NamedTuple):
    time: float  # time.monotonic(): shared by the processes of one machine
    method: str
    path: str
    name: str  # of the object written
    code: int = 0  # the HTTP status answered (0: not answered yet)

    @property
    def refused(self) -> bool:
        """Answered with an error: it changed nothing."""
        return self.code >= 300


class Read(NamedTuple):
    """A list or a watch: where a client started reading a collection from."""

    verb: str  # "list" or "watch"
    path: str
    resource_version: str  # as the query names it; "" when it does not


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


@attrs.define(kw_only=True)
class ApiServer(kmock.KubernetesEmulator):
    _version: int = attrs.field(default=0, init=False)  # the last resourceVersion given out
    # [fault, times left, matches so far] of every injected fault
    _faults: list[list[Any]] = attrs.field(factory=list, init=False)
    # faults answered so far, by `Fault.kind`
    injected: collections.Counter[str] = attrs.field(factory=collections.Counter, init=False)
    # ("namespace/name", status) of every status write to a KimiDeployment: what it said when
    status_log: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list, init=False)
    # KimiDeployment statuses sent on a stale resourceVersion (refused with 409): the object was
    # edited after the reconcile that made them read it.
    stale_status_log: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list, init=False)
    # (monotonic time, method, path, object name) of every state-changing request: the
    # benchmark's clock (monotonic time is shared by the processes of one machine).
    timeline: list[Write] = attrs.field(factory=list, init=False)
    reads: list[Read] = attrs.field(factory=list, init=False)  # every list and watch, in order
    # uids of the objects that exist: added by each create, recomputed by each deletion.
    _uids: set[str] = attrs.field(factory=set, init=False)
    # The schema and rules of each custom resource, by (group, version, plural).
    _custom: dict[tuple[str, str, str], CustomResource] = attrs.field(factory=dict, init=False)
    # The users bearer tokens stand for; every authorization decision made about one.
    _tokens: dict[str, rbac.User] = attrs.field(factory=dict, init=False)
    checks: set[Check] = attrs.field(factory=set, init=False)
    _authorizer: rbac.Authorizer | None = attrs.field(default=None, init=False)
    # (the served resources, {(apiVersion, kind): plural}) for `_plural_of`.
    _plurals: tuple[tuple[Any, ...], dict[tuple[str, Any], str | None]] | None = attrs.field(
        default=None, init=False
    )
    # Called on the server's thread after every write to an object, before the next request is
    # served: a check of the whole cluster at every step (the rollout tests' audit).
    observers: list[Callable[["ApiServer"], None]] = attrs.field(factory=list, init=False)
    # /version, discovery and OpenAPI (embedded.endpoints).
    _endpoints: Endpoints | None = attrs.field(default=None, init=False)
    # The stored ValidatingWebhookConfigurations (None: to be read again after a write to them).
    _webhooks: list[dict[str, Any]] | None = attrs.field(default=None, init=False)

    _deletion: Collector = attrs.field(init=False)  # propagation policies (embedded.deletion)
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

    def inject(self, fault: Fault) -> None:
        self._faults.append([fault, fault.times, 0])

    def clear_faults(self) -> None:
        """Forget the faults not yet used up (the counts of those answered stay)."""
        self._faults.clear()

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

    def issue_token(self, namespace: str, name: str) -> str:
        """A bearer token for the ServiceAccount `namespace/name`."""
        token = uuid.uuid4().hex
        self._tokens[token] = rbac.service_account(namespace, name)
        return token

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
        self._authorizer = None
        self._webhooks = None

    def _stored_rbac(self) -> rbac.Authorizer:
        if self._authorizer is None:
            stored = [
                obj.raw
                for (resource, _, _), obj in self.objects.items()
                if resource.group == rbac.RBAC_GROUP and not obj.deleted
            ]
            self._authorizer = rbac.Authorizer(stored)
        return self._authorizer

    def _authorize(self, user: rbac.User, wanted: rbac.Attributes) -> bool:
        if user.admin:
            return True
        allowed = self._stored_rbac().allowed(user, wanted)
        namespaced = bool(wanted.namespace)
        self.checks.add(
            Check(user.name, wanted.group, wanted.resource, wanted.verb, namespaced, allowed)
        )
        return allowed

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        scheme, _, token = raw_request.headers.get("Authorization", "").partition(" ")
        user = self._tokens.get(token) if scheme == "Bearer" else rbac.ADMIN_USER
        if user is None:
            return self._status(401, "Unauthorized", "Unauthorized", {})
        wanted = rbac.request_attributes(raw_request.method, raw_request.path, raw_request.query)
        if wanted is not None and not self._authorize(user, wanted):
            why = f'User "{user.name}" cannot {wanted}'
            return self._status(403, "Forbidden", *rbac.forbidden(wanted, why))
        _USER.set(user)
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
                return self._status(415, "UnsupportedMediaType", message, {})
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
            self.resources[key] = kmock.ResourceInfo(
                kind=names["kind"],
                singular=names.get("singular"),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                shortnames=set(names.get("shortNames", [])),
                categories=set(names.get("categories", [])),
                subresources=set(version.get("subresources", {})),
                verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
            )
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
        await self._collect_garbage()

    def _get_resources(self) -> list[kmock.resource]:
        """Only the declared resources (kmock also counts those it holds objects of, so that an
        API whose CRD was removed would still be discovered)."""
        return list(iter(self.resources))

    def _declared(self, resource: kmock.resource) -> bool:
        return any(resource == known for known in self.resources)

    def _has_status(self, resource: kmock.resource) -> bool:
        for known in self.resources:
            if resource == known:
                return "status" in self.resources[known].subresources
        return False

    def _fault_for(self, request: kmock.Request, *, streaming: bool = False) -> Fault | None:
        """The fault to answer `request` with; `streaming`: the one to cut its watch stream
        with, now that an event is to be sent on it."""
        for entry in self._faults:
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

    async def _faulted(self, request: kmock.Request, fault: Fault) -> Any:
        """Answer with an error, or late, as injected."""
        if fault.delay_s:
            await asyncio.sleep(fault.delay_s)
        if fault.status:
            raise InjectedError(
                status=fault.status,
                reason="Injected",
                message=fault.message or f"injected {fault.kind}",
                retry_after=fault.retry_after,
            )
        return await self._serve_object(request)

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
                fault = self._fault_for(request, streaming=True) if version > connected else None
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
            _check_version(request.data, current)
        patch_type = apply_patch.content_type(request.headers)
        if request.method.value == "PUT" or patch_type == apply_patch.APPLY:
            new = dict(request.data) if isinstance(request.data, dict) else {}
            new.setdefault("metadata", {})
        elif patch_type == apply_patch.STRATEGIC and isinstance(request.data, dict):
            assert request.resource is not None
            schema = self._schema(request.resource)
            new = apply_patch.strategic_merge(current, request.data, schema)
        else:
            new = _patched(current, request.data)
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
        self._check_owner_references(request, new, old)
        self._check_escalation(request, new, old)
        if self._webhooks is None:
            self._webhooks = self.stored(webhooks.CONFIGURATIONS)
        attempt = webhooks.Attempt(resource, request.subresource, new, old, _USER.get())
        warnings = [*warnings, *webhooks.review(self._webhooks, self.stored, attempt)]
        return new, warnings

    def _plural_of(self, api_version: str, kind: str) -> str | None:
        """The plural served for `kind` in `api_version` (asked for every owner reference of
        every write: indexed once per set of served resources)."""
        served = tuple(self.resources)
        if self._plurals is None or self._plurals[0] != served:
            index: dict[tuple[str, Any], str | None] = {}
            for key, info in self.resources.items():
                known = kmock.resource(key)
                version = str(known.version)
                group_version = f"{known.group}/{version}" if known.group else version
                index.setdefault((group_version, getattr(info, "kind", None)), known.plural)
            self._plurals = (served, index)
        return self._plurals[1].get((api_version, kind))

    def _check_owner_references(
        self, request: kmock.Request, new: Mapping[str, Any], old: Mapping[str, Any] | None
    ) -> None:
        """The OwnerReferencesPermissionEnforcement admission plugin (embedded.rbac)."""
        user = _USER.get()
        if user.admin:
            return
        resource = request.resource
        assert resource is not None
        meta = new.get("metadata") or {}
        namespace, name = request.namespace or meta.get("namespace") or "", meta.get("name", "")
        this = rbac.Attributes(
            "delete", resource.group or "", resource.plural or "", namespace, name
        )
        why = rbac.owner_references_refusal(
            new, old, this, lambda wanted: self._authorize(user, wanted), self._plural_of
        )
        if why:
            verb = "create" if old is None else "update"
            message, details = rbac.forbidden(dataclasses.replace(this, verb=verb), why)
            raise kmock.KubernetesError(403, "Forbidden", message, details)

    def _check_escalation(
        self, request: kmock.Request, new: Mapping[str, Any], old: Mapping[str, Any] | None
    ) -> None:
        """kube-apiserver's RBAC escalation check (embedded.rbac.escalation_refusal): a role or
        binding written grants nothing its writer does not hold."""
        user, resource = _USER.get(), request.resource
        assert resource is not None
        if user.admin or resource.group != rbac.RBAC_GROUP:
            return
        meta = new.get("metadata") or {}
        namespace, name = request.namespace or meta.get("namespace") or "", meta.get("name", "")
        if resource.plural in ("roles", "clusterroles"):
            rules = list(new.get("rules") or [])
        else:
            rules = self._stored_rbac().referred_rules(new.get("roleRef") or {}, namespace)
        why = rbac.escalation_refusal(
            user, rules, namespace, lambda wanted: self._authorize(user, wanted)
        )
        if why:
            verb = "create" if old is None else "update"
            this = rbac.Attributes(verb, resource.group, resource.plural or "", namespace, name)
            raise kmock.KubernetesError(403, "Forbidden", *rbac.forbidden(this, why))

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
        scale = request.subresource == "scale" and bool(request.name)  # PUT has no kmock action
        if resource is None or resource.plural is None or (_action(request) is None and not scale):
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
        fault = self._fault_for(request)
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
                self._authorizer = None  # roles or bindings changed
            if resource.plural == webhooks.CONFIGURATIONS:
                self._webhooks = None
            if request.action == action.DELETE or self._deletion.terminating:
                await self._collect_garbage()
            elif request.action == action.CREATE:
                await self._collect_orphan(key_of(request, resource))
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
        """A watch, as `application/json` (client-go decodes a stream by its content type)."""
        raw = request._raw_request  # private in kmock: the stream is written here
        assert raw is not None
        start = watches.start_of(request.url.query)  # a 400 before the stream when invalid
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        events = self._watch_events(request, start)
        if tables.wanted(request.headers.get("Accept", "")):
            events = self._table_events(request, events)
        try:
            async for event in events:
                chunk = event if isinstance(event, bytes) else json.dumps(event).encode() + b"\n"
                if chunk:
                    await response.write(chunk)
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away, or a fault cut the stream
        return response

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
        await self._collect_garbage()

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
        """(apiVersion, kind) of a served resource."""
        for known, info in self.resources.items():
            if resource == kmock.resource(known):
                group, version = resource.group or "", str(resource.version)
                return (f"{group}/{version}" if group else version), str(getattr(info, "kind", ""))
        raise kmock.KubernetesResourceNotFoundError()

    def _printer_columns(self, resource: kmock.resource) -> list[dict[str, Any]] | None:
        """The CRD's additionalPrinterColumns for `resource`; None for a built-in kind."""
        for crd in self.crds():
            spec = crd["spec"]
            if spec["group"] == resource.group and spec["names"]["plural"] == resource.plural:
                for version in spec["versions"]:
                    if version["name"] == resource.version:
                        return list(version.get("additionalPrinterColumns") or [])
        return None

    def _table_body(
        self, request: kmock.Request, resource: kmock.resource, objects: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return tables.table(
            objects,
            self._printer_columns(resource),
            str(resource.plural),
            resource_version=str(self._version),
            include=request.url.query.get("includeObject", "Metadata"),
        )

    def _table(
        self, request: kmock.Request, resource: kmock.resource, objects: list[dict[str, Any]]
    ) -> aiohttp.web.Response:
        return aiohttp.web.json_response(self._table_body(request, resource, objects))

    async def _table_events(
        self, request: kmock.Request, events: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        """A watch of Tables (`kubectl get -w`): each event's object a one-row Table; no
        bookmarks; an ERROR (410) as it is."""
        assert request.resource is not None
        async for event in events:
            if not isinstance(event, dict) or event["type"] == "ERROR":
                yield event
                continue
            if event["type"] == "BOOKMARK":
                continue
            table = self._table_body(request, request.resource, [event["object"]])
            yield {"type": event["type"], "object": table}

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
                self._uids.add(new["metadata"]["uid"])
                await self._announce(resource, "ADDED", raw)
                return aiohttp.web.json_response(raw, status=201, headers=_warned(warnings))
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
                return aiohttp.web.json_response(raw, headers=_warned(warnings))
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
            scale = _scale_of(current, paths)
            if request.method.value == "GET":
                return aiohttp.web.json_response(scale)
            put = request.method.value == "PUT"
            wanted = request.data if put else _patched(scale, request.data)
            wanted = wanted if isinstance(wanted, dict) else {}
            replicas = (wanted.get("spec") or {}).get("replicas")
            if type(replicas) is not int or replicas < 0:
                message = f"spec.replicas: Invalid value: {replicas!r}: must be an integer >= 0"
                raise kmock.KubernetesError(422, "Invalid", message)
            _check_version(wanted, current)
            new = copy.deepcopy(dict(current))
            _set_path(new, paths["specReplicasPath"], replicas)
            change, warnings = self._stamped(request, current, new)
            obj.patch(change)
            await self._announce(resource, "MODIFIED", obj.raw)
            return aiohttp.web.json_response(_scale_of(obj.raw, paths), headers=_warned(warnings))

    @staticmethod
    def _status(
        code: int, reason: str, message: str, details: Any, headers: Mapping[str, str] | None = None
    ) -> aiohttp.web.Response:
        """Kubernetes' Status object, as an answer."""
        status = status_object(code, reason, message, details)
        return aiohttp.web.json_response(status, status=code, headers=headers)

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        """Kubernetes' Status object, without kmock's traceback (formatting it is slow); kmock's
        own 404s as kube-apiserver's, any other failure a 500 InternalError whose cause goes to
        the log, never to the client."""
        if isinstance(exc, kmock.KubernetesNotFoundError):
            message = "the server could not find the requested resource"
            return self._status(404, "NotFound", message, {})
        if not isinstance(exc, kmock.KubernetesError):
            LOG.error("request failed", exc_info=exc)
            message = (
                "Internal error occurred: the embedded API server failed to serve this request"
            )
            return self._status(500, "InternalError", message, {})
        retry_after = getattr(exc, "retry_after", None)
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        reason = type(exc).__name__ if exc.reason is None else exc.reason  # "": a webhook's
        return self._status(exc.status, reason, exc.message or repr(exc), exc.details, headers)

    async def _collect_orphan(self, key: Any) -> None:
        """Delete a just created object whose owner is already gone (a race the real garbage
        collector also settles)."""
        if key not in self.objects or self.objects[key].deleted:
            return
        raw = self.objects[key].raw
        owners = {ref.get("uid") for ref in raw["metadata"].get("ownerReferences") or []}
        if owners and not owners & self._uids:
            self.objects[key].delete()
            await self._announce(key[0], "DELETED", raw)

    def _live_uids(self) -> set[str]:
        self._uids = {
            obj.raw["metadata"]["uid"] for obj in self.objects.values() if not obj.deleted
        }
        return self._uids

    async def _collect_garbage(self) -> None:
        """Delete every object whose owners are all gone, until none is left; an object that
        keeps some owner loses its references to the others (as Kubernetes' collector does)."""
        while True:
            if await self._deletion.settle():
                continue
            alive = self._live_uids()
            orphans = []
            for key, obj in self.objects.items():
                if obj.deleted:
                    continue
                raw = obj.raw
                refs = raw["metadata"].get("ownerReferences") or []
                kept = [ref for ref in refs if ref.get("uid") in alive]
                if refs and not kept:
                    orphans.append((key, raw))
                elif len(kept) < len(refs):
                    change = {"ownerReferences": kept, "resourceVersion": self._next_version()}
                    obj.patch({"metadata": change})
                    await self._announce(key[0], "MODIFIED", obj.raw)
            if not orphans:
                return
            for key, raw in orphans:
                self.objects[key].delete()
                await self._announce(key[0], "DELETED", raw)


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
        return self.call(lambda handler: handler.issue_token(namespace, name))

    def checks(self) -> set[Check]:
        """Every authorization decision made so far about a user with a token."""
        return self.call(lambda handler: set(handler.checks))

    def inject(self, *faults: Fault) -> None:
        def inject(handler: ApiServer) -> None:
            for fault in faults:
                handler.inject(fault)

        self.call(inject)

    def clear_faults(self) -> None:
        self.call(lambda handler: handler.clear_faults())

    def injected(self) -> dict[str, int]:
        """How many faults were answered, by `Fault.kind`."""
        return self.call(lambda handler: dict(handler.injected))

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
