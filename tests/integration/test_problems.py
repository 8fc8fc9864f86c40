"""What the status says when the cluster or the spec is not as it should be."""

from typing import Any

import pytest

from kimi_operator.api.crd import crd
from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults
from kimi_operator.embedded.faults import Fault
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import EVENT, KIMI_DEPLOYMENT, SERVICE, Resource
from kimi_operator.reconcile import reconcile
from kimi_operator.runner import OperatorThread
from tests.integration.conftest import metrics_of, resyncs
from tests.support.cluster import (
    NAME,
    NS,
    children,
    condition,
    create,
    older_crd,
    reconciled,
    sample,
    status_of,
    wait_for,
)

pytestmark = pytest.mark.usefixtures("operator")
WITHOUT_LWS = ["ComputeDomain", "PodMonitor"]
WITHOUT_MONITORING = ["LeaderWorkerSet", "ComputeDomain"]
WITHOUT_DOMAINS = ["LeaderWorkerSet", "PodMonitor"]


def warnings(client: Client, reason: str) -> list[dict[str, Any]]:
    return [e for e in client.list(EVENT, NS) if e["reason"] == reason and e["type"] == "Warning"]


@pytest.mark.parametrize("installed", [WITHOUT_LWS], indirect=True)
def test_missing_leader_worker_set_api_is_said_plainly(client: Client) -> None:
    status = create(client, sample())
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "LeaderWorkerSetNotInstalled")
    assert "leaderworkersets.leaderworkerset.x-k8s.io" in ready["message"]
    assert (
        "kubectl apply --server-side -f https://github.com/kubernetes-sigs/lws" in ready["message"]
    )
    assert condition(status, "Degraded")["status"] == "True"
    assert condition(status, "Progressing")["reason"] == "LeaderWorkerSetNotInstalled"
    # What can be created is: the Service, the PDB, the domains and the monitor wait for nothing.
    assert "Service/k3-tp8-dspark" in children(client)
    assert wait_for(lambda: warnings(client, "LeaderWorkerSetNotInstalled"), what="event")


@pytest.mark.parametrize("installed", [WITHOUT_MONITORING], indirect=True)
def test_missing_pod_monitor_api_is_said_plainly(client: Client) -> None:
    status = create(client, sample())
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PodMonitorNotInstalled")
    assert "podmonitors.monitoring.coreos.com" in ready["message"]
    assert "spec.monitoring.podMonitor: false" in ready["message"]


@pytest.mark.parametrize("installed", [WITHOUT_MONITORING], indirect=True)
def test_pod_monitor_api_is_not_needed_without_monitoring(client: Client) -> None:
    doc = sample()
    doc["spec"]["monitoring"] = {"podMonitor": False}
    status = create(client, doc)
    assert condition(status, "Ready")["reason"] == "GroupsNotReady"
    assert condition(status, "Degraded")["status"] == "False"


@pytest.mark.parametrize("installed", [WITHOUT_DOMAINS], indirect=True)
def test_missing_compute_domain_api_with_auto_deploys_stock_decode(client: Client) -> None:
    """`auto` decode runs without multi-node NVLink, with NCCL told that there is none."""
    doc = sample()
    doc["spec"]["decode"] = {"backend": "auto"}
    status = create(client, doc)
    mnnvl = condition(status, "MNNVLReady")
    assert (mnnvl["status"], mnnvl["reason"]) == ("False", "ComputeDomainNotInstalled")
    assert condition(status, "Degraded")["reason"] == "ComputeDomainNotInstalled"
    assert condition(status, "Ready")["reason"] == "GroupsNotReady"  # not blocked
    lws = children(client)["LeaderWorkerSet/k3-tp8-dspark-g0"]
    pod = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert "resourceClaims" not in pod
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["NCCL_MNNVL_ENABLE"] == "0"


@pytest.mark.parametrize("installed", [WITHOUT_DOMAINS], indirect=True)
@pytest.mark.parametrize("mode", ["Required", "Auto"])
def test_missing_compute_domain_api_blocks_a_group_that_needs_it(client: Client, mode: str) -> None:
    """Required, and Auto for a latency_specialized group across two trays: no pods that would
    load the weights and then fail without multicast memory."""
    doc = sample()
    doc["spec"]["computeDomain"] = mode
    status = create(client, doc)
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ComputeDomainNotInstalled")
    assert "helm install nvidia-dra-driver-gpu" in ready["message"]
    if mode == "Auto":
        assert "TP group across 2 nodes needs its IMEX channel" in ready["message"]
    assert condition(status, "Progressing")["status"] == "False"
    assert not [k for k in children(client) if k.startswith("LeaderWorkerSet")]
    assert "Service/k3-tp8-dspark" in children(client)


