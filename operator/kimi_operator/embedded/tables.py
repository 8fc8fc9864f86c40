"""`Table` answers (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`, what `kubectl get`
asks for) as kube-apiserver makes them: a CRD's columns are its version's
`additionalPrinterColumns` after `Name` (JSONPath cells, `date` columns as ages), a built-in
kind's are `Name` and `Age` (a namespace's `Status` too; a node's `Status`, `Roles` and `Version`
as kube-apiserver's node printer makes them)."""

import datetime
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}
AGE_COLUMN = {
    "name": "Age",
    "type": "string",
    "format": "",
    "description": "CreationTimestamp is a timestamp representing the server time when this "
    "object was created.",
    "priority": 0,
    "jsonPath": ".metadata.creationTimestamp",
    "date": True,
}
ROLE_PREFIX = "node-role.kubernetes.io/"


def node_status(node: Mapping[str, Any]) -> str:
    """printNode's STATUS: Ready or NotReady by the Ready condition (Unknown without one), then
    SchedulingDisabled for a cordoned node."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c["status"] for c in conditions if c.get("type") == "Ready"), None)
    found = [] if ready is None else ["Ready" if ready == "True" else "NotReady"]
    if (node.get("spec") or {}).get("unschedulable"):
        found = [*(found or ["Unknown"]), "SchedulingDisabled"]
    return ",".join(found or ["Unknown"])


def node_roles(node: Mapping[str, Any]) -> str:
    """printNode's ROLES: the node-role.kubernetes.io/<role> labels, or <none>."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    roles = sorted(key[len(ROLE_PREFIX) :] for key in labels if key.startswith(ROLE_PREFIX))
    return ",".join(roles) or "<none>"


# The columns of built-in kinds as kube-apiserver prints them, after Name (Age where it falls);
# a column's `cell` computes what no JSONPath says.
BUILT_IN_COLUMNS: Mapping[str, Sequence[Mapping[str, Any]]] = {
    "namespaces": (
        {"name": "Status", "type": "string", "priority": 0, "jsonPath": ".status.phase"},
        AGE_COLUMN,
    ),
    "nodes": (
        {"name": "Status", "type": "string", "priority": 0, "cell": node_status},
        {"name": "Roles", "type": "string", "priority": 0, "cell": node_roles},
        AGE_COLUMN,
        {
            "name": "Version",
            "type": "string",
            "priority": 0,
            "jsonPath": ".status.nodeInfo.kubeletVersion",
        },
    ),
}
_STEP = re.compile(r"\.([\w-]+)|\[(\d+|\*)\]|\[\?\(@\.([\w.-]+)\s*==\s*[\"']([^\"']*)[\"']\)\]")


def wanted(accept: str) -> bool:
    """Whether the client asked for a Table first."""
    first = accept.split(",", 1)[0].replace(" ", "")
    return "as=Table" in first.split(";")


def jsonpath(obj: Any, path: str) -> list[Any]:
    """The values at a printer column's JSONPath (the subset CRDs use: fields, indices, `[*]`,
    `[?(@.field=="value")]`); [] when nothing is there."""
    values = [obj]
    position, path = 0, path.strip().strip("{}")
    while position < len(path):
        match = _STEP.match(path, position)
        if match is None:
            raise ValueError(f"unsupported JSONPath {path!r} at {path[position:]!r}")
        position = match.end()
        field, index, key, expected = match.groups()
        found: list[Any] = []
        for value in values:
            if field is not None and isinstance(value, Mapping) and field in value:
                found.append(value[field])
            elif index == "*" and isinstance(value, list):
                found.extend(value)
            elif index is not None and index != "*" and isinstance(value, list):
                found.extend(value[int(index) : int(index) + 1])
            elif key is not None and isinstance(value, list):
                found.extend(
                    item
                    for item in value
                    if [str(v) for v in jsonpath(item, "." + key)] == [expected]
                )
        values = found
    return values


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery's HumanDuration, as kubectl prints ages."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    whole = int(seconds)
    if whole < 120:
        return f"{whole}s"
    minutes, hours = whole // 60, whole // 3600
    if minutes < 10:
        return f"{minutes}m" if whole % 60 == 0 else f"{minutes}m{whole % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = hours // 24 // 365, hours // 24 % 365
        return f"{years}y" if days == 0 else f"{years}y{days}d"
    return f"{hours // 24 // 365}y"


