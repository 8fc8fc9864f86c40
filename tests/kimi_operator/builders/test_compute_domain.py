"""Multi-node NVLink is never silently missing: who needs a ComputeDomain, what happens without
the API, and NCCL told the truth about it."""

from typing import Any

import pytest

from kimi_operator.builders import OperatorDefaults
from kimi_operator.k8s.resources import COMPUTE_DOMAIN, LEADER_WORKER_SET, POD_MONITOR
from kimi_operator.reconcile import plan_children
from tests.kimi_operator.builders.cases import deployment
from tests.support.pods import pod_specs
from tests.support.specs import edited

WITHOUT_DOMAINS = {LEADER_WORKER_SET: True, COMPUTE_DOMAIN: False, POD_MONITOR: True}
WITH_DOMAINS = {**WITHOUT_DOMAINS, COMPUTE_DOMAIN: True}


def mnnvl_values(children: list[dict[str, Any]]) -> set[str]:
    return {
        e["value"]
        for _, pod in pod_specs(children)
        for c in [*pod["initContainers"], *pod["containers"]]
        for e in c["env"]
        if e["name"] == "NCCL_MNNVL_ENABLE"
    }


@pytest.mark.parametrize(
    ("spec", "blocked"),
    [
        ({}, True),  # latency_specialized across 4 trays
        ({"spec.gpus": 8}, True),  # across 2 trays
        ({"spec.computeDomain": "Required", "spec.decode.backend": "auto"}, True),
        ({"spec.decode.backend": "auto"}, False),  # stock decode runs without
        ({"spec.gpus": 8, "spec.gpusPerNode": 8}, False),  # one node: nothing to span
    ],
)
def test_without_the_api_a_group_that_needs_a_domain_gets_no_pods(
    spec: dict[str, Any], blocked: bool
) -> None:
    plan = plan_children(deployment(edited(spec)), OperatorDefaults(), WITHOUT_DOMAINS)
    kinds = {c["kind"] for c in plan.children}
    assert ("LeaderWorkerSet" not in kinds) is blocked
    reasons = [p.reason for p in (plan.blockers if blocked else plan.degradations)]
    assert reasons == ["ComputeDomainNotInstalled"]
    if not blocked:
        assert mnnvl_values(plan.children) == {"0"}


def test_with_a_domain_nccl_uses_multi_node_nvlink() -> None:
    plan = plan_children(deployment(edited({})), OperatorDefaults(), WITH_DOMAINS)
    assert "ComputeDomain" in {c["kind"] for c in plan.children}
    assert mnnvl_values(plan.children) == {"1"}
    assert not plan.blockers
    assert not plan.degradations


def test_disabled_on_one_node_tells_nccl_there_is_no_domain() -> None:
    doc = edited({"spec.gpus": 8, "spec.gpusPerNode": 8, "spec.computeDomain": "Disabled"})
    plan = plan_children(deployment(doc), OperatorDefaults(), WITH_DOMAINS)
    assert "ComputeDomain" not in {c["kind"] for c in plan.children}
    assert mnnvl_values(plan.children) == {"0"}
