"""group_set.py, the one owner of a deployment's groups, on a virtual clock: names are
identities (a replacement is a member once it serves, nothing made again), any number of unfit
nodes evacuated within the budget, unknown is not fit, no room and a late replacement said."""

import json
from typing import Any

from kimi_operator import group_set
from kimi_operator.api.validation import check_document
from kimi_operator.builders.meta import LWS_WORKER_INDEX_LABEL
from kimi_operator.builders.nodes import CONDITION, CORDONED, Unfit
from kimi_operator.builders.placement import GROUP_LABEL, kept_off
from kimi_operator.evacuation import EVACUATION_ANNOTATION, NO_ROOM, Record, recorded
from tests.support.cluster import sample

START = "2026-12-01T12:00:00Z"
LATER = "2026-12-01T12:40:00Z"
CORDON = {"tray-1": Unfit(CORDONED, "")}
FAILING = {"tray-1": Unfit(CONDITION, "has condition GpuPcieWatch", critical=True)}


def kd(replicas: int = 2) -> Any:
    doc = sample("k3-tp8-dspark")
    doc["spec"]["replicas"] = replicas
    report = check_document(doc)
    assert report.deployment is not None
    return report.deployment


def name(index: int) -> str:
    return f"{kd().metadata.name}-g{index}"


def group(index: int, *, ready: bool = True, record: Record | None = None) -> dict[str, Any]:
    annotations = {} if record is None else {EVACUATION_ANNOTATION: record.text()}
    return {
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name(index), "generation": 1, "annotations": annotations},
        "spec": {"replicas": 1},
        "status": {"readyReplicas": 1 if ready else 0, "observedGeneration": 1},
    }


def pods(index: int, node: str, *, unschedulable: bool = False, **meta: Any) -> list[Any]:
    out = []
    for worker in range(2):
        status: dict[str, Any] = {"phase": "Running"}
        if unschedulable:
            message = "0/36 nodes are available: 36 Insufficient nvidia.com/gpu."
            status = {"phase": "Pending", "conditions": [_unschedulable(message)]}
        labels = {GROUP_LABEL: name(index), LWS_WORKER_INDEX_LABEL: str(worker)}
        spec = {} if unschedulable else {"nodeName": node if worker == 0 else f"{node}-peer"}
        out.append(
            {"metadata": {"name": f"{name(index)}-{worker}", "labels": labels, **meta}}
            | {"spec": spec, "status": status}
        )
    return out


def _unschedulable(message: str) -> dict[str, str]:
    return {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
    }


def record(*, critical: bool = False) -> Record:
    reason = CONDITION if critical else CORDONED
    detail = "node tray-1 has condition GpuPcieWatch" if critical else "node tray-1 is cordoned"
    return Record(name(0), "tray-1", reason, detail, critical, START)


def plan(
    live: list[dict[str, Any]],
    seen: list[Any] | None,
    unfit: dict[str, Unfit] | None,
    *,
    replicas: int = 2,
    now: str = START,
    lives: tuple[dict[str, Any], ...] = (),
) -> group_set.GroupSet:
    found = {g["metadata"]["name"]: g for g in live}
    return group_set.plan(kd(replicas), found, seen, unfit, now=now, lives=lives)


def test_nothing_unfit_the_lowest_indices_are_the_members() -> None:
    found = plan([group(0), group(1)], pods(0, "tray-1") + pods(1, "tray-2"), {})
    role = found.roles["g"]
    assert role.positions[:2] == [name(0), name(1)]
    assert (role.replacing, role.leaving, found.marks) == ({}, {}, {})


def test_a_cordon_brings_up_a_replacement_first_at_a_fresh_name() -> None:
    found = plan([group(0), group(1)], pods(0, "tray-1") + pods(1, "tray-5"), CORDON)
    role = found.roles["g"]
    assert role.replacing == {name(2): record()}
    assert found.marks == {name(2): record().text()}
    assert role.positions[:2] == [name(0), name(1)]  # the group serves meanwhile
    assert group_set.status(found) == [
        {
            "name": name(0),
            "node": "tray-1",
            "reason": CORDONED,
            "message": "node tray-1 is cordoned",
            "replacement": name(2),
            "since": START,
        }
    ]
    assert [reason for reason, _ in found.news] == ["EvacuationStarted"]