def _age(timestamp: Any, now: datetime.datetime) -> str | None:
    if not isinstance(timestamp, str):
        return None
    created = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return human_duration((now - created).total_seconds())


def columns(
    printer_columns: Sequence[Mapping[str, Any]] | None, plural: str
) -> list[dict[str, Any]]:
    """The columns of a table: a CRD version's printer columns (None for a built-in kind)."""
    if printer_columns is None:
        return [dict(NAME_COLUMN), *(dict(c) for c in BUILT_IN_COLUMNS.get(plural, [AGE_COLUMN]))]
    found = [dict(NAME_COLUMN)]
    for column in printer_columns:
        found.append(
            {
                "name": column["name"],
                "type": column["type"],
                "format": column.get("format", ""),
                "description": column.get("description", ""),
                "priority": column.get("priority", 0),
                "jsonPath": column["jsonPath"],
                "date": column["type"] == "date",
            }
        )
    return found


def _cell(obj: Mapping[str, Any], column: Mapping[str, Any], now: datetime.datetime) -> Any:
    if "cell" in column:
        return column["cell"](obj)
    if "jsonPath" not in column:
        return obj["metadata"]["name"]
    values = jsonpath(obj, column["jsonPath"])
    if not values:
        return None
    if column.get("date"):
        return _age(values[0], now)
    if column["type"] == "integer":
        return values[0] if type(values[0]) is int else None
    if column["type"] == "number":
        return values[0] if isinstance(values[0], int | float) else None
    if column["type"] == "boolean":
        return values[0] if isinstance(values[0], bool) else None
    if len(values) > 1:
        return ",".join(str(v) for v in values)
    value = values[0]
    return (
        value
        if isinstance(value, str)
        else str(value).lower()
        if isinstance(value, bool)
        else str(value)
    )


def _row_object(obj: Mapping[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return dict(obj)
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def table(
    objects: Iterable[Mapping[str, Any]],
    printer_columns: Sequence[Mapping[str, Any]] | None,
    plural: str,
    *,
    resource_version: str,
    include: str = "Metadata",
) -> dict[str, Any]:
    """The meta.k8s.io/v1 Table of `objects`; `include` is the request's `includeObject`."""
    listed = columns(printer_columns, plural)
    now = datetime.datetime.now(datetime.UTC)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [_cell(obj, column, now) for column in listed]}
        included = _row_object(obj, include)
        if included is not None:
            row["object"] = included
        rows.append(row)
    definitions = [
        {key: value for key, value in column.items() if key not in {"jsonPath", "date", "cell"}}
        for column in listed
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }


def printer_columns(
    crds: Iterable[Mapping[str, Any]], group: str | None, version: str | None, plural: str | None
) -> list[dict[str, Any]] | None:
    """The CRD's additionalPrinterColumns for the resource; None for a built-in kind."""
    for crd in crds:
        spec = crd["spec"]
        if spec["group"] == group and spec["names"]["plural"] == plural:
            for served in spec["versions"]:
                if served["name"] == version:
                    return list(served.get("additionalPrinterColumns") or [])
    return None


async def table_events(
    events: AsyncIterator[Any], table_of: Callable[[dict[str, Any]], dict[str, Any]]
) -> AsyncIterator[Any]:
    """A watch of Tables (`kubectl get -w`): each event's object a one-row Table (`table_of`); no
    bookmarks; an ERROR (410) as it is."""
    async for event in events:
        if not isinstance(event, dict) or event["type"] == "ERROR":
            yield event
            continue
        if event["type"] == "BOOKMARK":
            continue
        yield {"type": event["type"], "object": table_of(event["object"])}
