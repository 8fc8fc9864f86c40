"""Events on a KimiDeployment, as `kubectl describe` shows them: Warnings (a problem) and Normal
ones (a step worth a line there: a group's drain started or ended)."""

import datetime
import uuid
from collections.abc import Mapping
from typing import Any, Literal

from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import EVENT

COMPONENT = "kimi-operator"
MAX_MESSAGE = 1024


def warning(
    involved: Mapping[str, Any],
    reason: str,
    message: str,
    kind: Literal["Warning", "Normal"] = "Warning",
) -> dict[str, Any]:
    meta = involved["metadata"]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
            "namespace": meta["namespace"],
        },
        "involvedObject": {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "type": kind,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def post_warning(
    client: Client,
    involved: Mapping[str, Any],
    reason: str,
    message: str,
    kind: Literal["Warning", "Normal"] = "Warning",
) -> None:
    client.create(EVENT, warning(involved, reason, message, kind))
