"""The stand-in's shortcuts give the verdicts of the full walk: an annotated schema (scalars
with nothing to check but their type, subtrees without defaults) validates and defaults as the
raw one does, and an update skips only the top-level fields it left alone, whose errors are
ratcheted away anyway."""

import copy
from typing import Any

import pytest

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.embedded.schema import annotated, default, validate
from kimi_operator.embedded.upstream import upstream_crd
from tests.support.specs import edited

LWS_SCHEMA: dict[str, Any] = upstream_crd("LeaderWorkerSet")["spec"]["versions"][0]["schema"][
    "openAPIV3Schema"
]


def group() -> dict[str, Any]:
    kd = KimiDeployment.model_validate(edited({}))
    (lws,) = [c for c in build_children(kd, OperatorDefaults()) if c["kind"] == "LeaderWorkerSet"]
    return lws


def container(lws: dict[str, Any]) -> dict[str, Any]:
    spec = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    found: dict[str, Any] = spec["containers"][0]
    return found


def _port_as_text(lws: dict[str, Any]) -> None:
    container(lws)["ports"] = [{"containerPort": "8000"}]  # an integer field


def _unknown_startup_policy(lws: dict[str, Any]) -> None:
    lws["spec"]["startupPolicy"] = "Whenever"  # an enum


def _number_as_bool(lws: dict[str, Any]) -> None:
    lws["spec"]["replicas"] = True  # a boolean is not an integer


def _name_as_number(lws: dict[str, Any]) -> None:
    container(lws)["name"] = 7


def _limit_as_list(lws: dict[str, Any]) -> None:
    container(lws)["resources"] = {"limits": ["gpu"]}  # int-or-string map values


def _missing_required(lws: dict[str, Any]) -> None:
    del container(lws)["name"]


@pytest.mark.parametrize(
    "spoil",
    [
        _port_as_text,
        _unknown_startup_policy,
        _number_as_bool,
        _name_as_number,
        _limit_as_list,
        _missing_required,
    ],
)
def test_an_annotated_schema_gives_the_full_walk_s_errors(spoil: Any) -> None:
    lws = group()
    spoil(lws)
    fast = annotated(LWS_SCHEMA)
    errors = [str(e) for e in validate(fast, lws)]
    assert errors == [str(e) for e in validate(LWS_SCHEMA, lws)]
    assert errors, "the spoiled object passed"


def test_a_valid_object_passes_both_ways_and_is_defaulted_alike() -> None:
    lws = group()
    fast = annotated(LWS_SCHEMA)
    assert validate(fast, lws) == validate(LWS_SCHEMA, lws) == []
    assert default(fast, copy.deepcopy(lws)) == default(LWS_SCHEMA, copy.deepcopy(lws))
    assert "\x00" not in str(LWS_SCHEMA.keys())  # the CRD's own schema is left as it was


def test_an_update_walks_only_the_top_level_fields_it_changed() -> None:
    old = group()
    _name_as_number(old)  # stored before a rule existed: a bad spec
    new = copy.deepcopy(old)
    new["status"] = {"replicas": 1}  # a status write leaves the spec alone
    assert validate(LWS_SCHEMA, new)  # the full walk finds the old error...
    assert validate(annotated(LWS_SCHEMA), new, old=old) == []  # ...that ratcheting drops
    new["spec"]["replicas"] = 3  # an edit of the spec: it is checked, old error included
    errors = [str(e) for e in validate(annotated(LWS_SCHEMA), new, old=old)]
    assert any(".name" in e for e in errors), errors
