"""Building KimiDeployment documents for tests: a valid base and path-based edits."""

import copy
from typing import Any

DELETE = object()


def base() -> dict[str, Any]:
    return {
        "apiVersion": "kimi-operator.io/v1alpha1",
        "kind": "KimiDeployment",
        "metadata": {"name": "k3", "namespace": "inference"},
        "spec": {
            "model": {"name": "moonshotai/Kimi-K3", "source": {"pvc": {"claimName": "weights"}}},
            "gpus": 16,
        },
    }


def edited(changes: dict[str, Any], doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """`base()` (or `doc`) with `{"spec.decode.maxNumSeqs": 4, "spec.image": DELETE}` applied."""
    out = copy.deepcopy(doc if doc is not None else base())
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return out
