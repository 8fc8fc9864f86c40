"""Field sets as server-side apply tracks them (sigs.k8s.io/structured-merge-diff): the paths of
an object's fields, walked with the kind's OpenAPI schema so that lists are what the schema says
(`x-kubernetes-list-type: map` items keyed by `x-kubernetes-list-map-keys`, `set` items by value,
`atomic`, the default, owned whole) and maps granular unless `x-kubernetes-map-type: atomic`.

A path is a tuple of path elements as `metadata.managedFields[].fieldsV1` spells them: `f:<field>`,
`k:{"<key>":<value>}` (a list-map item), `v:<value>` (a set item).
"""

import json
from collections.abc import Iterable, Mapping
from typing import Any

Path = tuple[str, ...]
# Fields no manager owns: identity and bookkeeping kube-apiserver sets itself.
IGNORED: frozenset[Path] = frozenset(
    {
        ("f:apiVersion",),
        ("f:kind",),
        ("f:metadata", "f:name"),
        ("f:metadata", "f:namespace"),
        ("f:metadata", "f:uid"),
        ("f:metadata", "f:resourceVersion"),
        ("f:metadata", "f:generation"),
        ("f:metadata", "f:creationTimestamp"),
        ("f:metadata", "f:managedFields"),
        ("f:metadata", "f:selfLink"),
    }
)
_MISSING = object()


class Schema:
    """A node of an OpenAPI schema with its definitions, `$ref`s followed (an empty schema: no
    type information, as for `x-kubernetes-preserve-unknown-fields`)."""

    def __init__(self, node: Mapping[str, Any] | None, definitions: Mapping[str, Any]) -> None:
        self.definitions = definitions
        node = node or {}
        for _ in range(32):
            ref = node.get("$ref") or next(
                (part["$ref"] for part in node.get("allOf") or [] if "$ref" in part), None
            )
            if not isinstance(ref, str):
                break
            node = definitions.get(ref.rsplit("/", 1)[-1]) or {}
        self.node: Mapping[str, Any] = node

    def field(self, name: str) -> "Schema":
        properties = self.node.get("properties") or {}
        if name in properties:
            return Schema(properties[name], self.definitions)
        extra = self.node.get("additionalProperties")
        return Schema(extra if isinstance(extra, Mapping) else None, self.definitions)

    def items(self) -> "Schema":
        return Schema(self.node.get("items"), self.definitions)

    @property
    def list_type(self) -> str:
        return str(self.node.get("x-kubernetes-list-type", "atomic"))

    @property
    def map_keys(self) -> list[str]:
        keys = self.node.get("x-kubernetes-list-map-keys")
        if keys:
            return list(keys)
        merge_key = self.node.get("x-kubernetes-patch-merge-key")
        return [merge_key] if merge_key else []

    @property
    def atomic_map(self) -> bool:
        return self.node.get("x-kubernetes-map-type") == "atomic"

    @property
    def is_map_list(self) -> bool:
        return bool(self.map_keys) and (
            self.list_type == "map" or self.node.get("x-kubernetes-patch-strategy") == "merge"
        )


def item_key(item: Mapping[str, Any], keys: list[str]) -> str:
    return "k:" + json.dumps({k: item.get(k) for k in sorted(keys)}, separators=(",", ":"))


def value_key(value: Any) -> str:
    return "v:" + json.dumps(value, separators=(",", ":"))


def paths(value: Any, schema: Schema, prefix: Path = ()) -> set[Path]:
    """Every owned path of `value`: leaves, and list-map items themselves."""
    found: set[Path] = set()
    if isinstance(value, Mapping) and value and not schema.atomic_map:
        for name, child in value.items():
            path = (*prefix, f"f:{name}")
            if path not in IGNORED:
                found |= paths(child, schema.field(name), path)
        return found
    if isinstance(value, list) and value and schema.is_map_list:
        keys, items = schema.map_keys, schema.items()
        for item in value:
            if isinstance(item, Mapping):
                path = (*prefix, item_key(item, keys))
                found.add(path)
                found |= paths(item, items, path)
        return found
    if isinstance(value, list) and value and schema.list_type == "set":
        return {(*prefix, value_key(item)) for item in value}
    return {prefix} if prefix else set()


def at(obj: Any, path: Path) -> Any:
    """The value at `path` (_MISSING where there is none)."""
    for element in path:
        kind, _, name = element.partition(":")
        if kind == "f" and isinstance(obj, Mapping) and name in obj:
            obj = obj[name]
        elif kind == "k" and isinstance(obj, list):
            wanted = json.loads(name)
            matches = [i for i in obj if isinstance(i, Mapping) and item_matches(i, wanted)]
            if not matches:
                return _MISSING
            obj = matches[0]
        elif kind == "v" and isinstance(obj, list) and json.loads(name) in obj:
            obj = json.loads(name)
        else:
            return _MISSING
    return obj


def item_matches(item: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(item.get(k) == v for k, v in wanted.items())


def present(obj: Any, path: Path) -> bool:
    return at(obj, path) is not _MISSING


def remove(obj: Any, path: Path) -> None:
    """Delete the field, list-map item or set item at `path` from `obj` (in place)."""
    parent = at(obj, path[:-1]) if len(path) > 1 else obj
    kind, _, name = path[-1].partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(name, None)
    elif kind == "k" and isinstance(parent, list):
        wanted = json.loads(name)
        parent[:] = [i for i in parent if not (isinstance(i, Mapping) and item_matches(i, wanted))]
    elif kind == "v" and isinstance(parent, list):
        value = json.loads(name)
        parent[:] = [i for i in parent if i != value]


def to_fields_v1(owned: Iterable[Path]) -> dict[str, Any]:
    """The `fieldsV1` tree of a set of paths (a list-map item owned itself gets `.`)."""
    tree: dict[str, Any] = {}
    for path in sorted(owned):
        node = tree
        for element in path:
            node = node.setdefault(element, {})
    for path in owned:
        node = tree
        for element in path:
            node = node[element]
        if node and path[-1].startswith("k:"):
            node["."] = {}
    return tree


def from_fields_v1(tree: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    found: set[Path] = set()
    for element, child in tree.items():
        if element == ".":
            found.add(prefix)
            continue
        path = (*prefix, element)
        if child:
            found |= from_fields_v1(child, path)
        else:
            found.add(path)
    return found


def dotted(path: Path) -> str:
    """The path as kube-apiserver's conflict messages print it:
    `.spec.containers[name="a"].image`."""
    text = ""
    for element in path:
        kind, _, name = element.partition(":")
        if kind == "f":
            text += f".{name}"
        elif kind == "k":
            pairs = ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(name).items())
            text += f"[{pairs}]"
        else:
            text += f"[={name}]"
    return text
