"""JSON merge patches (RFC 7386) and JSON patches (RFC 6902) as the embedded API server applies
them to stored objects, and the merge patch between two versions of an object."""

from collections.abc import Mapping
from typing import Any

import jsonpatch
import kmock


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


def patched(current: Mapping[str, Any], change: Any) -> dict[str, Any]:
    """`current` with a JSON patch (a list) or a merge patch applied; 422 when it does not apply."""
    try:
        if isinstance(change, list):
            return dict(jsonpatch.apply_patch(dict(current), change, in_place=False))
        return dict(merge_patch(current, change or {}))
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, ValueError) as error:
        raise kmock.KubernetesError(status=422, reason="Invalid", message=str(error)) from None
