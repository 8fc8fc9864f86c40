"""KimiDeployment objects for tests that talk to an API server (the embedded one or a real
cluster): the samples, a CRD that accepts any spec, reading status, waiting."""

import copy
from collections.abc import Callable
from typing import Any, TypeVar

import yaml

from kimi_operator.api.crd import crd
from kimi_operator.embedded.processes import wait
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT
from tests.support.repo import ROOT

T = TypeVar("T")


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
    found: dict[str, Any] = next(c for c in status.get("conditions", []) if c["type"] == kind)
    return found
