"""OpenAPI v2 (`/openapi/v2`) and v3 (`/openapi/v3`, `/openapi/v3/apis/<group>/<version>`) as
kube-apiserver publishes them, for the kinds this server serves: the built-in kinds' definitions
are Kubernetes' own (builtin_openapi.json, made from kubernetes-validate's copy of them by
tests/support/builtin_openapi.py), each installed CRD's are its versions' schemas.

What clients read from them: kubectl asks a group-version's document whether PATCH takes the
`fieldValidation` parameter (then it leaves validation to the server); `kubectl explain` walks
the schema of a kind (found by its `x-kubernetes-group-version-kind`); `kubectl apply` reads the
built-in kinds' merge keys.
"""

import copy
import functools
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from kimi_operator.embedded.discovery import GIT_VERSION, Served

BUILT_IN_FILE = Path(__file__).with_name("builtin_openapi.json")
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
LIST_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
GVK = "x-kubernetes-group-version-kind"
# The query parameters of each operation kubectl looks at.
WRITE_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation")
ACTIONS = {
    "collection": {"get": "list", "post": "post"},
    "item": {"get": "get", "put": "put", "patch": "patch", "delete": "delete"},
}
TYPE_META = {
    "apiVersion": {
        "description": "APIVersion defines the versioned schema of this representation of an "
        "object.",
        "type": "string",
    },
    "kind": {
        "description": "Kind is a string value representing the REST resource this object "
        "represents.",
        "type": "string",
    },
}


@functools.cache
def built_in() -> dict[str, Any]:
    """Kubernetes' definitions of the built-in kinds served here (read once)."""
    loaded: dict[str, Any] = json.loads(BUILT_IN_FILE.read_text())
    return loaded


def definition_name(group: str, version: str, kind: str) -> str:
    """kube-apiserver's name for a CRD kind's definition: the group reversed (`io.kimi-operator`),
    then version and kind."""
    return ".".join([*reversed(group.split(".")), version, kind])


