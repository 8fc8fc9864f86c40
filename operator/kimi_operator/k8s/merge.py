"""What an apply compares and writes, as data: whether a child drifted from what the operator
wants and the merge patch that fixes it (judged like `kubectl apply`), owner references, the
applied-spec annotation, and writes decided ahead. Pure: no client, no I/O (k8s/apply.py sends).
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kimi_operator.k8s.resources import Resource

APPLIED_ANNOTATION = "kimi-operator.io/applied-spec"
NOT_SET_BY_US = ("apiVersion", "kind", "metadata", "status")


def _set_fields(obj: Mapping[str, Any], like: Mapping[str, Any]) -> Any:
    """What the operator sets beside metadata, in `obj` shaped as in `like`: the `spec`, or for
    kinds without one (ConfigMap, Role, RoleBinding, ServiceAccount) the other top-level fields."""
    if "spec" in like:
        return obj.get("spec")
    return {key: value for key, value in obj.items() if key not in NOT_SET_BY_US}


def owner_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_by(obj: Mapping[str, Any], owner_uid: str) -> bool:
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner_uid and ref.get("controller") for ref in refs)


def covers(actual: Any, desired: Any) -> bool:
    """Whether `actual` has every value `desired` sets (lists item by item, same length)."""
    if isinstance(desired, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and covers(actual[key], value) for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(desired)
            and all(covers(a, d) for a, d in zip(actual, desired, strict=True))
        )
    return bool(actual == desired)


def removals(previous: Any, desired: Any) -> Any:
    """`desired` as a merge patch that also deletes (null) the keys `previous` had and it lacks."""
    if not (isinstance(previous, Mapping) and isinstance(desired, Mapping)):
        return desired
    patch: dict[str, Any] = {key: None for key in previous if key not in desired}
    for key, value in desired.items():
        patch[key] = removals(previous.get(key), value)
    return patch


def with_owner(child: Mapping[str, Any], owner: Mapping[str, Any]) -> dict[str, Any]:
    """The child as the operator writes it: owned by `owner`, remembering what was applied."""
    applied = json.dumps(_set_fields(child, child), sort_keys=True, separators=(",", ":"))
    metadata = {
        **child["metadata"],
        "annotations": {**child["metadata"].get("annotations", {}), APPLIED_ANNOTATION: applied},
        "ownerReferences": [owner_reference(owner)],
    }
    return {**child, "metadata": metadata}


def drift_patch(actual: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch that makes `actual` match `desired`; None when it already does."""
    meta, actual_meta = desired["metadata"], actual.get("metadata", {})
    same_meta = (
        covers(actual_meta.get("labels", {}), meta.get("labels", {}))
        and covers(actual_meta.get("annotations", {}), meta.get("annotations", {}))
        and covers(actual_meta.get("ownerReferences", []), meta["ownerReferences"])
    )
    wanted = _set_fields(desired, desired)
    same_spec = covers(_set_fields(actual, desired), wanted) and actual_meta.get(
        "annotations", {}
    ).get(APPLIED_ANNOTATION) == meta["annotations"].get(APPLIED_ANNOTATION)
    if same_meta and same_spec:
        return None
    patch: dict[str, Any] = {
        "metadata": {
            "labels": meta.get("labels", {}),
            "annotations": meta.get("annotations", {}),
            "ownerReferences": meta["ownerReferences"],
        }
    }
    if not same_spec:  # never otherwise: some specs are immutable (ComputeDomain)
        try:
            previous = json.loads(actual_meta.get("annotations", {}).get(APPLIED_ANNOTATION, "{}"))
        except ValueError:
            previous = {}
        fix = removals(previous, wanted)
        patch |= {"spec": fix} if "spec" in desired else fix
    return patch


def adoptable(actual: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether `actual` is this child with its ownerReference removed by hand: nothing controls
    it, and it carries the operator's labels for the same deployment. Adopted (the patch puts
    the reference back), as Kubernetes' own controllers adopt their orphans."""
    meta = actual.get("metadata", {})
    if any(ref.get("controller") for ref in meta.get("ownerReferences") or []):
        return False
    have, want = meta.get("labels") or {}, desired["metadata"].get("labels") or {}
    keys = ("app.kubernetes.io/managed-by", "app.kubernetes.io/instance")
    return all(key in want and have.get(key) == want[key] for key in keys)


@dataclass
class Applied:
    """What an apply found and did: the children as they are now in the cluster."""

    live: list[dict[str, Any]] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    patched: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def preconditions(obj: Mapping[str, Any]) -> dict[str, str]:
    """DeleteOptions.preconditions naming `obj` as it was read: the delete is refused (409) if
    the object was deleted and made again (its uid) or written since (its resourceVersion)."""
    meta = obj["metadata"]
    return {"uid": str(meta["uid"]), "resourceVersion": str(meta["resourceVersion"])}


@dataclass(frozen=True)
class Write:
    """One write decided ahead, as data: create `body`, merge-patch `body` into, or delete, the
    object `name` of `resource` (the shared weights caches, which are not applied as children).
    A patch decided from a read carries its resourceVersion in `body`; a delete, the
    `preconditions` of the object read (docs/architecture.md, "Write rules"). `exists_ok`: a
    create of a shared object nobody owns, done when one of that name is already there (another
    deployment of the namespace created it since this one's read)."""

    verb: Literal["create", "patch", "delete"]
    resource: Resource
    namespace: str
    name: str
    body: Mapping[str, Any] | None = None
    precondition: Mapping[str, str] | None = None
    exists_ok: bool = False

    @classmethod
    def delete(cls, resource: Resource, obj: Mapping[str, Any]) -> "Write":
        """Delete `obj` as it was read, and nothing made or written since."""
        meta = obj["metadata"]
        return cls("delete", resource, meta["namespace"], meta["name"], None, preconditions(obj))
