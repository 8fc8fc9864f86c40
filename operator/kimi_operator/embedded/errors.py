"""Kubernetes' errors as the embedded API server answers them: the Status object, kube-apiserver's
wording about one object, optimistic concurrency's 409 Conflict, the Warning headers of a write,
and the answer to any failure of a request (never a traceback)."""

import json
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp.web
import kmock
import multidict

LOG = logging.getLogger(__name__)


def check_version(sent: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """kube-apiserver's optimistic concurrency: a write naming a resourceVersion other than the
    object's is refused with 409 Conflict."""
    version = (sent.get("metadata") or {}).get("resourceVersion")
    if version and version != current["metadata"]["resourceVersion"]:
        name = current["metadata"].get("name")
        message = f"{name}: the object has been modified; apply your changes to the latest"
        raise kmock.KubernetesError(409, "Conflict", message + " version and try again")


def _object_error(
    resource: kmock.resource, name: str, status: int, reason: str, what: str
) -> kmock.KubernetesError:
    """kube-apiserver's error about one object: `<plural>.<group> "<name>" <what>`."""
    group = resource.group or ""
    qualified = f"{resource.plural}.{group}" if group else str(resource.plural)
    details = {"name": name, "group": group, "kind": resource.plural}
    return kmock.KubernetesError(status, reason, f'{qualified} "{name}" {what}', details)


def not_found(resource: kmock.resource, name: str) -> kmock.KubernetesError:
    return _object_error(resource, name, 404, "NotFound", "not found")


def already_exists(resource: kmock.resource, name: str) -> kmock.KubernetesError:
    return _object_error(resource, name, 409, "AlreadyExists", "already exists")


def warned(warnings: list[str]) -> multidict.CIMultiDict[str]:
    """The Warning headers kube-apiserver sends (RFC 7234 code 299) for unknown fields pruned."""
    return multidict.CIMultiDict(("Warning", f"299 - {json.dumps(w)}") for w in warnings)


def status_object(code: int, reason: str, message: str, details: Any) -> dict[str, Any]:
    """Kubernetes' Status object of a failure (an error answer, a watch's ERROR event)."""
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        **({"details": details} if details else {}),
        "code": code,
    }


def status_response(
    code: int, reason: str, message: str, details: Any, headers: Mapping[str, str] | None = None
) -> aiohttp.web.Response:
    """Kubernetes' Status object, as an answer."""
    status = status_object(code, reason, message, details)
    return aiohttp.web.json_response(status, status=code, headers=headers)


def error_response(exc: Exception) -> aiohttp.web.Response:
    """Kubernetes' Status object, without kmock's traceback (formatting it is slow); kmock's own
    404s as kube-apiserver's, any other failure a 500 InternalError whose cause goes to the log,
    never to the client."""
    if isinstance(exc, kmock.KubernetesNotFoundError):
        message = "the server could not find the requested resource"
        return status_response(404, "NotFound", message, {})
    if not isinstance(exc, kmock.KubernetesError):
        LOG.error("request failed", exc_info=exc)
        message = "Internal error occurred: the embedded API server failed to serve this request"
        return status_response(500, "InternalError", message, {})
    retry_after = getattr(exc, "retry_after", None)
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    reason = type(exc).__name__ if exc.reason is None else exc.reason  # "": a webhook's
    return status_response(exc.status, reason, exc.message or repr(exc), exc.details, headers)
