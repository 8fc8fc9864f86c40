"""Server-side apply (`PATCH` with `Content-Type: application/apply-patch+yaml`) and the field
ownership it keeps in `metadata.managedFields`, as kube-apiserver does it:

- the applied configuration is merged into the live object (maps field by field, list-map items
  by their keys, set items by value, atomic lists replaced);
- a field the manager applied last time and leaves out now is removed, unless another manager
  owns it too;
- changing a field another manager owns is refused with 409 `Apply failed with N conflict(s):
  conflict with "<manager>"[ using <apiVersion>]: <field>`, unless `force=true` (then the field
  changes hands); applying the value it already has shares it;
- other writes (`Update` operations) that name a field manager take over the fields they change.

Also the strategic merge patch kubectl's client-side apply sends for built-in kinds
(`application/strategic-merge-patch+json`): lists with a merge key merged by it, `$patch: delete`
items removed, the `$setElementOrder`/`$retainKeys` directives dropped.
"""

import copy
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

import kmock
import yaml

from kimi_operator.embedded.fieldsets import (
    Path,
    Schema,
    at,
    dotted,
    from_fields_v1,
    item_key,
    paths,
    present,
    remove,
    to_fields_v1,
)
from kimi_operator.embedded.upstream import SAFE_LOADER

APPLY = "application/apply-patch+yaml"
STRATEGIC = "application/strategic-merge-patch+json"


def content_type(headers: Mapping[str, str]) -> str:
    return str(headers.get("Content-Type", "")).split(";", 1)[0].strip()


def parse(body: str) -> dict[str, Any]:
    """The applied configuration (YAML or JSON); 400 when it is not an object."""
    try:
        loaded = yaml.load(body, Loader=SAFE_LOADER)  # libyaml's, where PyYAML has it
    except yaml.YAMLError as error:
        raise kmock.KubernetesError(400, "BadRequest", f"error decoding YAML: {error}") from None
    if not isinstance(loaded, dict):
        raise kmock.KubernetesError(400, "BadRequest", "the applied configuration is not an object")
    return loaded


def merged(live: Any, applied: Any, schema: Schema) -> Any:
    """`applied` merged into `live`, as server-side apply merges."""
    if isinstance(live, Mapping) and isinstance(applied, Mapping) and not schema.atomic_map:
        result = dict(live)
        for name, value in applied.items():
            result[name] = merged(live.get(name), value, schema.field(name))
        return result
    if isinstance(live, list) and isinstance(applied, list) and schema.is_map_list:
        keys, items = schema.map_keys, schema.items()
        result_list = list(live)
        index = {item_key(i, keys): n for n, i in enumerate(result_list) if isinstance(i, Mapping)}
        for item in applied:
            key = item_key(item, keys) if isinstance(item, Mapping) else None
            if key in index:
                result_list[index[key]] = merged(result_list[index[key]], item, items)
            else:
                result_list.append(item)
        return result_list
    if isinstance(live, list) and isinstance(applied, list) and schema.list_type == "set":
        return live + [item for item in applied if item not in live]
    return copy.deepcopy(applied)


def _entries(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(e) for e in (obj.get("metadata") or {}).get("managedFields") or []]


def _owned(entry: Mapping[str, Any]) -> set[Path]:
    return from_fields_v1(entry.get("fieldsV1") or {})


def _entry(
    manager: str, operation: str, api_version: str, owned: set[Path], subresource: str
) -> dict[str, Any]:
    entry = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(owned),
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _same(entry: Mapping[str, Any], manager: str, operation: str, subresource: str) -> bool:
    return (entry.get("manager"), entry.get("operation"), entry.get("subresource", "")) == (
        manager,
        operation,
        subresource,
    )


