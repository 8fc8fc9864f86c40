"""Which serving image a deployment with an empty spec.image runs, and the operator-wide rule
that at most one deployment moves to a new default image at a time (docs/rollout.md).

A new default (`helm upgrade --set servingImage.tag=...`) must not restart every deployment at
once: each one keeps the image its status records until it gets its turn, then rolls group by
group; the next one starts once that one has all its groups updated and ready. A deployment
whose new groups never get ready keeps the turn, so a broken default stops at the first one.
"""

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.api.status import ROLLING_REASONS, progressing_reason

Source = Literal["Spec", "OperatorDefault", "Pinned"]


@dataclass(frozen=True)
class ImageChoice:
    image: str
    source: Source
    pending: str = ""  # the operator's default, when it is not `image`
    waiting_for: str = ""  # namespace/name of the deployment moving to `pending` now


def moving(deployment: Mapping[str, Any], image: str) -> bool:
    """Whether a KimiDeployment's status says it is rolling out on the default `image` (one
    being deleted is not: its status is the last it had, and nothing rolls it any more)."""
    if (deployment.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = deployment.get("status") or {}
    following = status.get("imageSource") == "OperatorDefault" and status.get("image") == image
    return following and progressing_reason(status) in ROLLING_REASONS


@dataclass
class DefaultImageGate:
    """The turn to move to a new default image: held by one deployment (uid) at a time."""

    _holder: tuple[str, str] | None = None  # (uid, namespace/name)
    # The namespaces the operator serves (the controller says: Controller.__init__); empty: all.
    _scope: tuple[str, ...] = ()
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Deployments gone (the controller dropped them): a reconcile of one still in flight when it
    # went must not take the turn back, or it would hold it for ever.
    _gone: set[str] = field(default_factory=set)

    def serve(self, namespaces: Sequence[str]) -> None:
        """The namespaces whose deployments may hold the turn (empty: every namespace)."""
        with self._lock:
            self._scope = tuple(namespaces)

    def claim(
        self,
        uid: str,
        label: str,
        image: str,
        list_namespace: Callable[[str | None], list[dict[str, Any]]],
    ) -> str:
        """ "" when `uid` may move to `image` now; else namespace/name of the one moving. Before
        a free turn is given, the deployments of every namespace served are read (`list_namespace`
        of each, or of None: all namespaces): after a restart the turn is wherever a status says
        a move is under way, in whatever namespace, reconciled yet or not."""
        with self._lock:
            if uid in self._gone:
                return ""  # nothing it writes lands any more
            if self._holder is not None and self._holder[0] != uid:
                return self._holder[1]
            for ns in self._scope or (None,):
                for other in list_namespace(ns):
                    meta = other["metadata"]
                    if meta.get("uid") != uid and moving(other, image):
                        self._holder = (meta["uid"], f"{meta['namespace']}/{meta['name']}")
                        return self._holder[1]
            self._holder = (uid, label)
            return ""

    def hold(self, uid: str, label: str) -> None:
        """`uid` is moving (its status says so, e.g. after a restart): the turn is its."""
        with self._lock:
            if self._holder is None and uid not in self._gone:
                self._holder = (uid, label)

    def forget(self, uid: str) -> None:
        """`uid` is gone or being deleted: its turn goes to the next deployment, and it never
        takes one again."""
        with self._lock:
            self._gone.add(uid)
            if self._holder is not None and self._holder[0] == uid:
                self._holder = None

    def release(self, uid: str) -> None:
        """`uid` is done moving, or no longer follows the default, or is being deleted or gone
        (reconcile.reconcile and the controller's drop of a deleted deployment release it)."""
        with self._lock:
            if self._holder is not None and self._holder[0] == uid:
                self._holder = None


def choose(
    kd: KimiDeployment,
    old: Mapping[str, Any],
    running: str,
    default: str,
    *,
    ask_turn: Callable[[], str],
) -> ImageChoice:
    """`old`: the last status; `running`: the image a group of it runs now ("" if none), for a
    deployment whose status records none yet (reconciled before images were recorded);
    `ask_turn`: DefaultImageGate.claim for this deployment."""
    if kd.spec.image:
        return ImageChoice(kd.spec.image, "Spec")
    recorded = str(old.get("image", "")) if old.get("imageSource") != "Spec" else ""
    if not old.get("imageSource"):
        recorded = running
    pinned = kd.spec.image_policy == "Pinned"
    if not recorded or recorded == default:
        return ImageChoice(default, "Pinned" if pinned else "OperatorDefault")
    if pinned:
        return ImageChoice(recorded, "Pinned", pending=default)
    mover = ask_turn()
    if mover:
        return ImageChoice(recorded, "OperatorDefault", pending=default, waiting_for=mover)
    return ImageChoice(default, "OperatorDefault")
