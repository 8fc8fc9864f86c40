"""The scale subresource of a custom resource as kube-apiserver serves it: an autoscaling/v1 Scale
read from, and written to, the paths the CRD names (`specReplicasPath`, `statusReplicasPath`,
`labelSelectorPath`)."""

import copy
from collections.abc import Mapping
from typing import Any

import kmock


def _get_path(obj: Mapping[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.strip(".").split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.strip(".").split(".")
    for part in parents:
        obj = obj.setdefault(part, {})
    obj[last] = value


def scale_of(obj: Mapping[str, Any], paths: Mapping[str, str]) -> dict[str, Any]:
    """The autoscaling/v1 Scale of a custom resource (kube-apiserver's scale subresource)."""
    meta = obj["metadata"]
    status: dict[str, Any] = {"replicas": _get_path(obj, paths["statusReplicasPath"]) or 0}
    selector = (
        _get_path(obj, paths.get("labelSelectorPath", "")) if "labelSelectorPath" in paths else None
    )
    if selector:
        status["selector"] = selector
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in meta
        },
        "spec": {"replicas": _get_path(obj, paths["specReplicasPath"]) or 0},
        "status": status,
    }


def replicas_of(wanted: Mapping[str, Any]) -> int:
    """The replicas a Scale written asks for; 422 Invalid when it is not a whole number >= 0."""
    replicas = (wanted.get("spec") or {}).get("replicas")
    if type(replicas) is not int or replicas < 0:
        message = f"spec.replicas: Invalid value: {replicas!r}: must be an integer >= 0"
        raise kmock.KubernetesError(422, "Invalid", message)
    return replicas


def scaled(obj: Mapping[str, Any], paths: Mapping[str, str], replicas: int) -> dict[str, Any]:
    """`obj` with `replicas` at the CRD's specReplicasPath."""
    new = copy.deepcopy(dict(obj))
    _set_path(new, paths["specReplicasPath"], replicas)
    return new
