"""A CRD's structural schema as kube-apiserver applies it to every object written (create, update,
patch): nulls of non-nullable fields dropped, unknown fields pruned (or refused, with
`fieldValidation=Strict` as `kubectl apply` sends), schema defaults applied, then every OpenAPI
value validation, each failure a field error in the API server's words.

Built from the CRD alone (no model of ours): any installed CRD, ours or upstream, goes through the
same code. What is not reproduced is listed in docs/embedded-api-server.md.
"""

import base64
import copy
import datetime
import ipaddress
import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Path = tuple[str | int, ...]  # keys and list indexes from the object's root
KEPT_AT_ROOT = frozenset({"apiVersion", "kind", "metadata"})  # ObjectMeta is not the CRD's


def field_path(path: Path) -> str:
    """`spec.env[0].name`, as kube-apiserver writes field paths."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


def show(value: Any) -> str:
    """A value as Go's field errors print it: strings quoted, numbers and booleans bare."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class FieldError:
    """One cause of a 422: `field`: `detail` (the message kube-apiserver gives for it)."""

    field: str
    reason: str  # a metav1.CauseType: FieldValueInvalid, FieldValueRequired, ...
    detail: str
    node: Path  # where the checked value is: unchanged there on an update, it is let be

    def __str__(self) -> str:
        return f"{self.field}: {self.detail}"


def invalid(path: Path, value: Any, detail: str, reason: str = "FieldValueInvalid") -> FieldError:
    return FieldError(field_path(path), reason, f"Invalid value: {show(value)}: {detail}", path)


def _wrong_type(path: Path, value: Any, expected: str) -> FieldError:
    detail = f'{field_path(path)} in body must be of type {expected}: "{_json_type(value)}"'
    return invalid(path, _json_type(value), detail, "FieldValueTypeInvalid")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}[type(value)]


def _is(value: Any, kind: str) -> bool:
    actual = _json_type(value)
    return actual == kind or (kind == "number" and actual == "integer")


# --- speed: what a node can skip, worked out once per schema ----------------------------------

# Private keys `annotated` adds to a schema's nodes; a schema without them is walked in full.
_SCALAR = "\x00scalar"  # the Python types a node accepts with nothing more to check
_CONTAINER = "\x00container"  # dict or list: an object or array node with nothing else to check
_DEFAULTS = "\x00defaults"  # whether any default lies at or below the node
_VALUE_KEYWORDS = frozenset(
    {
        "enum", "allOf", "anyOf", "oneOf", "not", "nullable", "x-kubernetes-int-or-string",
        "minimum", "maximum", "multipleOf", "maxLength", "minLength", "pattern", "format",
    }
)  # fmt: skip
_SCALAR_TYPES = {
    "string": frozenset({str}),
    "integer": frozenset({int}),
    "number": frozenset({int, float}),
    "boolean": frozenset({bool}),
}


def annotated(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `schema` that marks what each node can skip: a scalar node with nothing to
    check but its type (most of them: validating an object walks every node, and the walk
    costs more than the checks), and a subtree without defaults. The API server's admission of
    a large object (a LeaderWorkerSet's pod templates) is several times faster for it, with the
    same verdicts; the benchmark's API server spends most of its time there."""
    out: dict[str, Any] = copy.deepcopy(dict(schema))
    _annotate(out)
    return out


def _annotate(node: dict[str, Any]) -> bool:
    """Mark `node` and its subtree; whether a default lies at or below it."""
    below = [
        *node.get("properties", {}).values(),
        *(node.get(k) for k in ("items", "additionalProperties") if isinstance(node.get(k), dict)),
        *(sub for k in ("allOf", "anyOf", "oneOf") for sub in node.get(k, [])),
        *([node["not"]] if isinstance(node.get("not"), dict) else []),
    ]
    defaults = "default" in node
    for sub in below:
        defaults = _annotate(sub) or defaults
    node[_DEFAULTS] = defaults
    keywords = set(_VALUE_KEYWORDS & node.keys())
    if node.get("format") not in FORMATS:
        keywords.discard("format")  # int32, int64, ...: documentation only, as there
    if not keywords:
        kind = node.get("type", "")
        if kind in _SCALAR_TYPES:
            node[_SCALAR] = _SCALAR_TYPES[kind]
        elif kind in ("object", "array"):
            node[_CONTAINER] = dict if kind == "object" else list
    return defaults


# --- null dropping and pruning -------------------------------------------------------------


def prune(schema: Mapping[str, Any], value: Any, path: Path, unknown: list[str]) -> Any:
    """`value` without the fields `schema` does not declare (their paths go to `unknown`) and
    without the nulls of non-nullable fields."""
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        keep_all = schema.get("x-kubernetes-preserve-unknown-fields") or extra is True
        embedded = schema.get("x-kubernetes-embedded-resource")
        out = {}
        for key, item in value.items():
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if item is None and not (sub or {}).get("nullable"):
                continue
            if (not path or embedded) and key in KEPT_AT_ROOT:
                out[key] = item
            elif sub is not None:
                out[key] = prune(sub, item, (*path, key), unknown)
            elif keep_all:
                out[key] = item
            else:
                unknown.append(field_path((*path, key)))
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(schema["items"], item, (*path, i), unknown) for i, item in enumerate(value)]
    return value


# --- defaulting ----------------------------------------------------------------------------


def default(schema: Mapping[str, Any], value: Any) -> Any:
    """`value` with each absent property that has a `default` set to it, at every depth (a
    default's own fields get their defaults too)."""
    if not schema.get(_DEFAULTS, True):
        return value
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        out = dict(value)
        for key, sub in properties.items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
        for key, item in out.items():
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                out[key] = default(sub, item)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [default(schema["items"], item) for item in value]
    return value


# --- validation ----------------------------------------------------------------------------


def _date_time(text: str) -> bool:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).tzinfo is not None


