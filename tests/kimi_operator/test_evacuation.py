"""evacuation.py, make before break on an unfit node, on a virtual clock: the replacement first,
the group drained only once it serves, no room said (and a critical node's group let go), the
replacement kept until the group serves again on fit nodes, a rollout's surge waited for."""

import json
from typing import Any

from kimi_operator import evacuation
from kimi_operator.api.validation import check_document
from kimi_operator.builders.meta import LWS_WORKER_INDEX_LABEL
from kimi_operator.builders.nodes import CONDITION, CORDONED, Unfit
from kimi_operator.builders.placement import GROUP_LABEL
from kimi_operator.evacuation import EVACUATION_ANNOTATION, NO_ROOM, Record
from kimi_operator.rollout import DRAINING_ANNOTATION
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


def test_nothing_unfit_nothing_moves() -> None:
    live = {name(0): group(0), name(1): group(1)}
    found = evacuation.plan(kd(), live, pods(0, "tray-1") + pods(1, "tray-2"), {}, now=START)
    assert found == evacuation.Evacuations()


def test_a_cordon_brings_up_the_replacement_first_and_records_it_on_it() -> None:
    live = {name(0): group(0), name(1): group(1)}
    found = evacuation.plan(kd(), live, pods(0, "tray-1") + pods(1, "tray-5"), CORDON, now=START)
    assert found.spares == {"g": 1}
    assert json.loads(found.marks[name(2)]) == json.loads(record().text())
    assert found.leaving == {}  # it serves until its replacement does
    assert found.started == [CORDONED]
    assert [n[0] for n in found.news] == ["EvacuationStarted"]
    assert evacuation.status(found) == [
        {
            "name": name(0),
            "node": "tray-1",
            "reason": CORDONED,
            "message": "node tray-1 is cordoned",
            "replacement": name(2),
            "since": START,
        }
    ]


def test_the_group_leaves_only_once_its_replacement_serves() -> None:
    starting = {
        name(0): group(0),
        name(1): group(1),
        name(2): group(2, ready=False, record=record()),
    }
    seen = pods(0, "tray-1") + pods(1, "tray-5")
    waiting = evacuation.plan(kd(), starting, seen, CORDON, now=LATER)
    assert (waiting.spares, waiting.leaving, waiting.news, waiting.started) == (
        {"g": 1},
        {},
        [],
        [],
    )
    assert waiting.marks[name(2)] == record().text()  # as first written: no write
    serving = {**starting, name(2): group(2, record=record())}
    found = evacuation.plan(kd(), serving, seen + pods(2, "tray-9"), CORDON, now=LATER)
    assert found.leaving == {name(0): record()}
    draining = {**serving, name(2): dict(serving[name(2)])}
    draining[name(2)]["metadata"] = {**draining[name(2)]["metadata"]}
    draining[name(2)]["metadata"]["annotations"] = {
        EVACUATION_ANNOTATION: record().text(),
        DRAINING_ANNOTATION: LATER,
    }
    # A replacement out of routing (draining) does not serve: the group stays.
    assert evacuation.plan(kd(), draining, seen, CORDON, now=LATER).leaving == {}


def test_no_room_for_the_replacement_keeps_a_cordoned_group_serving() -> None:
    live = {name(0): group(0), name(1): group(1), name(2): group(2, ready=False, record=record())}
    seen = pods(0, "tray-1") + pods(1, "tray-5") + pods(2, "", unschedulable=True)
    found = evacuation.plan(kd(), live, seen, CORDON, now=LATER)
    assert found.leaving == {}
    (problem,) = found.problems
    assert problem.reason == NO_ROOM
    assert "tray-1 is cordoned" in problem.message
    assert "Insufficient nvidia.com/gpu" in problem.message
    assert "kubectl drain --disable-eviction" in problem.message


