"""Where a TP group's pods may run: inside one NVLink clique, sharing it with other groups.

GPU Feature Discovery labels every GB300 node with `nvidia.com/gpu.clique`; the nodes of one clique
(normally one NVL72 rack, 18 trays) share an NVLink domain. A group's pods must all be in one.
Each group is its own LeaderWorkerSet, so a required pod affinity on the clique among the pods of
that group keeps the group together without repelling other groups: four TP16 groups or nine TP8
groups share a rack. LeaderWorkerSet's `exclusive-topology` annotation (opt-in:
`scheduling.exclusiveClique`) adds, in its pod webhook, an anti-affinity against every other
group's pods in that clique as well: one group per rack (docs/scheduling.md).

A group made while nodes have a failing condition is kept off them (`kept_off`): kube-scheduler
avoids cordoned and tainted nodes, never a node condition (docs/maintenance.md).
"""

import copy
from collections.abc import Collection, Mapping
from typing import Any

from kimi_operator.api.spec import KimiDeployment

CLIQUE_LABEL = "nvidia.com/gpu.clique"
# Set on a group's pods; its value is the group's name (LeaderWorkerSet and ComputeDomain).
GROUP_LABEL = "kimi-operator.io/tp-group"
EXCLUSIVE_TOPOLOGY = "leaderworkerset.sigs.k8s.io/exclusive-topology"
KINDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
TEMPLATES = ("leaderTemplate", "workerTemplate")


def _pruned(value: Any) -> Any:
    """Empty lists, maps and objects left out, as the API server omits them on read."""
    if isinstance(value, dict):
        kept = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in ({}, [])}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def clique_term(group: str) -> dict[str, Any]:
    """The pods of group `group` in one clique; the first of them may go to any clique."""
    return {"labelSelector": {"matchLabels": {GROUP_LABEL: group}}, "topologyKey": CLIQUE_LABEL}


def group_annotations(kd: KimiDeployment) -> dict[str, str]:
    """LeaderWorkerSet annotations: exclusive cliques only when asked for."""
    return {EXCLUSIVE_TOPOLOGY: CLIQUE_LABEL} if kd.spec.scheduling.exclusive_clique else {}


def group_affinity(kd: KimiDeployment, group: str) -> dict[str, Any]:
    """The pods' affinity: the spec's own terms, plus the clique term unless LeaderWorkerSet adds
    its exclusive terms instead."""
    affinity: dict[str, Any] = _pruned(kd.spec.scheduling.affinity.model_dump(exclude_none=True))
    if not kd.spec.scheduling.exclusive_clique:
        pod_affinity = affinity.setdefault("podAffinity", {})
        pod_affinity[REQUIRED] = [*pod_affinity.get(REQUIRED, []), clique_term(group)]
    return {kind: affinity[kind] for kind in KINDS if kind in affinity}


def _away(nodes: Collection[str]) -> dict[str, Any]:
    """The preferred node affinity term that keeps pods off `nodes`."""
    away = {"key": "metadata.name", "operator": "NotIn", "values": sorted(nodes)}
    return {"weight": 100, "preference": {"matchFields": [away]}}


def kept_off(group: Any, nodes: Collection[str]) -> dict[str, Any]:
    """LeaderWorkerSet `group` with its pods kept off `nodes` (by name: a preferred node affinity
    term of the greatest weight, `matchFields` metadata.name NotIn), wherever else there is room.
    Preferred, not required: a required term stays in the template after the nodes are fit
    again, and a group still Pending then (no room elsewhere) would wait for ever for room the
    nodes have (the model check found it); where only those nodes have room, the group goes
    there, and group_set does not evacuate it from them again (`avoided` says which they are).
    For a group about to be created only: the applied-spec annotation it carries was taken
    before (k8s.merge.with_owner), and a list of its own leaves the template the operator wants
    covered by the one it has (k8s.merge.covers), so neither the rollout nor an apply ever
    rewrites the group for it. A spec with preferred node terms of its own is left as it is: a
    longer list would not be covered, and the group restarted."""
    if not nodes:
        return dict(group)
    out: dict[str, Any] = copy.deepcopy(dict(group))
    for role in TEMPLATES:
        spec = out["spec"]["leaderWorkerTemplate"][role]["spec"]
        node = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        if node.get(PREFERRED):
            return dict(group)
        node[PREFERRED] = [_away(nodes)]
    return out


def avoided(group: Mapping[str, Any]) -> set[str]:
    """The nodes LeaderWorkerSet `group` was made to keep off (`kept_off`); none for another."""
    spec = group.get("spec", {}).get("leaderWorkerTemplate", {}).get(TEMPLATES[0], {})
    terms = spec.get("spec", {}).get("affinity", {}).get("nodeAffinity", {}).get(PREFERRED, [])
    found = [t for t in terms if t.get("weight") == 100 and _is_away(t)]
    return {n for t in found for n in t["preference"]["matchFields"][0]["values"]}


def _is_away(term: Mapping[str, Any]) -> bool:
    fields = term.get("preference", {}).get("matchFields") or [{}]
    return len(fields) == 1 and _away(fields[0].get("values", [])) == term