def test_invalid_spec_leaves_children_alone(
    client: Client, api: EmbeddedApiServer, operator: OperatorThread
) -> None:
    create(client, sample())
    before = children(client)
    since = api.mark()
    # The API server refuses it; it reaches the operator as an older CRD would let it (written
    # under that CRD, kept when the current one is installed again).
    bad = {"gpus": 12, "engineArgs": ["--enable-lora"]}
    with pytest.raises(ApiError, match="HTTP 422"):
        client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": bad})
    api.install_crds([older_crd()])
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": bad})
    api.install_crds([crd()])
    status = wait_for(lambda: reconciled(client, 2), what="generation 2 acted on")
    kd = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert kd is not None
    expected = "; ".join(str(p) for p in check_document(kd).problems)
    assert expected  # the same messages `kimi-operator validate` prints
    spec_valid = condition(status, "SpecValid")
    assert spec_valid == spec_valid | {"status": "False", "reason": "Invalid", "message": expected}
    assert condition(status, "Degraded")["reason"] == "SpecInvalid"
    assert condition(status, "Ready")["reason"] == "GroupsNotReady"  # as observed before
    events = wait_for(lambda: warnings(client, "Invalid"), what="the Invalid event")
    assert events[0]["message"] == expected
    resyncs(metrics_of(operator))
    after = children(client)
    assert {k: v["metadata"]["resourceVersion"] for k, v in after.items()} == {
        k: v["metadata"]["resourceVersion"] for k, v in before.items()
    }
    child_writes = [
        r for r in api.writes(since) if "kimideployments" not in r.path and "events" not in r.path
    ]
    assert child_writes == []


def test_server_errors_are_retried(
    client: Client, api: EmbeddedApiServer, operator: OperatorThread
) -> None:
    api.inject(Fault("POST", "/leaderworkersets", 503, times=2))
    api.inject(Fault("POST", "/services", 409))
    create(client, sample())
    found = wait_for(
        lambda: f if len(f := children(client)) == 5 else None,
        timeout=20,
        what="every child after the retries",
    )
    assert "Service/k3-tp8-dspark" in found
    status = wait_for(
        lambda: (
            (s := status_of(client, NS, NAME))
            and condition(s, "Degraded")["status"] == "False"
            and s
        ),
        timeout=20,
        what="Degraded back to False",
    )
    assert condition(status, "Ready")["reason"] == "GroupsNotReady"
    errors = operator.controller.metrics.registry.get_sample_value(
        "kimi_operator_reconcile_errors_total", {"kind": "temporary"}
    )
    assert errors is not None
    assert errors >= 3


def test_permanent_errors_are_reported_not_retried_in_a_loop(
    client: Client, api: EmbeddedApiServer, operator: OperatorThread
) -> None:
    api.inject(Fault("POST", "/leaderworkersets", 403, times=1000))
    status = create(client, sample())
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ApplyFailed")
    assert "HTTP 403" in ready["message"]
    # Retried at the resyncs only, not in a tight loop.
    since = api.mark()
    resyncs(metrics_of(operator), 4)
    attempts = [r for r in api.writes(since) if r.path.endswith("/leaderworkersets")]
    assert 1 <= len(attempts) <= 6


def test_a_name_taken_by_someone_else_is_not_touched(client: Client) -> None:
    client.create(
        SERVICE,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"ports": [{"port": 1}]},
        },
    )
    status = create(client, sample())
    assert condition(status, "Ready")["reason"] == "ApplyFailed"
    assert "is not owned by this KimiDeployment" in condition(status, "Ready")["message"]
    service = client.get(SERVICE, NS, NAME)
    assert service is not None
    assert service["spec"]["ports"] == [{"port": 1}]


def test_operator_metrics(client: Client, operator: OperatorThread) -> None:
    metrics = operator.controller.metrics

    def value(name: str, **labels: str) -> float:
        return metrics.registry.get_sample_value(name, labels) or 0.0

    create(client, sample())
    wait_for(
        lambda: value("kimi_operator_reconciles_total", trigger="create", result="reconciled") == 1,
        what="the create counted",
    )
    assert value("kimi_operator_deployments", condition="Ready", status="False") == 1
    assert value("kimi_operator_deployments", condition="SpecValid", status="True") == 1
    assert (
        value("kimi_operator_api_requests_total", verb="create", kind="LeaderWorkerSet", code="201")
        == 1
    )
    assert value("kimi_operator_reconcile_duration_seconds_count", trigger="create") == 1
    client.delete(KIMI_DEPLOYMENT, NS, NAME)
    wait_for(
        lambda: value("kimi_operator_deployments", condition="Ready", status="False") == 0,
        what="the deleted deployment forgotten",
    )


def test_fast_path_warning_is_an_event_and_a_condition_message(
    client: Client, operator: OperatorThread
) -> None:
    doc = sample()
    doc["spec"]["decode"] = {"maxNumSeqs": 16}
    status = create(client, doc)
    spec_valid = condition(status, "SpecValid")
    assert spec_valid["status"] == "True"
    assert spec_valid["message"].startswith("valid with warnings: ")
    events = wait_for(lambda: warnings(client, "FastPathExceeded"), what="the warning event")
    assert events[0]["message"] in spec_valid["message"]
    resyncs(metrics_of(operator), 3)
    assert len(warnings(client, "FastPathExceeded")) == 1  # once per spec, not per resync


def test_a_transient_discovery_error_is_said_in_the_status_and_retried(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discovery is a read like the others: a 503 from it ends the observation, and the status
    says RetryingAfterApiError (it escaped the reconcile, leaving the status as it was)."""
    client.create(KIMI_DEPLOYMENT, sample())
    body = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert body is not None

    def unavailable(resource: Resource) -> bool:
        raise ApiError(f"discover {resource.kind}: HTTP 503: unavailable", code=503)

    monkeypatch.setattr(client, "served", unavailable)
    outcome = reconcile(body, client, OperatorDefaults(), spec_changed=True, now="now")
    assert isinstance(outcome.error, ApiError)
    assert outcome.error.code == 503
    progressing = condition(outcome.status, "Progressing")
    assert progressing["reason"] == "RetryingAfterApiError", outcome.status
    assert "HTTP 503" in progressing["message"]
    assert outcome.applied.created == []
