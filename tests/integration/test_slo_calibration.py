"""spec.autoscaling.slo.calibration against the embedded API server, the operator reading its
load from a stand-in Prometheus: a ConfigMap not there yet is Degraded and the built-in sizes the
groups; once the ConfigMap holds the calibration of a server twice as slow, the same load gets
more groups and status says which calibration sized them; a document broken later is Degraded
again, and the groups stay."""

from dataclasses import replace
from typing import Any

import pytest

from kimi_operator import slo_roles
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import CONFIG_MAP, LEADER_WORKER_SET
from kimi_operator.observability.rules import (
    ROLE_OUTPUT_TOKENS,
    ROLE_PREFIX_HITS,
    ROLE_PROMPT_TOKENS,
    ROLE_REQUESTS,
    ROLE_SERVING_GROUPS,
)
from kimi_operator.plan.costs import scaled
from kimi_operator.plan.stored import document
from tests.support.cluster import NS, condition, create, sample, status_of, wait_for
from tests.support.stand_in_prometheus import StandInPrometheus, prometheus

__all__ = ["prometheus"]  # the fixture

NAME, MAP = "k3-tp8-dspark", "k3-calibration"
TIMEOUT_S = 60.0
BUILTIN = "gb300-tp8-latency_specialized-dspark7"
# One request a second of 20K-token agent turns, 80% cached: one group on the built-in. No
# measured TTFT or decode rate: the model is not corrected, so the counts are the model's.
LOAD: dict[str, float | None] = {
    ROLE_REQUESTS: 1.0,
    ROLE_PROMPT_TOKENS: 20_000.0,
    ROLE_OUTPUT_TOKENS: 400.0,
    ROLE_PREFIX_HITS: 0.8,
    ROLE_SERVING_GROUPS: 1.0,
    "time_to_first_token_seconds": None,
    "decode_tokens_per_second_per_user": None,
}


def _document() -> dict[str, Any]:
    doc = sample()
    doc["spec"]["autoscaling"] = {
        "maxReplicas": 4,
        "slo": {
            "ttftSeconds": 2,
            "decodeTokensPerSecondPerUser": 40,
            "calibration": {"configMapName": MAP},
        },
    }
    return doc


def _slower(doc: dict[str, Any]) -> str:
    """What `kimi-operator export-calibration` writes for a server of the deployment's shape
    whose steps take twice as long as the built-in's."""
    builtin = slo_roles.scaler(KimiDeployment.model_validate(doc), "decode").calibration
    measured = replace(
        builtin, name="k3-measured", origin="measured: runs/k3", costs=scaled(builtin.costs, 2.0)
    )
    return document(measured)


def _sized(client: Client, replicas: int, calibration: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        status = status_of(client, NS, NAME)
        decode = (status.get("sloAutoscaler") or {}).get("decode") or {}
        found = (decode.get("desiredReplicas"), (decode.get("calibration") or {}).get("name"))
        return status if found == (replicas, calibration) else None

    status: dict[str, Any] = wait_for(probe, TIMEOUT_S, f"{replicas} groups on {calibration}")
    return status


def _degraded(client: Client, says: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        status = status_of(client, NS, NAME)
        found = condition(status, "Degraded")
        ours = found["reason"] == slo_roles.CALIBRATION and says in found["message"]
        return status if ours else None

    status: dict[str, Any] = wait_for(probe, TIMEOUT_S, f"Degraded: {says}")
    return status


@pytest.mark.usefixtures("scaling_operator")
def test_the_groups_are_sized_on_the_calibration_stored_for_the_deployment(
    client: Client, prometheus: StandInPrometheus
) -> None:
    prometheus.answers = LOAD
    doc = _document()
    create(client, doc)
    status = _degraded(client, f"ConfigMap {MAP} not found in namespace {NS}")
    assert condition(status, "Degraded")["message"].endswith(
        f"the decode groups are sized on the built-in {BUILTIN} calibration meanwhile"
    )
    _sized(client, 1, BUILTIN)

    # The user stores the deployment's calibration: its slower steps need 3 groups.
    stored = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": MAP, "namespace": NS}}
    client.create(CONFIG_MAP, stored | {"data": {"calibration.json": _slower(doc)}})
    status = _sized(client, 3, "k3-measured")
    assert status["sloAutoscaler"]["decode"]["calibration"] == {
        "name": "k3-measured",
        "origin": "measured: runs/k3",
        "configMap": f"ConfigMap {MAP}, key calibration.json",
    }
    assert condition(status, "Degraded")["status"] == "False"
    wait_for(lambda: len(client.list(LEADER_WORKER_SET, NS)) == 3, TIMEOUT_S, "3 groups")

    # Broken by an edit: said, the built-in sizes again, and the 3 groups stay for the
    # stabilization window (30 minutes) as any lower recommendation's.
    client.patch(CONFIG_MAP, NS, MAP, {"data": {"calibration.json": "{"}})
    _degraded(client, "key calibration.json is not a calibration document: not JSON")
    _sized(client, 3, BUILTIN)
    assert len(client.list(LEADER_WORKER_SET, NS)) == 3