def test_no_room_on_a_critical_node_lets_the_group_go_without_one() -> None:
    failing = record(critical=True)
    live = {name(0): group(0), name(1): group(1), name(2): group(2, ready=False, record=failing)}
    seen = pods(0, "tray-1") + pods(1, "tray-5") + pods(2, "", unschedulable=True)
    found = evacuation.plan(kd(), live, seen, FAILING, now=LATER)
    assert found.leaving == {name(0): failing}
    assert "without one" in found.problems[0].message


def test_the_replacement_stays_until_the_group_serves_again_on_fit_nodes() -> None:
    rebuilt = {
        name(0): group(0, ready=False),
        name(1): group(1),
        name(2): group(2, record=record()),
    }
    moved = pods(0, "tray-7") + pods(1, "tray-5") + pods(2, "tray-9")
    found = evacuation.plan(kd(), rebuilt, moved, CORDON, now=LATER)
    assert (found.spares, found.leaving) == ({"g": 1}, {})
    # Gone (deleted, not yet made again): kept too, and so without any node unfit any more.
    gone = {k: v for k, v in rebuilt.items() if k != name(0)}
    assert evacuation.plan(kd(), gone, None, {}, now=LATER).spares == {"g": 1}
    back = {**rebuilt, name(0): group(0)}
    assert evacuation.plan(kd(), back, moved, CORDON, now=LATER).spares == {}


def test_a_group_gone_is_made_again_only_once_its_node_is_fit() -> None:
    """Made again at once it would take back its pods' names, and a `kubectl drain` of the node,
    retrying each refused eviction by name, would evict the new group's pods for ever."""
    gone = {name(1): group(1), name(2): group(2, record=record())}
    moved = pods(1, "tray-5") + pods(2, "tray-9")
    held = evacuation.plan(kd(), gone, moved, CORDON, now=LATER)
    assert (held.spares, held.returning) == ({"g": 1}, {name(0)})
    # Its pods not yet deleted after it (the garbage collector's turn): held all the same.
    left = evacuation.plan(kd(), gone, pods(0, "tray-1") + moved, CORDON, now=LATER)
    assert (left.returning, left.leaving) == ({name(0)}, {})
    assert held.progress == [
        f"{name(0)} leaves node tray-1 (Cordoned): {name(2)} serves in its place; {name(0)} is "
        "made again once node tray-1 is fit"
    ]
    # The node fit again (uncordoned, or gone): made again, the replacement kept meanwhile.
    fit = evacuation.plan(kd(), gone, moved, {"tray-3": Unfit(CORDONED, "")}, now=LATER)
    assert (fit.spares, fit.returning) == ({"g": 1}, set())
    # A replacement that does not serve (yet) holds nothing back.
    starting = {**gone, name(2): group(2, ready=False, record=record())}
    assert evacuation.plan(kd(), starting, moved, CORDON, now=LATER).returning == set()


def test_terminating_pods_on_the_node_do_not_count() -> None:
    live = {name(0): group(0), name(1): group(1)}
    seen = pods(0, "tray-1", deletionTimestamp=START) + pods(1, "tray-5")
    assert evacuation.plan(kd(), live, seen, CORDON, now=START).spares == {}


def test_a_rollouts_surge_group_in_the_slot_is_waited_for() -> None:
    live = {name(0): group(0), name(1): group(1), name(2): group(2)}  # no record: a rollout's
    found = evacuation.plan(kd(), live, pods(0, "tray-1"), CORDON, now=START)
    assert (found.spares, found.marks, found.started) == ({}, {}, [])
    assert "waiting for the rollout's surge group" in found.progress[0]


def test_one_group_at_a_time_a_critical_node_first() -> None:
    unfit = {**CORDON, "tray-3": FAILING["tray-1"]}
    live = {name(0): group(0), name(1): group(1)}
    found = evacuation.plan(kd(), live, pods(0, "tray-1") + pods(1, "tray-3"), unfit, now=START)
    assert [r.group for _, r in found.records] == [name(1)]
    assert found.spares == {"g": 1}


def test_a_record_that_cannot_be_read_is_none() -> None:
    broken = group(2)
    broken["metadata"]["annotations"] = {EVACUATION_ANNOTATION: "{not json"}
    assert evacuation.recorded(broken) is None