def test_once_the_replacement_serves_it_takes_the_groups_place_and_the_group_leaves() -> None:
    seen = pods(0, "tray-1") + pods(1, "tray-5") + pods(2, "tray-9")
    live = [group(0), group(1), group(2, record=record())]
    role = plan(live, seen, CORDON, now=LATER).roles["g"]
    assert role.positions[:2] == [name(2), name(1)]
    assert role.leaving == {name(0): (name(2), record())}
    # Not yet serving: the group stays a member, nothing leaves.
    starting = [group(0), group(1), group(2, ready=False, record=record())]
    role = plan(starting, seen, CORDON, now=LATER).roles["g"]
    assert (role.positions[:2], role.leaving) == ([name(0), name(1)], {})


def test_a_rack_drained_at_once_is_evacuated_group_by_group_within_the_budget() -> None:
    rack = {"tray-1": Unfit(CORDONED, ""), "tray-5": Unfit(CORDONED, "")}
    found = plan([group(0), group(1)], pods(0, "tray-1") + pods(1, "tray-5"), rack)
    assert list(found.roles["g"].replacing) == [name(2)]  # maxSurge 1: one at a time
    assert any("waits for one of the 1 replacement" in p for p in found.progress)
    # g0 gone, g2 serving in its place: g1's turn, at g3 (g0's name is not used while its
    # replacement records it: a drain retries evictions by the pod's name).
    done = [group(1), group(2, record=record())]
    after = plan(done, pods(1, "tray-5") + pods(2, "tray-9"), rack, now=LATER)
    assert {n: r.group for n, r in after.roles["g"].replacing.items()} == {name(3): name(1)}
    assert after.marks[name(2)] == record().text()


def test_unknown_is_not_fit_nothing_begins() -> None:
    live = [group(0), group(1)]
    for seen, unfit in ((None, CORDON), (pods(0, "tray-1"), None)):
        found = plan(live, seen, unfit)
        assert (found.roles["g"].replacing, found.leaving, found.news) == ({}, {}, [])
    # A replacement recorded, its group's node not known: its record is kept, nothing cancelled.
    kept = plan([group(1), group(2, record=record())], None, None, now=LATER)
    assert kept.marks == {name(2): record().text()}


def test_an_evacuation_over_leaves_a_plain_member_once_the_node_is_known_fit() -> None:
    live = [group(1), group(2, record=record())]
    seen = pods(1, "tray-5") + pods(2, "tray-9")
    assert plan(live, seen, CORDON, now=LATER).marks == {name(2): record().text()}
    fit = plan(live, seen, {}, now=LATER)
    assert fit.marks == {name(2): None}
    assert fit.roles["g"].positions[:2] == [name(1), name(2)]  # nothing made again
    assert group_set.status(fit) == []


def test_no_room_keeps_a_cordoned_group_serving_and_a_critical_one_goes() -> None:
    live = [group(0), group(1), group(2, ready=False, record=record())]
    seen = pods(0, "tray-1") + pods(1, "tray-5") + pods(2, "", unschedulable=True)
    found = plan(live, seen, CORDON, now=LATER)
    assert [p.reason for p in found.problems] == [NO_ROOM]
    assert found.leaving == {}
    failing = [group(0), group(1), group(2, ready=False, record=record(critical=True))]
    gone = plan(failing, seen, FAILING, now=LATER)
    assert gone.leaving == {name(0): (name(2), record(critical=True))}
    assert gone.roles["g"].positions[:2] == [name(2), name(1)]


def test_a_replacement_on_the_node_its_group_left_is_not_evacuated_again() -> None:
    """A critical condition keeps no pod off its node: the replacement let in once its group went
    would be evacuated for ever."""
    live = [group(1), group(2, record=record(critical=True))]
    found = plan(live, pods(1, "tray-5") + pods(2, "tray-1"), FAILING, now=LATER)
    assert found.roles["g"].replacing == {}
    assert [p.reason for p in found.problems] == [NO_ROOM]


