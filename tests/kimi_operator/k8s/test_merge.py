"""The pure parts of apply: what counts as drift, the patch that repairs it, what to remove."""

import copy
from typing import Any

from kimi_operator.embedded.patches import merge_diff, merge_patch
from kimi_operator.k8s.merge import APPLIED_ANNOTATION, covers, drift_patch, removals, with_owner

OWNER: dict[str, Any] = {
    "apiVersion": "kimi-operator.io/v1alpha1",
    "kind": "KimiDeployment",
    "metadata": {"name": "k3", "uid": "u-1"},
}
CHILD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "k3", "namespace": "ns", "labels": {"a": "1"}},
    "spec": {"ports": [{"name": "http", "port": 8000}], "selector": {"a": "1", "b": "2"}},
}


def stored(obj: dict[str, Any]) -> dict[str, Any]:
    """As an API server returns it: with fields of its own added."""
    obj = copy.deepcopy(obj)
    spec = obj["spec"]
    ports = [{**p, "protocol": "TCP"} for p in spec["ports"]]
    return {
        **obj,
        "metadata": {**obj["metadata"], "uid": "c-1", "resourceVersion": "9"},
        "spec": {**spec, "ports": ports, "clusterIP": "10.0.0.1"},
        "status": {},
    }


def test_covers_ignores_what_the_server_adds_but_not_changes() -> None:
    assert covers({"a": 1, "b": [{"x": 1, "y": 2}], "c": 3}, {"a": 1, "b": [{"x": 1}]})
    assert not covers({"a": 1, "b": [{"x": 1}, {"x": 2}]}, {"a": 1, "b": [{"x": 1}]})
    assert not covers({"a": "1"}, {"a": 1})
    assert not covers({}, {"a": None})


def test_no_patch_when_the_cluster_matches() -> None:
    desired = with_owner(CHILD, OWNER)
    assert drift_patch(stored(desired), desired) is None


def test_a_hand_edit_is_patched_back_without_touching_server_fields() -> None:
    desired = with_owner(CHILD, OWNER)
    actual = stored(desired)
    actual["spec"]["selector"]["b"] = "edited"
    patch = drift_patch(actual, desired)
    assert patch is not None
    assert patch["spec"]["selector"] == {"a": "1", "b": "2"}
    assert "clusterIP" not in patch["spec"]


def test_fields_no_longer_set_are_removed() -> None:
    before = with_owner(CHILD, OWNER)
    after_child = {**CHILD, "spec": {**CHILD["spec"], "selector": {"a": "1"}}}
    after = with_owner(after_child, OWNER)
    patch = drift_patch(stored(before), after)
    assert patch is not None
    assert patch["spec"]["selector"] == {"a": "1", "b": None}
    assert (
        patch["metadata"]["annotations"][APPLIED_ANNOTATION]
        != (before["metadata"]["annotations"][APPLIED_ANNOTATION])
    )


def test_metadata_only_drift_leaves_the_spec_alone() -> None:
    desired = with_owner(CHILD, OWNER)
    actual = stored(desired)
    actual["metadata"]["labels"] = {}
    patch = drift_patch(actual, desired)
    assert patch is not None
    assert "spec" not in patch  # ComputeDomain specs are immutable: never patch them needlessly


def test_removals() -> None:
    assert removals({"a": 1, "b": {"c": 1, "d": 2}}, {"b": {"c": 1}}) == {
        "a": None,
        "b": {"c": 1, "d": None},
    }
    assert removals(None, {"x": [1]}) == {"x": [1]}


def test_emulator_merge_patch_round_trip() -> None:
    old = {"a": 1, "b": {"c": 1, "d": 2}, "e": [1]}
    new = {"b": {"c": 2}, "e": [2], "f": {"g": 1}}
    assert merge_patch(old, merge_diff(old, new)) == new