def _with(entries: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    """`entries` with `entry` in place of the one of its manager and operation (entries left
    owning nothing are dropped, as kube-apiserver drops them)."""
    kept = [
        e
        for e in entries
        if not _same(e, entry["manager"], entry["operation"], entry.get("subresource", ""))
        and e.get("fieldsV1")
    ]
    return [*kept, entry] if entry["fieldsV1"] else kept


def _conflict(conflicts: Sequence[tuple[Mapping[str, Any], Path]]) -> kmock.KubernetesError:
    lines, causes = [], []
    for entry, path in conflicts:
        using = f" using {entry['apiVersion']}" if entry.get("operation") == "Update" else ""
        line = f'conflict with "{entry["manager"]}"{using}: {dotted(path)}'
        lines.append(line)
        causes.append({"reason": "FieldManagerConflict", "message": line, "field": dotted(path)})
    count = len(conflicts)
    listed = lines[0] if count == 1 else "\n".join(lines)
    message = f"Apply failed with {count} conflict{'s' if count > 1 else ''}: {listed}"
    return kmock.KubernetesError(409, "Conflict", message, {"causes": causes})


def apply(
    live: Mapping[str, Any] | None,
    applied: Mapping[str, Any],
    schema: Schema,
    *,
    manager: str,
    force: bool,
    subresource: str = "",
) -> dict[str, Any]:
    """The object after `manager` applies `applied` to `live` (None: it does not exist yet),
    with its managedFields; 409 on conflicts unless `force`."""
    if not manager:
        message = "PATCH, application/apply-patch+yaml requires fieldManager to be set"
        raise kmock.KubernetesError(400, "BadRequest", message)
    base: dict[str, Any] = copy.deepcopy(dict(live)) if live is not None else {}
    entries = _entries(base)
    wanted = paths(applied, schema)
    mine = next((e for e in entries if _same(e, manager, "Apply", subresource)), None)
    previous = _owned(mine) if mine is not None else set()
    others = [e for e in entries if e is not mine]
    conflicts = []
    for entry in others:
        owned = _owned(entry)
        # A list-map item itself is there on both sides: only its fields can clash.
        clashing = {
            p
            for p in wanted & owned
            if not p[-1].startswith("k:") and present(base, p) and at(base, p) != at(applied, p)
        }
        if clashing and force:
            entry["fieldsV1"] = to_fields_v1(owned - clashing)
        conflicts += [(entry, p) for p in sorted(clashing)]
    if conflicts and not force:
        raise _conflict(conflicts)
    result: dict[str, Any] = merged(base, dict(applied), schema)
    owned_by_others = set().union(*(_owned(e) for e in others)) if others else set()
    for path in sorted(previous - wanted - owned_by_others, key=len):  # items before fields
        remove(result, path)
    api_version = str(applied.get("apiVersion", base.get("apiVersion", "")))
    result.setdefault("metadata", {})["managedFields"] = _with(
        others, _entry(manager, "Apply", api_version, wanted, subresource)
    )
    return result


def updated(
    current: Mapping[str, Any],
    new: dict[str, Any],
    schema: Schema,
    *,
    manager: str,
    subresource: str = "",
) -> None:
    """Record an Update by `manager` in `new`'s managedFields (in place): the fields it changed
    are its now, no longer the other managers'."""
    entries = _entries(current)
    before, after = paths(current, schema), paths(new, schema)
    changed = {p for p in after if at(current, p) != at(new, p)} | (before - after)
    if not changed:
        new.setdefault("metadata", {})["managedFields"] = entries
        return
    for entry in entries:
        entry["fieldsV1"] = to_fields_v1(_owned(entry) - changed)
    mine = next((e for e in entries if _same(e, manager, "Update", subresource)), None)
    owned = (_owned(mine) if mine is not None else set()) | (changed & after)
    api_version = str(new.get("apiVersion", ""))
    new.setdefault("metadata", {})["managedFields"] = _with(
        entries, _entry(manager, "Update", api_version, owned, subresource)
    )


def strategic_merge(current: Any, patch: Any, schema: Schema) -> Any:
    """A strategic merge patch applied to `current`."""
    if not isinstance(patch, Mapping) or not isinstance(current, Mapping):
        return copy.deepcopy(patch)
    result = dict(current)
    for name, change in patch.items():
        if name.startswith("$"):
            continue  # $setElementOrder/..., $retainKeys, $patch on a map: order and hints
        field = schema.field(name)
        if change is None:
            result.pop(name, None)
        elif isinstance(change, list) and field.is_map_list:
            result[name] = _merge_list(list(current.get(name) or []), change, field)
        elif isinstance(change, Mapping) and change.get("$patch") == "replace":
            result[name] = {k: v for k, v in change.items() if k != "$patch"}
        else:
            result[name] = strategic_merge(current.get(name), change, field)
    return result


def _merge_list(current: list[Any], change: list[Any], schema: Schema) -> list[Any]:
    keys, items = schema.map_keys, schema.items()
    result = list(current)
    for item in change:
        if not isinstance(item, Mapping):
            continue
        key = item_key(item, keys)
        found = [
            n for n, i in enumerate(result) if isinstance(i, Mapping) and item_key(i, keys) == key
        ]
        if item.get("$patch") == "delete":
            result = [i for n, i in enumerate(result) if n not in found]
        elif found:
            result[found[0]] = strategic_merge(result[found[0]], item, items)
        else:
            result.append({k: v for k, v in item.items() if not k.startswith("$")})
    return result


def manager_of(query: Mapping[str, str], headers: Mapping[str, str]) -> str:
    """The field manager of a write: `fieldManager`, else the User-Agent's program name (as
    kube-apiserver derives it)."""
    return query.get("fieldManager") or str(headers.get("User-Agent", "")).split("/", 1)[0]
