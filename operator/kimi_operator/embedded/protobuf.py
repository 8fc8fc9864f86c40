"""The Kubernetes protobuf bodies kubectl's and helm's typed clients send (`kubectl create
namespace` and helm's release Secrets are posted as `application/vnd.kubernetes.protobuf`),
decoded for those kinds: Namespace, Secret, DeleteOptions and the policy/v1 Eviction `kubectl
drain` posts. Any other kind is refused with
kube-apiserver's 415, as an API server that does not know the kind's protobuf would. Answers are
JSON, which those clients accept too.

The wire format: `k8s\\x00`, then a runtime.Unknown (1: TypeMeta{1: apiVersion, 2: kind},
2: raw, the object's own message); a Namespace is {1: ObjectMeta, 2: NamespaceSpec{1: finalizers}}.
"""

import base64
from collections.abc import Callable, Iterator
from typing import Any

MAGIC = b"k8s\x00"
# ObjectMeta's string fields, maps and lists, by field number.
META_STRINGS = {1: "name", 2: "generateName", 3: "namespace"}
META_MAPS = {11: "labels", 12: "annotations"}
META_LISTS = {14: "finalizers"}


class Unsupported(ValueError):
    """A protobuf body of a kind not decoded here."""


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field of a message: varints as ints, the rest as bytes."""
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, position = _varint(data, position)
            yield number, value
        elif wire == 2:
            length, position = _varint(data, position)
            yield number, data[position : position + length]
            position += length
        elif wire in {1, 5}:
            size = 8 if wire == 1 else 4
            yield number, data[position : position + size]
            position += size
        else:
            raise Unsupported(f"protobuf wire type {wire} is not decoded")


def _text(value: int | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _metadata(data: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for number, value in _fields(data):
        if number in META_STRINGS and _text(value):  # proto2 sends unset strings as ""
            meta[META_STRINGS[number]] = _text(value)
        elif number in META_MAPS and isinstance(value, bytes):
            entry = dict(_fields(value))
            meta.setdefault(META_MAPS[number], {})[_text(entry[1])] = _text(entry.get(2, b""))
        elif number in META_LISTS:
            meta.setdefault(META_LISTS[number], []).append(_text(value))
    return meta


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object; `Unsupported` for a kind not decoded here."""
    if not body.startswith(MAGIC):
        raise Unsupported("not a Kubernetes protobuf body (no k8s\\x00 prefix)")
    unknown = dict(_fields(body[len(MAGIC) :]))
    type_meta = unknown.get(1, b"")
    raw = unknown.get(2, b"")
    assert isinstance(type_meta, bytes)
    assert isinstance(raw, bytes)
    names = {number: _text(value) for number, value in _fields(type_meta)}
    api_version, kind = names.get(1, ""), names.get(2, "")
    if kind not in DECODERS or api_version not in {"v1", "meta.k8s.io/v1", "policy/v1"}:
        raise Unsupported(f"protobuf bodies of {api_version} {kind} are not decoded")
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind}
    for number, value in _fields(raw):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = _metadata(value)
        else:
            DECODERS[kind](obj, number, value)
    return obj


def _namespace_field(obj: dict[str, Any], number: int, value: int | bytes) -> None:
    if number == 2 and isinstance(value, bytes):
        finalizers = [_text(v) for n, v in _fields(value) if n == 1]
        obj["spec"] = {"finalizers": finalizers} if finalizers else {}


def _secret_field(obj: dict[str, Any], number: int, value: int | bytes) -> None:
    """Secret: 2 data (map to bytes, base64 in JSON), 3 type, 4 stringData, 5 immutable."""
    if number in {2, 4} and isinstance(value, bytes):
        entry = dict(_fields(value))
        raw = entry.get(2, b"")
        assert isinstance(raw, bytes)
        text = base64.b64encode(raw).decode() if number == 2 else raw.decode()
        obj.setdefault("data" if number == 2 else "stringData", {})[_text(entry[1])] = text
    elif number == 3:
        obj["type"] = _text(value)
    elif number == 5:
        obj["immutable"] = bool(value)


def _delete_options_field(obj: dict[str, Any], number: int, value: int | bytes) -> None:
    """DeleteOptions: 1 gracePeriodSeconds, 2 preconditions {1 uid, 2 resourceVersion},
    4 propagationPolicy, 5 dryRun."""
    if number == 1 and isinstance(value, int):
        obj["gracePeriodSeconds"] = value
    elif number == 2 and isinstance(value, bytes):
        names = {1: "uid", 2: "resourceVersion"}
        obj["preconditions"] = {names[n]: _text(v) for n, v in _fields(value) if n in names}
    elif number == 4:
        obj["propagationPolicy"] = _text(value)
    elif number == 5:
        obj.setdefault("dryRun", []).append(_text(value))


def _eviction_field(obj: dict[str, Any], number: int, value: int | bytes) -> None:
    """Eviction: 2 deleteOptions."""
    if number == 2 and isinstance(value, bytes):
        options: dict[str, Any] = {}
        for field, inner in _fields(value):
            _delete_options_field(options, field, inner)
        obj["deleteOptions"] = options


DECODERS: dict[str, Callable[[dict[str, Any], int, int | bytes], None]] = {
    "Namespace": _namespace_field,
    "Secret": _secret_field,
    "DeleteOptions": _delete_options_field,
    "Eviction": _eviction_field,
}
