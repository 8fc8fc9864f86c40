"""spec.routing.mode InferencePool against the embedded API server, as the chart's ServiceAccount:
the pool, the endpoint picker and the route are created (each admitted by its vendored CRD or
built-in kind), follow a scale-up without a write, report the gateways' verdict and address,
are pruned when the mode goes back to Service and garbage-collected with the deployment; without
the routing CRDs the Service alone serves, Degraded saying what to install."""

from collections.abc import Iterator
from typing import Any

import pytest

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.kubelet import mark_ready
from kimi_operator.embedded.upstream import CHILD_KINDS, ROUTING_KINDS
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import (
    CONFIG_MAP,
    DEPLOYMENT,
    HTTP_ROUTE,
    INFERENCE_POOL,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    ROLE,
    ROLE_BINDING,
    SERVICE,
    SERVICE_ACCOUNT,
    Resource,
)
from kimi_operator.runner import OperatorThread, RunConfig
from tests.integration.conftest import RESYNC_S, UPSTREAM_CRDS
from tests.support.cluster import NS, condition, create, reconciled, sample, status_of, wait_for

NAME = "k3-routed"
GATEWAY = "inference-gateway"
ROUTED = {"mode": "InferencePool", "gatewayRef": {"name": GATEWAY}}
ROUTING = (INFERENCE_POOL, HTTP_ROUTE, DEPLOYMENT, CONFIG_MAP, SERVICE_ACCOUNT, ROLE, ROLE_BINDING)
WITH_ROUTING = [*CHILD_KINDS, *ROUTING_KINDS, "Gateway"]

pytestmark = pytest.mark.usefixtures("operator")


@pytest.fixture
def operator(api: EmbeddedApiServer, token: str) -> Iterator[OperatorThread]:
    """The conftest's, looking the routing APIs up again within a resync (a CRD installed
    later is noticed at once)."""
    config = RunConfig(
        server=api.url, token=token, resync_interval_s=RESYNC_S, workers=4, discovery_ttl_s=0.3
    )
    with OperatorThread(config) as op:
        yield op


def _routed(replicas: int = 2) -> dict[str, Any]:
    doc = sample()
    doc["metadata"]["name"] = NAME
    doc["spec"] |= {"replicas": replicas, "routing": ROUTED}
    return doc


def _owned(client: Client, resource: Resource) -> list[dict[str, Any]]:
    if not client.served(resource):
        return []
    return [
        obj
        for obj in client.list(resource, NS)
        if obj["metadata"].get("labels", {}).get("app.kubernetes.io/instance") == NAME
    ]


def _edit(client: Client, spec: dict[str, Any], generation: int) -> dict[str, Any]:
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": spec})
    found: dict[str, Any] = wait_for(
        lambda: reconciled(client, generation, NAME), what=f"generation {generation}"
    )
    return found


@pytest.mark.parametrize("installed", [WITH_ROUTING], indirect=True)
def test_create_scale_switch_and_delete(client: Client, api: EmbeddedApiServer) -> None:
    status = create(client, _routed())
    for resource in ROUTING:
        assert len(_owned(client, resource)) == 1, resource.kind
    (pool,) = _owned(client, INFERENCE_POOL)
    assert pool["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "kimi-k3",
        "app.kubernetes.io/instance": NAME,
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
        "kimi-operator.io/routable": "true",  # a group leaving is unlabelled first (drain.py)
    }
    assert {s["metadata"]["name"] for s in _owned(client, SERVICE)} == {NAME, f"{NAME}-epp"}
    routing = condition(status, "RoutingReady")
    assert (routing["status"], routing["reason"]) == ("Unknown", "NoGatewayYet")

    # Scaled up: a third group, whose leader the pool's selector already takes; the pool, the
    # endpoint picker and the route are not written again.
    before = _versions(client)
    _edit(client, {"replicas": 3}, 2)
    assert len(_owned(client, LEADER_WORKER_SET)) == 3
    assert _versions(client) == before

    # What a conformant gateway writes on the pool and the Gateway: Accepted, refs resolved,
    # an address.
    parent = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": GATEWAY}
    pool_status: dict[str, list[dict[str, Any]]] = {
        "parents": [
            {
                "parentRef": parent | {"namespace": NS},
                "conditions": [
                    _condition("Accepted", "True", "Accepted"),
                    _condition("ResolvedRefs", "True", "ResolvedRefs"),
                ],
            }
        ]
    }
    client.patch(INFERENCE_POOL, NS, NAME, {"status": pool_status}, subresource="status")
    api.store([_gateway()])
    mark_ready(client, NS)  # the endpoint is given once a group serves

    def routed() -> dict[str, Any] | None:
        found = status_of(client, NS, NAME)
        ready = condition(found, "RoutingReady")["status"] == "True"
        return found if ready and found.get("endpoint", "").startswith("http://203.") else None

    status = wait_for(routed, what="RoutingReady and the gateway's address")
    assert status["endpoint"] == "http://203.0.113.7:8080/v1"
    assert condition(status, "RoutingReady")["reason"] == "Accepted"

    # The gateway refuses the pool's references: RoutingReady says which and why.
    pool_status["parents"][0]["conditions"][1] = _condition(
        "ResolvedRefs", "False", "InvalidExtensionRef", "no endpoint picker Service"
    )
    client.patch(INFERENCE_POOL, NS, NAME, {"status": pool_status}, subresource="status")

    def refused() -> dict[str, Any] | None:
        found = condition(status_of(client, NS, NAME), "RoutingReady")
        return found if found["status"] == "False" else None

    refusal = wait_for(refused, what="RoutingReady False")
    assert refusal["reason"] == "RefsNotResolved"
    assert (
        f"{NS}/{GATEWAY}: ResolvedRefs is not True (no endpoint picker Service)"
        in (refusal["message"])
    )

    # Back to mode Service: the pool, the endpoint picker and the route are pruned; the
    # deployment's Service stays.
    status = _edit(client, {"routing": {"mode": "Service", "gatewayRef": None}}, 3)
    for resource in ROUTING:
        assert _owned(client, resource) == [], resource.kind
    assert [s["metadata"]["name"] for s in _owned(client, SERVICE)] == [NAME]
    assert status["endpoint"] in ("", f"http://{NAME}.{NS}.svc:8000/v1")
    assert condition(status, "RoutingReady")["reason"] == "Service"

    # Routed again, then deleted: everything goes with it.
    _edit(client, {"routing": ROUTED}, 4)
    assert all(_owned(client, r) for r in ROUTING)
    client.delete(KIMI_DEPLOYMENT, NS, NAME)
    wait_for(
        lambda: not any(_owned(client, r) for r in (*ROUTING, SERVICE, LEADER_WORKER_SET)),
        what="children garbage-collected",
    )