def test_a_group_on_a_node_it_was_made_to_keep_off_is_not_evacuated_again() -> None:
    """A group made while tray-1 had a condition prefers every other node
    (placement.kept_off); placed there all the same, there was no room elsewhere: evacuating it
    would go from failing node to failing node for ever (the model check found it)."""
    placed = kept_off(_templated(group(1)), ["tray-1"])
    found = plan([group(0), placed], pods(0, "tray-5") + pods(1, "tray-1"), FAILING, now=LATER)
    assert found.roles["g"].replacing == {}
    (said,) = found.problems
    assert (said.reason, said.message.split(",")[0]) == (
        NO_ROOM,
        f"{name(1)} was kept off node tray-1",
    )


def _templated(live: dict[str, Any]) -> dict[str, Any]:
    """`live` with the pod templates a LeaderWorkerSet has."""
    pod: dict[str, Any] = {"spec": {}}
    templates = {"leaderTemplate": pod, "workerTemplate": json.loads(json.dumps(pod))}
    return {**live, "spec": {**live["spec"], "leaderWorkerTemplate": templates}}


def test_the_node_fit_before_the_replacement_serves_cancels_it() -> None:
    live = [group(0), group(1), group(2, ready=False, record=record())]
    found = plan(live, pods(0, "tray-1") + pods(1, "tray-5"), {}, now=LATER)
    assert (found.roles["g"].replacing, found.leaving) == ({}, {})
    assert name(2) not in found.roles["g"].positions[:2]
    assert [reason for reason, _ in found.news] == ["EvacuationCancelled"]


def test_a_scale_down_takes_the_group_on_an_unfit_node_first() -> None:
    live = [group(0), group(1), group(2)]
    seen = pods(0, "tray-1") + pods(1, "tray-5") + pods(2, "tray-9")
    role = plan(live, seen, CORDON, replicas=2).roles["g"]
    assert role.positions[:2] == [name(1), name(2)]
    assert role.replacing == {}  # an extra: pruned, not replaced


def test_a_replacement_late_says_why() -> None:
    live = [group(0), group(1), group(2, ready=False, record=record())]
    seen = pods(0, "tray-1") + pods(1, "tray-5")
    life = {"name": name(2), "stopped": True, "lastFailure": {"reason": "Crashed"}}
    found = plan(live, seen, CORDON, now="2026-12-02T12:00:00Z", lives=(life,))
    (late,) = found.problems
    assert late.reason == group_set.NOT_SERVING
    assert "stopped by spec.serving.restartBudget after Crashed" in late.message
    assert plan(live, seen, CORDON, now=LATER).problems == []  # within the deadline


def test_a_record_that_cannot_be_read_is_none() -> None:
    broken = group(2)
    broken["metadata"]["annotations"] = {EVACUATION_ANNOTATION: json.dumps({"group": 1})}
    assert recorded(broken) is None


def test_a_replacement_cancelled_goes_and_takes_no_serving_groups_place() -> None:
    """Found by the model check: g1 back on fit nodes (recreated) cancelled its replacement g3,
    which then counted as a member, and the scale-down order pruned g2, the one group serving."""
    live = [group(1, ready=False), group(2), group(3, ready=False, record=record_of(1))]
    seen = pods(1, "tray-0") + pods(2, "tray-6") + pods(3, "", unschedulable=True)
    found = plan(live, seen, {"tray-6": Unfit(CORDONED, "")}, now=LATER)
    role = found.roles["g"]
    assert role.positions[:2] == [name(1), name(2)]
    assert name(3) not in [*role.positions, *role.replacing]  # pruned
    assert {r.group for r in role.replacing.values()} == {name(2)}  # g2 on a cordoned node


def record_of(index: int) -> Record:
    return Record(name(index), "tray-3", CORDONED, "node tray-3 is cordoned", False, START)
