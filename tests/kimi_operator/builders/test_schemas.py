"""Every child of every case is valid for the API server that will receive it: the upstream CRDs
(LeaderWorkerSet, ComputeDomain, PodMonitor, InferencePool, HTTPRoute) as the embedded API
server admits them (structural schema, CEL rules) with unknown fields refused, built-in kinds by
`kubernetes-validate`'s schemas (the weights caches' Jobs and claims, the endpoint picker's
objects included)."""

from typing import Any

import kubernetes_validate
import pytest
import yaml

from kimi_operator.builders import build_caches, build_children, preview_weights
from kimi_operator.embedded.admission import CustomResource
from kimi_operator.embedded.upstream import CHILD_KINDS, ROUTING_KINDS, upstream_crd
from tests.kimi_operator.builders.cases import CASES, deployment

BUILT_IN = {
    "Service",
    "PodDisruptionBudget",
    "Job",
    "PersistentVolumeClaim",
    # The endpoint picker's (spec.routing.mode InferencePool).
    "Deployment",
    "ConfigMap",
    "ServiceAccount",
    "Role",
    "RoleBinding",
}
KUBERNETES_VERSION = "1.34"


CUSTOM: dict[tuple[str, str], CustomResource] = {}


def crd_errors(child: dict[str, Any]) -> list[str]:
    key = (child["kind"], child["apiVersion"])
    if key not in CUSTOM:
        CUSTOM[key] = CustomResource.of(upstream_crd(child["kind"]), child["apiVersion"])
    return CUSTOM[key].refusals(child)


def children() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for case, (doc, defaults) in sorted(CASES.items()):
        kd = deployment(doc)
        # With the weights caches, and the resolve Jobs a deployment starts with.
        resolving = [c for c in build_children(kd, defaults, weights={}) if c["kind"] == "Job"]
        caches = build_caches(kd, defaults, preview_weights(kd))
        for child in build_children(kd, defaults) + caches + resolving:
            out.append((f"{case}:{child['kind']}/{child['metadata']['name']}", child))
    return out


ALL = children()


def test_every_kind_is_covered() -> None:
    assert {child["kind"] for _, child in ALL} == set(CHILD_KINDS) | set(ROUTING_KINDS) | BUILT_IN


@pytest.mark.parametrize(("label", "child"), ALL, ids=[label for label, _ in ALL])
def test_child_is_valid(label: str, child: dict[str, Any]) -> None:
    if child["kind"] in BUILT_IN:
        kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)
    else:
        assert crd_errors(child) == [], label


def test_a_wrong_child_is_refused() -> None:
    """The checks can fail: a misspelt field and a wrong type are both caught."""
    label, lws = next((lbl, c) for lbl, c in ALL if c["kind"] == "LeaderWorkerSet")
    misspelt = yaml.safe_load(yaml.safe_dump(lws))
    misspelt["spec"]["leaderWorkerTemplate"]["sizee"] = 2
    assert crd_errors(misspelt) == [
        'LeaderWorkerSet in version "v1" cannot be handled as a LeaderWorkerSet: strict decoding '
        'error: unknown field "spec.leaderWorkerTemplate.sizee"'
    ], label
    mistyped = yaml.safe_load(yaml.safe_dump(lws))
    mistyped["spec"]["replicas"] = "one"
    assert crd_errors(mistyped) == [
        'spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: '
        '"string"'
    ], label
    service = next(c for _, c in ALL if c["kind"] == "Service")
    bad_service = {**service, "spec": {**service["spec"], "ports": [{"port": "http"}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad_service, KUBERNETES_VERSION, strict=True)


TEMPLATES = [
    (f"{label}:{role}", child["spec"]["leaderWorkerTemplate"][role])
    for label, child in ALL
    if child["kind"] == "LeaderWorkerSet"
    for role in ("leaderTemplate", "workerTemplate")
]


def pod_template(template: dict[str, Any]) -> dict[str, Any]:
    """A pod template as the built-in PodTemplate kind, so that Kubernetes' own Pod schema (not
    only the LeaderWorkerSet CRD's copy of it) checks resources, affinity, pull secrets, shm."""
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "t"},
        "template": template,
    }


@pytest.mark.parametrize("template", [t for _, t in TEMPLATES], ids=[lbl for lbl, _ in TEMPLATES])
def test_pod_templates_are_valid_kubernetes_pods(template: dict[str, Any]) -> None:
    kubernetes_validate.validate(pod_template(template), KUBERNETES_VERSION, strict=True)


def test_a_wrong_pod_template_is_refused() -> None:
    _, template = TEMPLATES[0]
    broken = yaml.safe_load(yaml.safe_dump(template))
    broken["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
        "topologyKeys"
    ] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod_template(broken), KUBERNETES_VERSION, strict=True)