def _parses(parse: Callable[[str], object]) -> Callable[[str], bool]:
    return lambda text: parse(text) is not None


# The formats kube-apiserver checks (k8s.io/kube-openapi's strfmt registry) that are checked here;
# int32, int64, float and double are documentation only there too.
FORMATS: dict[str, Callable[[str], bool]] = {
    "date-time": _date_time,
    "datetime": _date_time,
    "date": _parses(datetime.date.fromisoformat),
    "byte": _parses(lambda text: base64.b64decode(text, validate=True)),
    "uuid": _parses(uuid.UUID),
    "ipv4": _parses(ipaddress.IPv4Address),
    "ipv6": _parses(ipaddress.IPv6Address),
    "cidr": _parses(lambda text: ipaddress.ip_network(text, strict=False)),
}


def _format_ok(fmt: str, text: str) -> bool:
    check = FORMATS.get(fmt)
    try:
        return check is None or check(text)
    except ValueError:  # binascii.Error and AddressValueError are ValueErrors
        return False


def _same(a: Any, b: Any) -> bool:
    """JSON equality (1 is not true, 1 is 1.0)."""
    return _json_type(a).replace("integer", "number") == _json_type(b).replace(
        "integer", "number"
    ) and bool(a == b)


def validate(
    schema: Mapping[str, Any], value: Any, path: Path = (), old: Any = None
) -> list[FieldError]:
    """Every OpenAPI value validation `value` fails, as kube-apiserver words it. With `old` (an
    update), the top-level fields left as they were are not walked: the API server ratchets
    their errors away anyway (admission._changed), and a status write leaves the spec alone."""
    errors: list[FieldError] = []
    plain_root = schema.get("type") == "object" and not _VALUE_KEYWORDS & schema.keys()
    if isinstance(old, dict) and isinstance(value, dict) and plain_root:
        unchanged = {key for key, item in value.items() if key in old and old[key] == item}
        _check_object(schema, value, path, errors, skip=unchanged)
        return errors
    _check(schema, value, path, errors)
    return errors


def _check(schema: Mapping[str, Any], value: Any, path: Path, errors: list[FieldError]) -> None:
    """(Field paths are written only for an error: most values pass, and a path costs more
    than the checks.)"""
    scalar = schema.get(_SCALAR)
    if scalar is not None and type(value) in scalar:
        return
    container = schema.get(_CONTAINER)
    if container is dict and type(value) is dict:
        _check_object(schema, value, path, errors)
        return
    if container is list and type(value) is list:
        _check_array(schema, value, path, errors)
        return
    kind = schema.get("type")
    if value is None and schema.get("nullable"):
        return
    if schema.get("x-kubernetes-int-or-string"):
        if _json_type(value) not in ("integer", "string"):
            errors.append(_wrong_type(path, value, "integer,string"))
            return
    elif kind and not _is(value, kind):
        errors.append(_wrong_type(path, value, kind))
        return
    enum = schema.get("enum")
    if enum is not None and not any(_same(value, allowed) for allowed in enum):
        supported = ", ".join(json.dumps(str(e)) for e in enum)
        detail = f"Unsupported value: {show(value)}: supported values: {supported}"
        errors.append(FieldError(field_path(path), "FieldValueNotSupported", detail, path))
    for sub in schema.get("allOf", []):
        _check(sub, value, path, errors)
    for keyword, passes in (("anyOf", 1), ("oneOf", 1)):
        options = schema.get(keyword)
        if options:
            ok = sum(1 for sub in options if not validate(sub, value, path))
            if ok < passes or (keyword == "oneOf" and ok > 1):
                detail = f"{field_path(path)} in body must validate {keyword}"
                errors.append(invalid(path, value, detail))
    if "not" in schema and not validate(schema["not"], value, path):
        detail = f"{field_path(path)} in body must not validate the schema"
        errors.append(invalid(path, value, detail))
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        _check_number(schema, value, path, errors)
    elif isinstance(value, str):
        _check_string(schema, value, path, errors)
    elif isinstance(value, list):
        _check_array(schema, value, path, errors)
    elif isinstance(value, dict):
        _check_object(schema, value, path, errors)


