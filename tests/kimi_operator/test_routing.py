"""What a reconcile makes of spec.routing beside the children: RoutingReady from the gateways'
conditions on the pool, the endpoint through the Gateway, and the apply of the endpoint
picker's kinds without a `spec` (ConfigMap, Role, RoleBinding, ServiceAccount)."""

from typing import Any

import pytest

from kimi_operator.api.problem import Problem
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.k8s.merge import drift_patch, with_owner
from kimi_operator.routing import gateway_endpoint, routing_condition
from tests.kimi_operator.builders.cases import _edited, deployment

OWNER = {
    "apiVersion": "kimi-operator.io/v1alpha1",
    "kind": "KimiDeployment",
    "metadata": {"name": "k3-routed", "uid": "u1"},
}


def _routed(**routing: Any) -> KimiDeployment:
    return deployment(_edited("k3-tp16-routed.yaml", routing={"mode": "InferencePool"} | routing))


def _pool(*parents: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "kind": "InferencePool",
        "status": {
            "parents": [
                {
                    "parentRef": {"name": f"gw{i}"},
                    "conditions": [
                        {"type": kind, "status": status, "message": f"{kind} said {status}"}
                        for kind, status in conditions
                    ],
                }
                for i, conditions in enumerate(parents)
            ]
        },
    }


ACCEPTED = [("Accepted", "True"), ("ResolvedRefs", "True")]


def test_routing_ready_follows_the_gateways() -> None:
    kd = _routed(gatewayRef={"name": "gw0"})
    assert routing_condition(kd, [_pool(ACCEPTED, ACCEPTED)], []) == (
        "True",
        "Accepted",
        "routed by inference/gw0, inference/gw1: Accepted, references resolved",
    )
    unknown = routing_condition(kd, [], [])
    assert unknown[:2] == ("Unknown", "NoGatewayYet")
    assert "Gateway inference/gw0 (spec.routing.gatewayRef)" in unknown[2]
    refused = routing_condition(kd, [_pool(ACCEPTED, [("Accepted", "False")])], [])
    assert refused == (
        "False",
        "NotAccepted",
        "inference/gw1: Accepted is not True (Accepted said False); "
        "inference/gw1: ResolvedRefs is not True (not reported)",
    )
    missing = Problem("InferencePoolNotInstalled", "install it")
    assert routing_condition(kd, [], [missing]) == ("False", missing.reason, "install it")
    plain = deployment(_edited("k3-tp16-routed.yaml", routing={"mode": "Service"}))
    assert routing_condition(plain, [_pool([("Accepted", "False")])], [])[:2] == (
        "True",
        "Service",
    )


def _gateway(listeners: list[dict[str, Any]], address: str = "10.0.0.9") -> dict[str, Any]:
    status = {"addresses": [{"value": address}]} if address else {}
    return {"spec": {"listeners": listeners}, "status": status}


@pytest.mark.parametrize(
    ("listeners", "section", "url"),
    [
        ([{"name": "web", "port": 80, "protocol": "HTTP"}], "", "http://10.0.0.9/v1"),
        ([{"name": "tls", "port": 443, "protocol": "HTTPS"}], "", "https://10.0.0.9/v1"),
        (
            [
                {"name": "web", "port": 80, "protocol": "HTTP"},
                {"name": "alt", "port": 8443, "protocol": "HTTPS"},
            ],
            "alt",
            "https://10.0.0.9:8443/v1",
        ),
        ([{"name": "web", "port": 80, "protocol": "HTTP"}], "missing", ""),
    ],
)
def test_endpoint_through_the_gateway(
    listeners: list[dict[str, Any]], section: str, url: str
) -> None:
    assert gateway_endpoint(_gateway(listeners), section) == url


def test_no_endpoint_before_the_gateway_has_an_address() -> None:
    assert gateway_endpoint(None, "") == ""
    assert gateway_endpoint(_gateway([{"name": "w", "port": 80}], address=""), "") == ""


def _child(kind: str) -> dict[str, Any]:
    kd = _routed(gatewayRef={"name": "gw0"})
    (found,) = [c for c in build_children(kd, OperatorDefaults()) if c["kind"] == kind]
    return with_owner(found, OWNER)


@pytest.mark.parametrize("kind", ["ConfigMap", "Role", "RoleBinding", "ServiceAccount"])
def test_kinds_without_a_spec_apply_like_the_others(kind: str) -> None:
    desired = _child(kind)
    live = {**desired, "metadata": {**desired["metadata"], "resourceVersion": "7"}}
    assert drift_patch(live, desired) is None  # as applied: nothing to write
    if kind == "ServiceAccount":
        return
    field = {"ConfigMap": "data", "Role": "rules", "RoleBinding": "subjects"}[kind]
    edited = {**live, field: {"edited": "by hand"} if kind == "ConfigMap" else []}
    patch = drift_patch(edited, desired)
    assert patch is not None
    # As kubectl apply: what the operator sets is put back, a key added by hand is left.
    assert patch[field] == desired[field]
    assert "spec" not in patch
