"""Writes operator/kimi_operator/embedded/builtin_openapi.json: the OpenAPI definitions of the
built-in kinds the embedded API server serves, taken from kubernetes-validate's copy of
Kubernetes' own schemas (Apache-2.0) for the release the server answers as, with everything they
refer to. JSON Schema's `"type": [t, "null"]` becomes OpenAPI's `"type": t` and `$defs`
references become `#/definitions/` ones; the `x-kubernetes-*` extensions (list types, merge keys,
group-version-kinds) stay as they are.

`python -m tests.support.builtin_openapi` rewrites the file; tests/clients/test_openapi.py checks
that it is what this makes.
"""

import json
from importlib import resources
from typing import Any

from kimi_operator.embedded import discovery, openapi

# Every built-in kind the server serves, and the meta kinds its answers are.
ROOTS = (
    "io.k8s.api.core.v1.Namespace",
    "io.k8s.api.core.v1.Service",
    "io.k8s.api.core.v1.ServiceAccount",
    "io.k8s.api.core.v1.Secret",
    "io.k8s.api.core.v1.ConfigMap",
    "io.k8s.api.core.v1.Event",
    "io.k8s.api.core.v1.Pod",
    "io.k8s.api.core.v1.Node",
    "io.k8s.api.core.v1.PersistentVolumeClaim",
    "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.batch.v1.Job",
    "io.k8s.api.batch.v1.CronJob",
    "io.k8s.api.autoscaling.v1.Scale",
    "io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler",
    "io.k8s.api.policy.v1.PodDisruptionBudget",
    "io.k8s.api.policy.v1.Eviction",
    "io.k8s.api.events.v1.Event",
    "io.k8s.api.coordination.v1.Lease",
    "io.k8s.api.rbac.v1.ClusterRole",
    "io.k8s.api.rbac.v1.ClusterRoleBinding",
    "io.k8s.api.rbac.v1.Role",
    "io.k8s.api.rbac.v1.RoleBinding",
    "io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta",
)


def _converted(node: Any) -> Any:
    if isinstance(node, list):
        return [_converted(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _converted(value) for key, value in node.items()}
    kind = out.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) == 1:
            out["type"] = kinds[0]
        else:
            out.pop("type")
    ref = out.get("$ref")
    if isinstance(ref, str):
        out["$ref"] = ref.replace("#/$defs/", "#/definitions/")
    return out


def definitions() -> dict[str, Any]:
    """The converted definitions of ROOTS and everything they refer to."""
    folder = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    source = folder / f"{discovery.GIT_VERSION}-local" / "_definitions.json"
    every = json.loads(source.read_text())["$defs"]
    return openapi.closure({name: _converted(d) for name, d in every.items()}, ROOTS)


def main() -> None:
    openapi.BUILT_IN_FILE.write_text(json.dumps(definitions(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
