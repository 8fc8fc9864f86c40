"""What a reconcile makes of `spec.routing` (docs/routing.md), beside the children the builders
render: which routing APIs it needs, the RoutingReady condition from what the gateways wrote on
the InferencePool, and the endpoint through the Gateway. Pure."""

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from kimi_operator.api.problem import Problem
from kimi_operator.api.spec import GatewayRef, KimiDeployment
from kimi_operator.k8s.resources import HTTP_ROUTE, INFERENCE_POOL, Resource

Status = Literal["True", "False", "Unknown"]
# Per parent (gateway) of the pool: the conditions a conformant gateway sets, and the reason
# RoutingReady gives when one is not True.
PARENT_CONDITIONS = {"Accepted": "NotAccepted", "ResolvedRefs": "RefsNotResolved"}
DEFAULT_PORTS = {"http": 80, "https": 443}


def routing_apis(kd: KimiDeployment) -> list[Resource]:
    """The upstream APIs the deployment's routing needs."""
    routing = kd.spec.routing
    if routing.mode != "InferencePool":
        return []
    return [INFERENCE_POOL, *([HTTP_ROUTE] if routing.gateway_ref else [])]


def routing_condition(
    kd: KimiDeployment, live: Sequence[Mapping[str, Any]], missing: Sequence[Problem]
) -> tuple[Status, str, str]:
    """RoutingReady: mode Service is; mode InferencePool is once every gateway that routes to
    the pool reports it Accepted with its references resolved."""
    if kd.spec.routing.mode == "Service":
        return "True", "Service", "requests reach the TP groups through the Service"
    if missing:
        return "False", missing[0].reason, "; ".join(p.message for p in missing)
    pool = next((o for o in live if o.get("kind") == INFERENCE_POOL.kind), {})
    parents = (pool.get("status") or {}).get("parents") or []
    if not parents:
        ref = kd.spec.routing.gateway_ref
        where = (
            f"Gateway {_gateway_label(kd, ref)} (spec.routing.gatewayRef)"
            if ref
            else "a Gateway (no spec.routing.gatewayRef: route to the pool yourself)"
        )
        return "Unknown", "NoGatewayYet", f"no gateway reports the InferencePool yet; {where}"
    failing: list[tuple[str, str]] = []
    names = []
    for parent in parents:
        parent_ref = parent.get("parentRef") or {}
        namespace = parent_ref.get("namespace") or kd.metadata.namespace
        name = f"{namespace}/{parent_ref.get('name', '')}"
        names.append(name)
        found = {c.get("type"): c for c in parent.get("conditions") or []}
        for kind, reason in PARENT_CONDITIONS.items():
            condition = found.get(kind, {})
            if condition.get("status") != "True":
                said = condition.get("message") or condition.get("reason") or "not reported"
                failing.append((reason, f"{name}: {kind} is not True ({said})"))
    if failing:
        return "False", failing[0][0], "; ".join(message for _, message in failing)
    return "True", "Accepted", f"routed by {', '.join(names)}: Accepted, references resolved"


def gateway_namespace(kd: KimiDeployment, ref: GatewayRef) -> str:
    return ref.namespace or kd.metadata.namespace


def _gateway_label(kd: KimiDeployment, ref: GatewayRef) -> str:
    return f"{gateway_namespace(kd, ref)}/{ref.name}"


def gateway_endpoint(gateway: Mapping[str, Any] | None, section_name: str) -> str:
    """The OpenAI-compatible API's URL through the Gateway: its first address and the listener
    named `section_name` (or its first); "" until the Gateway has an address."""
    if not gateway:
        return ""
    addresses = (gateway.get("status") or {}).get("addresses") or []
    listeners = (gateway.get("spec") or {}).get("listeners") or []
    listener = next(
        (item for item in listeners if not section_name or item.get("name") == section_name),
        None,
    )
    if not addresses or listener is None:
        return ""
    scheme = "https" if str(listener.get("protocol", "")).upper() == "HTTPS" else "http"
    port = listener.get("port")
    suffix = "" if port in (None, DEFAULT_PORTS[scheme]) else f":{port}"
    return f"{scheme}://{addresses[0].get('value', '')}{suffix}/v1"