def crd_definitions(crds: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The definitions of every served version of these CRDs, and of their lists."""
    found: dict[str, Any] = {}
    for crd in crds:
        spec = crd["spec"]
        group, kind = spec["group"], spec["names"]["kind"]
        list_kind = spec["names"].get("listKind", f"{kind}List")
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            schema = copy.deepcopy((version.get("schema") or {}).get("openAPIV3Schema") or {})
            schema.setdefault("type", "object")
            properties = schema.setdefault("properties", {})
            properties.update(copy.deepcopy(TYPE_META))
            properties["metadata"] = {"$ref": f"#/definitions/{OBJECT_META}"}
            name = version["name"]
            schema[GVK] = [{"group": group, "version": name, "kind": kind}]
            found[definition_name(group, name, kind)] = schema
            found[definition_name(group, name, list_kind)] = {
                "description": f"{list_kind} is a list of {kind}",
                "type": "object",
                "required": ["items"],
                "properties": {
                    **copy.deepcopy(TYPE_META),
                    "items": {
                        "type": "array",
                        "items": {"$ref": f"#/definitions/{definition_name(group, name, kind)}"},
                    },
                    "metadata": {"$ref": f"#/definitions/{LIST_META}"},
                },
                GVK: [{"group": group, "version": name, "kind": list_kind}],
            }
    return found


def by_kind(definitions: Mapping[str, Any]) -> dict[tuple[str, str, str], str]:
    index = {}
    for name, schema in definitions.items():
        for gvk in schema.get(GVK) or []:
            index[gvk["group"], gvk["version"], gvk["kind"]] = name
    return index


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref.rsplit("/", 1)[-1]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def closure(definitions: Mapping[str, Any], roots: Iterable[str]) -> dict[str, Any]:
    """The definitions of `roots` and of everything they refer to, by name."""
    wanted: dict[str, Any] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in wanted or name not in definitions:
            continue
        wanted[name] = definitions[name]
        todo.extend(_refs(definitions[name]))
    return dict(sorted(wanted.items()))


def _collection_path(resource: Served) -> str:
    base = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
    namespace = "/namespaces/{namespace}" if resource.namespaced else ""
    return f"{base}{namespace}/{resource.plural}"


def _operation(resource: Served, action: str, ref: str, *, v3: bool) -> dict[str, Any]:
    names = WRITE_PARAMETERS + (("force",) if action == "patch" else ())
    if action in {"list", "get"}:
        names = ()
    parameters = [
        {"name": name, "in": "query", "uniqueItems": True}
        | ({"schema": {"type": "string"}} if v3 else {"type": "string"})
        for name in names
    ]
    target = {"$ref": ref}
    response = (
        {"description": "OK", "content": {"application/json": {"schema": target}}}
        if v3
        else {"description": "OK", "schema": target}
    )
    return {
        "operationId": f"{action}{resource.kind}",
        "parameters": parameters,
        "responses": {"200": response},
        "x-kubernetes-action": action,
        GVK: {"group": resource.group, "version": resource.version, "kind": resource.kind},
    }


def _paths(
    resources: Iterable[Served], index: Mapping[tuple[str, str, str], str], *, v3: bool
) -> dict[str, Any]:
    prefix = "#/components/schemas/" if v3 else "#/definitions/"
    paths: dict[str, Any] = {}
    for resource in resources:
        name = index.get((resource.group, resource.version, resource.kind))
        if name is None:
            continue
        collection = _collection_path(resource)
        for scope, path in (("collection", collection), ("item", collection + "/{name}")):
            paths[path] = {
                method: _operation(resource, action, prefix + name, v3=v3)
                for method, action in ACTIONS[scope].items()
            }
    return paths


def all_definitions(crds: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    return {**built_in(), **crd_definitions(crds)}


def v2(resources: list[Served], crds: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """`/openapi/v2`: every definition served, with the paths of every resource."""
    definitions = all_definitions(crds)
    index = by_kind(definitions)
    served_roots = [index[k] for r in resources if (k := (r.group, r.version, r.kind)) in index]
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": _paths(resources, index, v3=False),
        "definitions": closure(definitions, [*served_roots, OBJECT_META]),
    }


def _group_version_path(group_version: str) -> str:
    return f"apis/{group_version}" if "/" in group_version else f"api/{group_version}"


def v3(resources: list[Served], crds: Iterable[Mapping[str, Any]]) -> dict[str, bytes]:
    """{"api/v1" or "apis/<group>/<version>": its OpenAPI v3 document, serialized}."""
    definitions = all_definitions(crds)
    index = by_kind(definitions)
    documents: dict[str, bytes] = {}
    by_group_version: dict[str, list[Served]] = {}
    for resource in resources:
        by_group_version.setdefault(resource.group_version, []).append(resource)
    for group_version, served in by_group_version.items():
        roots = [index[k] for r in served if (k := (r.group, r.version, r.kind)) in index]
        list_kinds = [(r.group, r.version, f"{r.kind}List") for r in served]
        roots += [index[k] for k in list_kinds if k in index]
        document = {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": GIT_VERSION},
            "paths": _paths(served, index, v3=True),
            "components": {"schemas": closure(definitions, roots)},
        }
        text = json.dumps(document).replace('"#/definitions/', '"#/components/schemas/')
        documents[_group_version_path(group_version)] = text.encode()
    return documents


def v3_root(documents: Mapping[str, bytes]) -> dict[str, Any]:
    """`/openapi/v3`: where each group-version's document is, with its hash (clients cache by
    it)."""
    return {
        "paths": {
            path: {
                "serverRelativeURL": f"/openapi/v3/{path}?hash="
                + hashlib.sha512(document).hexdigest()[:32].upper()
            }
            for path, document in sorted(documents.items())
        }
    }
