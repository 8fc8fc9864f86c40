"""Each TP group inside one NVLink clique, racks shared: the rendered affinity, and where it puts
groups on a fake GB300 fleet (the scheduler model of kimi_operator.embedded.scheduler)."""

import copy
from typing import Any

import pytest

from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.builders.placement import CLIQUE_LABEL, EXCLUSIVE_TOPOLOGY, GROUP_LABEL
from kimi_operator.embedded.scheduler import lws_pods, perfect_racks, place, selects
from tests.kimi_operator.builders.cases import deployment
from tests.support.specs import edited

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def groups(gpus: int, replicas: int, name: str, **scheduling: Any) -> list[dict[str, Any]]:
    doc = edited(
        {
            "metadata.name": name,
            "spec.gpus": gpus,
            "spec.replicas": replicas,
            "spec.scheduling": scheduling,
        }
    )
    children = build_children(deployment(doc), OperatorDefaults())
    return [c for c in children if c["kind"] == "LeaderWorkerSet"]


def mix(exclusive: bool) -> list[dict[str, Any]]:
    """12 groups, 6 TP16 and 6 TP8: 36 trays, two racks when packed perfectly."""
    return [
        *groups(16, 4, "a", exclusiveClique=exclusive),
        *groups(8, 6, "b", exclusiveClique=exclusive),
        *groups(16, 2, "c", exclusiveClique=exclusive),
    ]


def test_each_group_is_kept_in_one_clique_by_its_own_pods_only() -> None:
    first, second = groups(16, 2, "k3")
    assert EXCLUSIVE_TOPOLOGY not in first["metadata"].get("annotations", {})
    pods = lws_pods(first)
    others = lws_pods(second)
    for pod in pods:
        assert "podAntiAffinity" not in pod.spec["affinity"]
        (term,) = pod.spec["affinity"]["podAffinity"][REQUIRED]
        assert term["topologyKey"] == CLIQUE_LABEL
        assert all(selects(term["labelSelector"], p.labels) for p in pods)
        assert not any(selects(term["labelSelector"], p.labels) for p in others)
    assert {p.labels[GROUP_LABEL] for p in pods} == {"k3-g0"}


def test_exclusive_clique_leaves_placement_to_leader_worker_set() -> None:
    (lws,) = groups(16, 1, "k3", exclusiveClique=True)
    assert lws["metadata"]["annotations"] == {EXCLUSIVE_TOPOLOGY: CLIQUE_LABEL}
    template = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    assert "affinity" not in template["spec"]


def test_extra_affinity_is_added_to_the_clique_term() -> None:
    extra = {"labelSelector": {"matchLabels": {"team": "x"}}, "topologyKey": "zone"}
    (lws,) = groups(8, 1, "k3", affinity={"podAffinity": {REQUIRED: [extra]}})
    terms = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["affinity"][
        "podAffinity"
    ][REQUIRED]
    assert terms[0] == extra
    assert terms[1]["topologyKey"] == CLIQUE_LABEL


def test_groups_share_racks_and_none_straddles_two() -> None:
    runs = [place(mix(exclusive=False), racks=4, seed=seed) for seed in range(10)]
    assert all(r.placed == 12 and r.straddling == 0 for r in runs)
    assert max(r.racks_used for r in runs) <= 4  # exclusive cliques need 12


def test_exclusive_cliques_take_a_rack_per_group() -> None:
    run = place(mix(exclusive=True), racks=4, seed=0)
    assert (run.placed, run.waiting, run.racks_used, run.straddling) == (4, 8, 4, 0)
    assert place(mix(exclusive=True), racks=12, seed=0).placed == 12


def test_without_the_clique_term_groups_straddle() -> None:
    """The straddling count can fail: drop the term and some seed splits a group."""
    bare = copy.deepcopy(mix(exclusive=False))
    for lws in bare:
        for role in ("leaderTemplate", "workerTemplate"):
            del lws["spec"]["leaderWorkerTemplate"][role]["spec"]["affinity"]
    assert max(place(bare, racks=4, seed=seed).straddling for seed in range(5)) > 0


@pytest.mark.parametrize(
    ("trays", "racks"),
    [
        ([4] * 4 + [2], 1),
        ([4] * 5, 2),
        ([2] * 9, 1),
        ([2] * 10, 2),
        ([4] * 6 + [2] * 6, 2),
        ([], 0),
    ],
)
def test_perfect_packing(trays: list[int], racks: int) -> None:
    assert perfect_racks(trays) == racks


def test_perfect_packing_knows_tray_counts_only() -> None:
    with pytest.raises(ValueError, match="2 or 4 trays"):
        perfect_racks([3])


@pytest.mark.parametrize("mixes", [[(16, 4), (8, 1)], [(8, 9)]], ids=["4xTP16+TP8", "9xTP8"])
def test_one_nvl72_rack_holds_a_full_rack_of_groups(mixes: list[tuple[int, int]]) -> None:
    for exclusive, fits in ((False, True), (True, False)):
        lws = [
            g for gpus, n in mixes for g in groups(gpus, n, f"t{gpus}", exclusiveClique=exclusive)
        ]
        for seed in range(5):
            run = place(lws, racks=1, seed=seed)
            assert (run.waiting == 0) is fits
            assert run.placed == (len(lws) if fits else 1)


def test_the_model_matches_label_selectors_as_kubernetes_does() -> None:
    labels = {"a": "1"}
    assert selects({}, labels)
    assert selects({"matchLabels": {"a": "1"}}, labels)
    assert not selects({"matchLabels": {"a": "2"}}, labels)
    expressions = [
        ({"key": "a", "operator": "In", "values": ["1", "2"]}, True),
        ({"key": "b", "operator": "NotIn", "values": ["1"]}, True),  # absent key: not in
        ({"key": "a", "operator": "NotIn", "values": ["1"]}, False),
        ({"key": "a", "operator": "Exists"}, True),
        ({"key": "a", "operator": "DoesNotExist"}, False),
    ]
    for requirement, expected in expressions:
        assert selects({"matchExpressions": [requirement]}, labels) is expected
