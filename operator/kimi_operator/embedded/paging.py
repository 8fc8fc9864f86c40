"""Lists in pages (`limit` and `continue`), as kube-apiserver serves them: objects in key order
(namespace, name), a continue token naming where the next page starts, `remainingItemCount`.
Unlike etcd, the embedded server keeps no snapshot: a later page shows the objects as they are
when it is asked for (one created meanwhile after the token's key is listed, one deleted is not).
"""

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any

import kmock


def _key(obj: Mapping[str, Any]) -> list[str]:
    meta = obj.get("metadata") or {}
    return [meta.get("namespace") or "", meta.get("name") or ""]


def _token(version: str, start: list[str]) -> str:
    raw = json.dumps({"rv": version, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _start(token: str) -> list[str]:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        start = decoded["start"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise kmock.KubernetesError(400, "BadRequest", "continue key is not valid") from None
    if not (isinstance(start, list) and len(start) == 2):
        raise kmock.KubernetesError(400, "BadRequest", "continue key is not valid")
    return [str(part) for part in start]


def page(items: Sequence[Mapping[str, Any]], query: Mapping[str, str], version: str) -> Any:
    """The list answer for `query`'s `limit` (0 or none: all) and `continue`."""
    limit_text = query.get("limit") or "0"
    if not limit_text.isdigit():
        message = f"limit: Invalid value: {limit_text!r}: must be a non-negative integer"
        raise kmock.KubernetesError(400, "BadRequest", message)
    ordered = sorted(items, key=_key)
    token = query.get("continue")
    if token:
        start = _start(token)
        ordered = [obj for obj in ordered if _key(obj) > start]
    limit = int(limit_text)
    metadata: dict[str, Any] = {"resourceVersion": version}
    if limit and len(ordered) > limit:
        metadata["continue"] = _token(version, _key(ordered[limit - 1]))
        metadata["remainingItemCount"] = len(ordered) - limit
        ordered = ordered[:limit]
    return {"metadata": metadata, "items": list(ordered)}
