"""Reliability scenarios of decisions the world overtook (issue 37; docs/architecture.md, "Write
rules"): a prune's DELETE held up by the API server while the group it named is made anew
(`run_stale_delete`: refused by its preconditions, the new group survives), and the deployment
holding the turn to move to a new default image deleted in the middle of its move
(`run_holder_deleted`: the next one moves at the next resync, not after a restart). Used by
benchmarks/reliability.py and tests/integration/reliability.
"""

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from kimi_operator.embedded.audit import Audit
from kimi_operator.embedded.faults import Fault
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.processes import wait
from kimi_operator.embedded.reliability import (
    NAMESPACE,
    converge,
    create_all,
    delete_all,
    deployment,
)
from kimi_operator.embedded.timeline import Write
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, LEADER_WORKER_SET

STALE = "stale-delete"
HELD_S = 3.0  # how long the API server holds the prune's DELETE (queueing, a slow etcd)
MOVERS = ("mover-a", "mover-b")
# Their own namespace, and an operator watching only it: the turn is operator-wide, and another
# scenario's deployments (never Ready without kubelets) would take it and keep it.
MOVERS_NAMESPACE = "image-gate"
OLD_IMAGE, NEW_IMAGE = "registry/vllm-kimi:0.33.0", "registry/vllm-kimi:0.33.1"
# An operator watching MOVERS_NAMESPACE with the given default serving image, stopped at the end
# of the block.
Start = Callable[[str], AbstractContextManager[Any]]


@dataclass
class StaleDeleteReport:
    answer: int  # the held-up DELETE's HTTP status (409: refused by its preconditions)
    survived: bool  # the group made anew meanwhile is there still, the same object
    converged: Audit


def _held(api: EmbeddedApiServer, since: int, path: str) -> int | None:
    """The position in the log of writes of the first DELETE of `path` since `since`."""
    for offset, write in enumerate(api.writes(since)):
        if write.method == "DELETE" and write.path.endswith(path):
            return since + offset
    return None


def _answered(api: EmbeddedApiServer, position: int) -> Write | None:
    write = api.writes(position)[0]
    return write if write.code else None


def run_stale_delete(
    api: EmbeddedApiServer, client: Client, *, timeout_s: float
) -> StaleDeleteReport:
    """A deployment of two groups scaled to one: the prune's `DELETE LeaderWorkerSet
    stale-delete-g1` is held by the API server (HELD_S); meanwhile the deployment is scaled
    back to two and the group made anew (as a new leader would). The late DELETE names the old
    group: it must be refused, the new one kept."""
    group = f"{STALE}-g1"
    create_all(client, [deployment(STALE, replicas=2)])
    converge(client, timeout_s)
    mark = api.mark()
    api.inject(Fault("DELETE", f"/leaderworkersets/{group}", delay_s=HELD_S))
    client.patch(KIMI_DEPLOYMENT, NAMESPACE, STALE, {"spec": {"replicas": 1}})
    path = f"/leaderworkersets/{group}"
    held = wait(lambda: _held(api, mark, path), timeout_s, "the prune's DELETE")
    client.patch(KIMI_DEPLOYMENT, NAMESPACE, STALE, {"spec": {"replicas": 2}})
    old = client.get(LEADER_WORKER_SET, NAMESPACE, group)
    assert old is not None  # held: not deleted yet
    client.delete(LEADER_WORKER_SET, NAMESPACE, group)
    client.create_if_absent(LEADER_WORKER_SET, _anew(old))  # or the operator made it first
    made = wait(lambda: client.get(LEADER_WORKER_SET, NAMESPACE, group), timeout_s, "the new group")
    answer = wait(lambda: _answered(api, held), timeout_s, "the held DELETE's answer")
    now = client.get(LEADER_WORKER_SET, NAMESPACE, group)
    survived = now is not None and now["metadata"]["uid"] == made["metadata"]["uid"]
    converged = converge(client, timeout_s)
    delete_all(client, [STALE])
    return StaleDeleteReport(answer=answer.code, survived=survived, converged=converged)


def _anew(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` as it is created again under its name: a new object (uid, resourceVersion)."""
    meta = obj["metadata"]
    kept = ("name", "namespace", "labels", "annotations", "ownerReferences")
    fresh = {key: value for key, value in obj.items() if key != "status"}
    fresh["metadata"] = {key: meta[key] for key in kept if key in meta}
    return fresh


@dataclass
class HolderDeletedReport:
    holder: str  # the deployment moving to the new default, deleted mid-move
    waiter: str  # the one waiting for its turn meanwhile
    moved_after_s: float  # from the holder's deletion until the waiter moved


def _images(client: Client, name: str) -> tuple[str, str]:
    """(image, pendingImage) as the deployment's status says: pending, it waits for its turn."""
    found = client.get(KIMI_DEPLOYMENT, MOVERS_NAMESPACE, name) or {}
    status = found.get("status") or {}
    return str(status.get("image", "")), str(status.get("pendingImage", ""))


def run_holder_deleted(client: Client, start: Start, *, timeout_s: float) -> HolderDeletedReport:
    """Two deployments on OLD_IMAGE; the operator upgraded to NEW_IMAGE: one takes the turn and
    rolls (its new group never gets ready here, so it keeps the turn), the other waits. The
    holder is deleted: the waiter must move without an operator restart."""
    create_all(client, [deployment(name, MOVERS_NAMESPACE) for name in MOVERS])
    with start(OLD_IMAGE):
        wait(
            lambda: all(_images(client, n)[0] == OLD_IMAGE for n in MOVERS),
            timeout_s,
            "both deployments on the old default",
            not_yet=(ApiError,),
        )
    with start(NEW_IMAGE):
        waiter = wait(
            lambda: next((n for n in MOVERS if _images(client, n)[1] == NEW_IMAGE), None),
            timeout_s,
            "one deployment waiting for its turn",
            not_yet=(ApiError,),
        )
        holder = next(name for name in MOVERS if name != waiter)
        deleted = time.monotonic()
        client.delete(KIMI_DEPLOYMENT, MOVERS_NAMESPACE, holder)
        wait(
            lambda: _images(client, waiter) == (NEW_IMAGE, ""),
            timeout_s,
            f"{waiter} to move once {holder} was deleted",
            not_yet=(ApiError,),
        )
        moved_after_s = time.monotonic() - deleted
        client.delete(KIMI_DEPLOYMENT, MOVERS_NAMESPACE, waiter)
    return HolderDeletedReport(holder=holder, waiter=waiter, moved_after_s=moved_after_s)
