"""Make before break on an unfit node (docs/maintenance.md): the vocabulary of an evacuation. A TP
group with a pod on a node that is cordoned, tainted or failing (builders/nodes.py says which) is
`affected`; its replacement, a new group the group set makes (group_set.py, which decides every
step), records on its LeaderWorkerSet which group it stands in for (`EVACUATION_ANNOTATION`: the
group, the node, why, since when), so that an operator restarted meanwhile carries on from the
objects.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kimi_operator import group_life
from kimi_operator.builders.nodes import Unfit

# On a replacement's LeaderWorkerSet: the group it stands in for, as JSON (`Record`).
EVACUATION_ANNOTATION = "kimi-operator.io/evacuation"
NO_ROOM = "NoRoomForReplacement"


@dataclass(frozen=True)
class Record:
    """An evacuation, as its replacement records it."""

    group: str
    node: str
    reason: str  # Cordoned, Tainted, NodeCondition
    detail: str
    critical: bool
    since: str

    def text(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True, separators=(",", ":"))


def recorded(group: Mapping[str, Any] | None) -> Record | None:
    """The evacuation a LeaderWorkerSet stands in for (None: none, or not readable)."""
    if group is None:
        return None
    text = ((group.get("metadata") or {}).get("annotations") or {}).get(EVACUATION_ANNOTATION)
    try:
        return Record(**json.loads(text)) if text else None
    except (ValueError, TypeError):
        return None


def affected(
    pods: Sequence[Mapping[str, Any]], unfit: Mapping[str, Unfit]
) -> dict[str, tuple[str, Unfit]]:
    """Each group with a pod (not terminating) on an unfit node: (the node, why); a critical
    node first."""
    out: dict[str, tuple[str, Unfit]] = {}
    for name, found in group_life.by_group(pods).items():
        nodes = sorted(
            {str((p.get("spec") or {}).get("nodeName", "")) for p in found if not _terminating(p)}
            - {""}
        )
        bad = [(n, unfit[n]) for n in nodes if n in unfit]
        if bad:
            out[name] = min(bad, key=lambda b: not b[1].critical)
    return out


def _terminating(pod: Mapping[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def marked(children: list[dict[str, Any]], marks: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """The children with each replacement's LeaderWorkerSet recording its evacuation (kept as
    first written: no write while it stands), or the record removed (None: the evacuation is
    over, the replacement a member like any other)."""
    out = []
    for child in children:
        meta = child["metadata"]
        if child["kind"] == "LeaderWorkerSet" and meta["name"] in marks:
            annotations = {
                **meta.get("annotations", {}),
                EVACUATION_ANNOTATION: marks[meta["name"]],
            }
            out.append({**child, "metadata": {**meta, "annotations": annotations}})
        else:
            out.append(child)
    return out
