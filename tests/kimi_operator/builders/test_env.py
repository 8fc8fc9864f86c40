"""Environment variables of rendered containers: the operator's list (api/owned_env.py) once each,
a user's equal-meaning value accepted and not rendered twice, no name ever twice."""

from typing import Any

import pytest

from kimi_operator.api.owned_env import OWNED_ENV
from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults, build_children
from tests.support.corpus import CORPUS
from tests.support.pods import pod_specs
from tests.support.specs import edited

HF_TOKEN_SOURCE = {"huggingface": {"repo": "a/b", "tokenSecretRef": {"name": "hf", "key": "t"}}}


def _envs(doc: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    report = check_document(doc)
    assert report.deployment is not None, [str(p) for p in report.problems]
    children = build_children(report.deployment, OperatorDefaults())
    return [
        (f"{where}/{c['name']}", c.get("env", []))
        for where, pod in pod_specs(children)
        for c in [*pod.get("initContainers", []), *pod["containers"]]
    ]


def test_no_container_of_any_accepted_corpus_spec_has_a_name_twice() -> None:
    accepted = [edits for _, edits, valid in CORPUS if valid]
    accepted += [
        {"spec.env": [{"name": e.name, "value": e.value}], "spec.model.source": HF_TOKEN_SOURCE}
        for e in OWNED_ENV
        if e.same
    ]
    twice = []
    for edits in accepted:
        for where, env in _envs(edited(edits)):
            names = [e["name"] for e in env]
            twice += [(where, n) for n in set(names) if names.count(n) > 1]
    assert len(accepted) > 40
    assert twice == []


@pytest.mark.parametrize(
    ("name", "value"), [("VLLM_USE_V2_MODEL_RUNNER", "1"), ("KIMI_METRICS_PORT", "9090")]
)
def test_a_users_equal_value_is_accepted_and_rendered_once(name: str, value: str) -> None:
    doc = edited({"spec.env": [{"name": name, "value": value}, {"name": "A", "value": "b"}]})
    for _, env in _envs(doc):
        if any(e["name"] == "A" for e in env):  # the serving container
            assert [e for e in env if e["name"] == name] == [{"name": name, "value": value}]


def test_the_operator_sets_every_owned_variable_it_needs() -> None:
    doc = edited({"spec.model.source": HF_TOKEN_SOURCE})
    (_, preflight), (_, serving), *_ = _envs(doc)
    assert {e["name"] for e in serving} == {e.name for e in OWNED_ENV}
    assert {e["name"] for e in preflight} < {e["name"] for e in serving}


def test_a_conflicting_value_is_refused_naming_spec_env() -> None:
    doc = edited({"spec.env": [{"name": "KIMI_METRICS_PORT", "value": "9100"}]})
    (problem,) = [str(p) for p in check_document(doc).problems]
    assert problem.startswith("spec.env: KIMI_METRICS_PORT is set by the operator")
    assert "allowed: KIMI_METRICS_PORT=9090, or leave it out" in problem
