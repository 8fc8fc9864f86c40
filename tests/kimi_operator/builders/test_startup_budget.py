"""One start-up budget (spec.serving.startupTimeoutMinutes) sets both limits on a cold start: the
leader's startup probe window and vLLM's engine-ready timeout, which must end inside it. Unset,
vLLM waits 600 s for its engines (vllm/envs.py) and a Kimi K3 cold start that takes longer exits
and restarts for ever."""

from typing import Any

import pytest

from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults, build_children
from tests.support.pods import pod_specs
from tests.support.specs import edited

VLLM_DEFAULT_ENGINE_READY_S = 600  # vllm/envs.py, VLLM_ENGINE_READY_TIMEOUT_S unset
API_SERVER_START_S = 300  # what the budget keeps for the API server's own start around the wait


def _serving(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    report = check_document(doc)
    assert report.deployment is not None, [str(p) for p in report.problems]
    children = build_children(report.deployment, OperatorDefaults())
    return [(where, c) for where, pod in pod_specs(children) for c in pod["containers"]]


def _engine_ready_s(container: dict[str, Any]) -> int:
    (value,) = [e["value"] for e in container["env"] if e["name"] == "VLLM_ENGINE_READY_TIMEOUT_S"]
    return int(value)


def _probe_window_s(container: dict[str, Any]) -> int:
    probe = container["startupProbe"]
    window: int = probe["periodSeconds"] * probe["failureThreshold"]
    return window


def test_a_default_deployment_allows_90_minutes_and_vllm_waits_as_long() -> None:
    containers = _serving(edited({}))
    leaders = [c for _, c in containers if "startupProbe" in c]
    assert len(leaders) == 1
    assert len(containers) == 2  # the leader and the worker template
    assert _probe_window_s(leaders[0]) == 90 * 60
    for _, container in containers:  # leader and workers alike
        assert _engine_ready_s(container) == 90 * 60 - API_SERVER_START_S


@pytest.mark.parametrize("minutes", [15, 61, 120, 480])
def test_vllm_gives_up_inside_the_probe_window_and_never_sooner_than_its_default(
    minutes: int,
) -> None:
    containers = _serving(edited({"spec.serving.startupTimeoutMinutes": minutes}))
    (leader,) = [c for _, c in containers if "startupProbe" in c]
    window = _probe_window_s(leader)
    assert window == minutes * 60
    for _, container in containers:
        ready = _engine_ready_s(container)
        assert VLLM_DEFAULT_ENGINE_READY_S <= ready < window
        assert window - ready == API_SERVER_START_S


@pytest.mark.parametrize("value", ["600", "5400"])
def test_spec_env_may_not_set_the_engine_ready_timeout(value: str) -> None:
    doc = edited({"spec.env": [{"name": "VLLM_ENGINE_READY_TIMEOUT_S", "value": value}]})
    problems = [str(p) for p in check_document(doc).problems]
    assert len(problems) == 1, problems
    assert "spec.env" in problems[0]
    assert "spec.serving.startupTimeoutMinutes" in problems[0]
