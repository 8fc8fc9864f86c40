"""Namespaces and lists as kube-apiserver serves them.

kmock reads `/api/v1/namespaces/<name>` as a namespaced path without a resource (and fails on
`/api/v1/namespaces`), so namespace requests are parsed here. A namespace is created `Active`
with the `kubernetes` finalizer and its `kubernetes.io/metadata.name` label; deleting one deletes
what is in it (the namespace controller's work, done at once). Lists carry their `kind`
(`<Kind>List`) and `apiVersion`, narrowed by equality label selectors and by the
`metadata.name` / `metadata.namespace` field selectors (`kubectl wait`, `kubectl delete --wait`).
"""

from collections.abc import Mapping
from typing import Any

import aiohttp.web
import kmock
from kmock import action

NAMESPACES = kmock.resource("", "v1", "namespaces")
PREFIX = "/api/v1/namespaces"
# What a new cluster has.
EVENT_FIELDS = frozenset({"involvedObject", "reason", "type", "source"})
# A Pod's selectable fields that kubectl uses: `kubectl drain` lists a node's pods by
# spec.nodeName, `kubectl describe node` by status.phase too. Unset, they select as "".
POD_FIELDS = frozenset({"spec.nodeName", "status.phase"})
INITIAL = ("default", "kube-node-lease", "kube-public", "kube-system")


def is_namespace_path(path: str) -> bool:
    """`/api/v1/namespaces`, `/api/v1/namespaces/<name>` and its `/status` or `/finalize`."""
    if path.rstrip("/") == PREFIX:
        return True
    rest = path[len(PREFIX) + 1 :].strip("/").split("/") if path.startswith(PREFIX + "/") else []
    return len(rest) == 1 or (len(rest) == 2 and rest[1] in {"status", "finalize"})


def parse_path(
    path: str,
) -> tuple[kmock.resource, str | None, str | None, str | None] | None:
    """(resource, namespace, name, subresource) of a resource path; None for any other path."""
    if is_namespace_path(path):
        parts = path[len(PREFIX) :].strip("/").split("/")
        return NAMESPACES, None, parts[0] or None, parts[1] if len(parts) > 1 else None
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 3:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis" and len(parts) >= 4:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    name = rest[1] if len(rest) > 1 else None
    subresource = "/".join(rest[2:]) or None
    return kmock.resource(group, version, rest[0]), namespace, name, subresource


async def request_of(raw: aiohttp.web.BaseRequest, decoded: Any = None) -> kmock.Request | None:
    """The kmock request of a namespace path (`is_namespace_path`), or of any resource path
    whose body was not JSON (`decoded`, embedded.protobuf); None for other paths."""
    parsed = parse_path(raw.path)
    if parsed is None:
        return None
    resource, namespace, name, subresource = parsed
    body = await raw.read()
    data = decoded
    if data is None and body:
        try:
            data = await raw.json()
        except ValueError:
            data = None
    method, query = raw.method, dict(raw.query)
    if method == "GET" and query.get("watch") in {"true", "1"}:
        verb = action.WATCH
    elif name is None:
        verb = {"GET": action.LIST, "POST": action.CREATE}.get(method)  # type: ignore[assignment]
    else:
        verb = {"GET": action.FETCH, "PATCH": action.UPDATE, "DELETE": action.DELETE}.get(method)  # type: ignore[assignment]
    return kmock.Request(
        id=0,
        raw_request=raw,
        url=raw.url,
        method=method,
        params=query,
        headers=dict(raw.headers),
        cookies=dict(raw.cookies),
        data=data,
        body=body,
        text=body.decode(errors="replace"),
        action=verb,
        resource=resource,
        namespace=namespace,
        name=name,
        subresource=subresource,
    )


def new_namespace(obj: dict[str, Any]) -> dict[str, Any]:
    """A namespace as kube-apiserver stores it on creation."""
    meta = dict(obj.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": meta["name"]}
    spec = {"finalizers": ["kubernetes"], **(obj.get("spec") or {})}
    return {**obj, "metadata": meta, "spec": spec, "status": {"phase": "Active"}}


def initial(name: str) -> dict[str, Any]:
    return new_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def _field(obj: Mapping[str, Any], key: str) -> str | None:
    """The value of a selectable field: metadata.name and metadata.namespace of every kind, an
    Event's involvedObject.*, reason, type and source (what `kubectl describe` selects by), and
    a Pod's POD_FIELDS."""
    top = key.split(".", 1)[0]
    kind = obj.get("kind")
    if (
        key not in {"metadata.name", "metadata.namespace"}
        and (kind != "Event" or top not in EVENT_FIELDS)
        and (kind != "Pod" or key not in POD_FIELDS)
    ):
        message = (
            f'"{key}" is not a known field selector: only "metadata.name", "metadata.namespace"'
        )
        raise kmock.KubernetesError(400, "BadRequest", message)
    value: Any = obj
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if top == "source" and isinstance(value, Mapping):
        value = value.get("component")
    if value is None and kind == "Pod":
        return ""
    return None if value is None else str(value)


def _field_matches(obj: Mapping[str, Any], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        negated = "!=" in term
        key, _, value = term.replace("!=", "=").replace("==", "=").partition("=")
        if (_field(obj, key) == value) == negated:
            return False
    return True


def _labels_match(obj: Mapping[str, Any], selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        negated = "!=" in term
        key, _, value = term.replace("!=", "=").replace("==", "=").partition("=")
        if "=" not in term.replace("!=", "="):
            if key.strip() not in labels:
                return False
        elif (labels.get(key.strip()) == value.strip()) == negated:
            return False
    return True


def selected(obj: Mapping[str, Any], query: Mapping[str, str]) -> bool:
    """Whether `obj` passes the request's labelSelector and fieldSelector."""
    return _labels_match(obj, query.get("labelSelector", "")) and _field_matches(
        obj, query.get("fieldSelector", "")
    )


def list_of(
    kind: str, api_version: str, items: list[dict[str, Any]], resource_version: str
) -> dict[str, Any]:
    """A list answer as kube-apiserver's."""
    return {
        "kind": f"{kind}List",
        "apiVersion": api_version,
        "metadata": {"resourceVersion": resource_version},
        "items": items,
    }
