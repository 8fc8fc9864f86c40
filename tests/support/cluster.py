"""KimiDeployment objects for tests that talk to an API server (the embedded one or a real
cluster): the samples, a CRD that accepts any spec, reading status, waiting."""

import copy
from collections.abc import Callable
from typing import Any, TypeVar

import yaml

from kimi_operator.api.crd import crd
from kimi_operator.api.status import condition as api_condition
from kimi_operator.builders import OperatorDefaults
from kimi_operator.embedded.processes import wait
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import (
    COMPUTE_DOMAIN,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    POD_DISRUPTION_BUDGET,
    POD_MONITOR,
    SERVICE,
)
from kimi_operator.reconcile import reconcile
from tests.support.repo import ROOT

T = TypeVar("T")
NS, NAME = "inference", "k3-tp8-dspark"  # the namespace and name of the default sample


def older_crd() -> dict[str, Any]:
    """The KimiDeployment CRD as an older one without today's schema and rules (any spec): how an
    object the current CRD refuses gets stored, and is kept when the current one is installed."""
    older = crd()
    for version in older["spec"]["versions"]:
        schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        version["schema"] = {"openAPIV3Schema": schema}
    return older


def sample(name: str = "k3-tp8-dspark") -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(
        (ROOT / "crds" / "samples" / f"{name}.yaml").read_text()
    )
    return copy.deepcopy(loaded)


def wait_for(probe: Callable[[], T | None], timeout: float = 10.0, what: str = "condition") -> T:
    return wait(probe, timeout, what, every=0.02)


def status_of(client: Client, namespace: str, name: str) -> dict[str, Any]:
    kd = client.get(KIMI_DEPLOYMENT, namespace, name)
    assert kd is not None
    status: dict[str, Any] = kd.get("status") or {}
    return status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    """The condition `kind` of a status; the test fails when the status has none."""
    found = dict(api_condition(status, kind))
    assert found, f"no {kind} condition in {status.get('conditions')}"
    return found


def children(client: Client, name: str = NAME, namespace: str = NS) -> dict[str, dict[str, Any]]:
    """`Kind/name` -> object, for every child the deployment `name` has."""
    found = {}
    for resource in (
        COMPUTE_DOMAIN,
        LEADER_WORKER_SET,
        SERVICE,
        POD_DISRUPTION_BUDGET,
        POD_MONITOR,
    ):
        if not client.served(resource):
            continue
        for obj in client.list(resource, namespace):
            if obj["metadata"].get("labels", {}).get("app.kubernetes.io/instance") == name:
                found[f"{resource.kind}/{obj['metadata']['name']}"] = obj
    return found


def reconciled(
    client: Client, generation: int, name: str = NAME, namespace: str = NS
) -> dict[str, Any] | None:
    """The status once the operator has seen `generation`, else None (for `wait_for`)."""
    status = status_of(client, namespace, name)
    return status if status.get("observedGeneration") == generation else None


def create(client: Client, doc: dict[str, Any]) -> dict[str, Any]:
    client.create(KIMI_DEPLOYMENT, doc)
    name = doc["metadata"]["name"]
    status: dict[str, Any] = wait_for(lambda: reconciled(client, 1, name), what="first status")
    return status


def reconcile_once(client: Client, namespace: str, name: str) -> dict[str, Any]:
    """One reconcile of the deployment as it is stored, its status written back; the status."""
    body = client.get(KIMI_DEPLOYMENT, namespace, name)
    assert body is not None
    outcome = reconcile(body, client, OperatorDefaults(), spec_changed=True, now="now")
    assert outcome.error is None
    client.patch(KIMI_DEPLOYMENT, namespace, name, {"status": outcome.status}, subresource="status")
    return outcome.status
