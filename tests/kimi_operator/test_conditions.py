"""The status a reconcile computes (kimi_operator/conditions.py): transition times, Warning
Events for new problems only, an invalid spec keeping what was observed."""

from typing import Any

from kimi_operator import conditions as cond
from kimi_operator.api.problem import Problem


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
    missing = Problem("LeaderWorkerSetNotInstalled", "install it")
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
    problem = Problem.in_field("spec.gpus", "is not one of the allowed values", "8, 16", got=4)
    invalid = cond.render(ready, cond.invalid_conditions(ready, [problem]), generation=2, now="T2")
    by_type = {c["type"]: c for c in invalid["conditions"]}
    assert by_type["Ready"]["status"] == "True"
    assert by_type["SpecValid"] | {"lastTransitionTime": ""} == {
        "type": "SpecValid",
        "status": "False",
        "reason": "Invalid",
        "message": "spec.gpus: is not one of the allowed values (got 4; allowed: 8, 16)",
        "lastTransitionTime": "",
        "observedGeneration": 2,
    }
    assert invalid["replicas"] == ready["replicas"] == 2
