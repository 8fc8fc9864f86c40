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
from kimi_operator.builders.calibration import CALIBRATION_LABEL
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import (
    CONFIG_MAP,
    CRON_JOB,
    JOB,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    ROLE,
    ROLE_BINDING,
    SERVICE_ACCOUNT,
)
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


CRON = f"{NAME}-calibrate-g"
CALIBRATION_KINDS = (SERVICE_ACCOUNT, ROLE, ROLE_BINDING, CRON_JOB)


def _schedule(client: Client, schedule: str | None) -> None:
    slo = {"spec": {"autoscaling": {"slo": {"calibration": {"schedule": schedule}}}}}
    client.patch(KIMI_DEPLOYMENT, NS, NAME, slo)


@pytest.mark.usefixtures("scaling_operator")
def test_a_scheduled_calibration_gets_an_owned_cronjob_and_holds_the_scaler_while_it_runs(
    client: Client, prometheus: StandInPrometheus
) -> None:
    prometheus.answers = LOAD
    doc = _document()
    doc["spec"]["autoscaling"]["slo"]["calibration"]["schedule"] = "0 4 * * 0"
    create(client, doc)
    kd = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert kd is not None
    made = wait_for(
        lambda: all(client.get(r, NS, CRON) for r in CALIBRATION_KINDS) or None,
        TIMEOUT_S,
        "the calibration's CronJob and RBAC",
    )
    assert made
    for resource in CALIBRATION_KINDS:
        obj = client.get(resource, NS, CRON)
        assert obj is not None
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "KimiDeployment",
            kd["metadata"]["uid"],
            True,
        )
    cron = client.get(CRON_JOB, NS, CRON)
    assert cron is not None
    assert cron["spec"]["schedule"] == "0 4 * * 0"
    _sized(client, 1, BUILTIN)

    # A run of it (as its CronJob would make one): three times the load is its sweep's, not
    # demand; the count stays, and status says why.
    run = f"{CRON}-29483520"
    labels = {CALIBRATION_LABEL: NAME}
    client.create(JOB, {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": run, "namespace": NS, "labels": labels},
        "spec": cron["spec"]["jobTemplate"]["spec"],
    })  # fmt: skip

    def held() -> dict[str, Any] | None:
        decode = status_of(client, NS, NAME).get("sloAutoscaler", {}).get("decode", {})
        return decode if str(decode.get("message", "")).startswith("held while") else None

    # The load rises once the operator has seen the Job: a reconcile that listed the Jobs before
    # it was made and read Prometheus after the rise scaled on the rise (a race of the test's).
    wait_for(held, TIMEOUT_S, "the scaler held")
    prometheus.answers = LOAD | {ROLE_REQUESTS: 3.0}
    asked = sum(ROLE_REQUESTS in q for q in prometheus.queries)
    # Two readings later (one deployment's reconciles one at a time): the first's is decided.
    wait_for(
        lambda: sum(ROLE_REQUESTS in q for q in prometheus.queries) >= asked + 2 or None,
        TIMEOUT_S,
        "two readings of the sweep's load",
    )
    decode = held()
    assert decode is not None
    assert decode["desiredReplicas"] == 1
    assert f"calibration Job {run} runs" in decode["message"]
    # Finished: the same load is demand again.
    done = {"type": "Complete", "status": "True"}
    client.patch(JOB, NS, run, {"status": {"conditions": [done]}}, subresource="status")
    wait_for(
        lambda: status_of(client, NS, NAME)["sloAutoscaler"]["decode"]["desiredReplicas"] > 1,
        TIMEOUT_S,
        "more groups once the sweep ended",
    )

    # A new schedule is the CronJob's; none removes it and what it ran as.
    _schedule(client, "30 2 * * *")
    wait_for(
        lambda: (
            (client.get(CRON_JOB, NS, CRON) or {}).get("spec", {}).get("schedule") == "30 2 * * *"
        ),
        TIMEOUT_S,
        "the CronJob's new schedule",
    )
    _schedule(client, None)
    wait_for(
        lambda: not any(client.get(r, NS, CRON) for r in CALIBRATION_KINDS),
        TIMEOUT_S,
        "the calibration's CronJob and RBAC deleted",
    )