def _check_number(
    schema: Mapping[str, Any], value: float, path: Path, errors: list[FieldError]
) -> None:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and (value <= low if schema.get("exclusiveMinimum") else value < low):
        word = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
        detail = f"{field_path(path)} in body should be {word} {show(low)}"
        errors.append(invalid(path, value, detail))
    if high is not None and (value >= high if schema.get("exclusiveMaximum") else value > high):
        word = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
        detail = f"{field_path(path)} in body should be {word} {show(high)}"
        errors.append(invalid(path, value, detail))
    step = schema.get("multipleOf")
    if step and (value / step) != int(value / step):
        detail = f"{field_path(path)} in body should be a multiple of {step}"
        errors.append(invalid(path, value, detail))


def _check_string(
    schema: Mapping[str, Any], value: str, path: Path, errors: list[FieldError]
) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        detail = f"Too long: may not be more than {schema['maxLength']} bytes"
        errors.append(FieldError(field_path(path), "FieldValueTooLong", detail, path))
    if "minLength" in schema and len(value) < schema["minLength"]:
        detail = f"{field_path(path)} in body should be at least {schema['minLength']} chars long"
        errors.append(invalid(path, value, detail))
    if "pattern" in schema and not re.search(schema["pattern"], value):
        detail = f"{field_path(path)} in body should match '{schema['pattern']}'"
        errors.append(invalid(path, value, detail))
    if "format" in schema and not _format_ok(schema["format"], value):
        detail = f"{field_path(path)} in body must be of type {schema['format']}: {show(value)}"
        errors.append(invalid(path, value, detail))


def _check_count(
    most: int | None,
    least: int | None,
    count: int,
    *,
    noun: str,
    at: Path,
    errors: list[FieldError],
) -> None:
    """maxItems/minItems, maxProperties/minProperties (kube-apiserver says "items" for both
    maxima)."""
    if most is not None and count > most:
        detail = f"Too many: {count}: must have at most {most} items"
        errors.append(FieldError(field_path(at), "FieldValueTooMany", detail, at))
    if least is not None and count < least:
        detail = f"{field_path(at)} in body should have at least {least} {noun}"
        errors.append(invalid(at, count, detail))


def _check_array(
    schema: Mapping[str, Any], value: list[Any], path: Path, errors: list[FieldError]
) -> None:
    most, least = schema.get("maxItems"), schema.get("minItems")
    _check_count(most, least, len(value), noun="items", at=path, errors=errors)
    list_type = schema.get("x-kubernetes-list-type")
    keys = schema.get("x-kubernetes-list-map-keys", [])
    if schema.get("uniqueItems") or list_type in ("set", "map"):
        seen: list[Any] = []
        for i, item in enumerate(value):
            key = (
                [item.get(k) for k in keys]
                if list_type == "map" and isinstance(item, dict)
                else item
            )
            if any(_same(key, other) for other in seen):
                detail = f"Duplicate value: {show(key[0] if list_type == 'map' else key)}"
                errors.append(
                    FieldError(field_path((*path, i)), "FieldValueDuplicate", detail, path)
                )
            seen.append(key)
    if isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _check(schema["items"], item, (*path, i), errors)


def _check_object(
    schema: Mapping[str, Any],
    value: dict[str, Any],
    path: Path,
    errors: list[FieldError],
    skip: frozenset[str] | set[str] = frozenset(),
) -> None:
    for name in schema.get("required", []):
        if name not in value:
            errors.append(
                FieldError(field_path((*path, name)), "FieldValueRequired", "Required value", path)
            )
    most, least = schema.get("maxProperties"), schema.get("minProperties")
    _check_count(most, least, len(value), noun="properties", at=path, errors=errors)
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if (not path and key in KEPT_AT_ROOT and key not in properties) or key in skip:
            continue
        sub = properties.get(key, extra if isinstance(extra, dict) else None)
        if sub is not None:
            _check(sub, item, (*path, key), errors)
