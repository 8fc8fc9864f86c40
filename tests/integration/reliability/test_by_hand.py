"""Children edited, deleted or disowned by hand, and CRDs removed and re-added while deployments
exist: restored or reported, the operator up throughout."""

import pytest

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.reliability import run_by_hand
from kimi_operator.k8s.client import Client
from kimi_operator.runner import OperatorThread
from tests.integration.conftest import UPSTREAM_CRDS


@pytest.mark.parametrize("kind", ["LeaderWorkerSet", "ComputeDomain", "PodMonitor"])
def test_hand_edits_are_undone_and_a_missing_crd_is_reported(
    api: EmbeddedApiServer, client: Client, operator: OperatorThread, kind: str
) -> None:
    registry = operator.controller.metrics.registry

    def errors() -> float:
        return sum(
            registry.get_sample_value("kimi_operator_reconcile_errors_total", {"kind": k}) or 0.0
            for k in ("temporary", "permanent")
        )

    report = run_by_hand(
        api,
        client,
        is_up=operator._thread.is_alive,
        errors=errors,
        crds={kind: UPSTREAM_CRDS[kind]},
        timeout_s=30,
    )
    assert report.operator_up
    assert report.crds == {kind: f"{kind}NotInstalled"}
    assert len(report.repaired) == 3
    # A missing API is a condition to report, not an error to retry in a loop.
    assert report.errors_during_crd_removal <= 4
