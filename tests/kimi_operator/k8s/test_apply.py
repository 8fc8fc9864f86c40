"""The pure parts of apply and status."""

import copy
from typing import Any

from kimi_operator import conditions as cond
from kimi_operator.embedded.server import merge_diff, merge_patch
from kimi_operator.k8s.apply import APPLIED_ANNOTATION, covers, drift_patch, removals, with_owner

OWNER = {
    "apiVersion": "kimi-operator.io/v1alpha1",
    "kind": "KimiDeployment",
    "metadata": {"name": "k3", "uid": "u-1"},
}
CHILD = {
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


def seen(**changes: Any) -> cond.Observation:
    base: dict[str, Any] = {
        "groups_wanted": 2,
        "groups_present": 2,
        "groups_ready": 1,
        "endpoint": "http://x",
        "domains_wanted": 2,
        "domains_ready": 2,
    }
    return cond.Observation(**(base | changes))


def test_transition_time_moves_only_when_the_status_changes() -> None:
    first = cond.render({}, cond.valid_conditions(seen()), generation=1, now="T1")
    same = cond.render(first, cond.valid_conditions(seen()), generation=1, now="T2")
    assert same == first
    ready = cond.render(first, cond.valid_conditions(seen(groups_ready=2)), generation=1, now="T3")
    times = {c["type"]: c["lastTransitionTime"] for c in ready["conditions"]}
    assert times == {
        "Ready": "T3",
        "Progressing": "T3",
        "Degraded": "T1",
        "SpecValid": "T1",
        "MNNVLReady": "T1",
    }


def test_new_problems_are_worth_one_event_each() -> None:
    missing = cond.Problem("LeaderWorkerSetNotInstalled", "install it")
    first = cond.render({}, cond.valid_conditions(seen()), generation=1, now="T")
    broken = cond.render(
        first, cond.valid_conditions(seen(blockers=[missing])), generation=1, now="T"
    )
    assert cond.newly_bad(first, broken) == [missing]  # Ready and Degraded: one event
    assert cond.newly_bad(broken, broken) == []  # not again on every resync


def test_invalid_spec_keeps_what_was_observed() -> None:
    ready = cond.render(
        {}, cond.valid_conditions(seen(groups_ready=2)), generation=1, now="T1", counts=(2, 2)
    )
    invalid = cond.render(
        ready, cond.invalid_conditions(ready, ["spec.gpus: no"]), generation=2, now="T2"
    )
    by_type = {c["type"]: c for c in invalid["conditions"]}
    assert by_type["Ready"]["status"] == "True"
    assert by_type["SpecValid"] | {"lastTransitionTime": ""} == {
        "type": "SpecValid",
        "status": "False",
        "reason": "Invalid",
        "message": "spec.gpus: no",
        "lastTransitionTime": "",
        "observedGeneration": 2,
    }
    assert invalid["replicas"] == ready["replicas"] == 2