def test_without_the_routing_crds_the_service_serves(client: Client) -> None:
    """The default CRDs only: no pool, no endpoint picker; Degraded names what to install."""
    status = create(client, _routed())
    for resource in ROUTING:
        assert _owned(client, resource) == [], resource.kind
    assert [s["metadata"]["name"] for s in _owned(client, SERVICE)] == [NAME]
    degraded = condition(status, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "InferencePoolNotInstalled")
    assert "gateway-api-inference-extension/releases/download/v1.5.0" in degraded["message"]
    assert "the Service keeps serving" in degraded["message"]
    assert "gateway-api/releases/download/v1.5.1/standard-install.yaml" in degraded["message"]
    routing = condition(status, "RoutingReady")
    assert (routing["status"], routing["reason"]) == ("False", "InferencePoolNotInstalled")


@pytest.mark.parametrize("installed", [[*CHILD_KINDS, "InferencePool"]], indirect=True)
def test_without_the_httproute_crd_the_pool_is_made_and_degraded_says_so(
    client: Client, api: EmbeddedApiServer
) -> None:
    status = create(client, _routed())
    assert len(_owned(client, INFERENCE_POOL)) == 1
    assert len(_owned(client, DEPLOYMENT)) == 1
    degraded = condition(status, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "HTTPRouteNotInstalled")
    # Installed later: the route follows (the API is looked up again on the next reconcile).
    api.install_crds([UPSTREAM_CRDS["HTTPRoute"]])
    wait_for(lambda: _owned(client, HTTP_ROUTE), timeout=20.0, what="the HTTPRoute")

    def healed() -> bool:
        found = condition(status_of(client, NS, NAME), "Degraded")
        return bool(found["status"] == "False")

    wait_for(healed, timeout=20.0, what="Degraded False")


def _versions(client: Client) -> dict[str, str]:
    return {r.kind: _owned(client, r)[0]["metadata"]["resourceVersion"] for r in ROUTING}


def _condition(kind: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message or reason,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": 1,
    }


def _gateway() -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": GATEWAY, "namespace": NS},
        "spec": {
            "gatewayClassName": "istio",
            "listeners": [{"name": "http", "port": 8080, "protocol": "HTTP"}],
        },
        "status": {"addresses": [{"type": "IPAddress", "value": "203.0.113.7"}]},
    }


@pytest.mark.parametrize("installed", [WITH_ROUTING], indirect=True)
def test_a_deployment_never_routed_lists_no_routing_kind(
    client: Client, api: EmbeddedApiServer
) -> None:
    """Pruning lists every child kind at each resync: the seven routing kinds only for a
    deployment that has (or had) a pool."""
    doc = _routed()
    doc["spec"]["routing"] = {"mode": "Service"}
    create(client, doc)

    # Only a prune lists PodDisruptionBudgets (the first reconcile does not prune).
    wait_for(
        lambda: ("poddisruptionbudgets", "list") in {(c.resource, c.verb) for c in api.checks()},
        what="a resync that prunes",
    )
    listed = {c.resource for c in api.checks() if c.verb == "list"}
    assert "leaderworkersets" in listed
    assert not listed & {r.plural for r in ROUTING}
