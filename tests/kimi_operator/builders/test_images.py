"""Which image a deployment without spec.image runs, and one deployment at a time moving to a new
operator default."""

from typing import Any

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders.images import DefaultImageGate, ImageChoice, choose, moving
from tests.support.specs import edited

OLD, NEW = "registry/vllm-kimi:0.33.0", "registry/vllm-kimi:0.33.1"


def deployment(**spec: Any) -> KimiDeployment:
    return KimiDeployment.model_validate(edited({f"spec.{k}": v for k, v in spec.items()}))


def on(image: str, source: str = "OperatorDefault") -> dict[str, Any]:
    return {"image": image, "imageSource": source}


def never() -> str:
    raise AssertionError("no turn is needed")


def test_spec_image_and_a_new_deployment_need_no_turn() -> None:
    assert choose(deployment(image="mine:1"), on(OLD), "", NEW, ask_turn=never) == ImageChoice(
        "mine:1", "Spec"
    )
    assert choose(deployment(), {}, "", NEW, ask_turn=never) == ImageChoice(NEW, "OperatorDefault")
    # spec.image removed by the user: their own change, no turn to wait for.
    assert choose(deployment(), on("mine:1", "Spec"), "", NEW, ask_turn=never).image == NEW


def test_a_new_default_waits_for_the_turn() -> None:
    waiting = choose(deployment(), on(OLD), "", NEW, ask_turn=lambda: "inference/other")
    assert waiting == ImageChoice(OLD, "OperatorDefault", NEW, "inference/other")
    assert choose(deployment(), on(OLD), "", NEW, ask_turn=lambda: "").image == NEW


def test_pinned_stays() -> None:
    pinned = choose(deployment(imagePolicy="Pinned"), on(OLD), "", NEW, ask_turn=never)
    assert pinned == ImageChoice(OLD, "Pinned", pending=NEW)
    assert choose(deployment(imagePolicy="Pinned"), {}, "", NEW, ask_turn=never) == ImageChoice(
        NEW, "Pinned"
    )


def test_a_status_from_before_images_were_recorded_reads_the_group() -> None:
    """An operator upgrade that brings a new default: the running groups' image is kept."""
    old_status: dict[str, Any] = {"conditions": []}
    assert choose(deployment(), old_status, OLD, NEW, ask_turn=lambda: "x/y").image == OLD


def kd(uid: str, name: str, image: str, reason: str) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "namespace": "inference", "name": name},
        "status": {
            **on(image),
            "conditions": [{"type": "Progressing", "status": "True", "reason": reason}],
        },
    }


def test_the_turn_is_one_deployment_at_a_time() -> None:
    gate = DefaultImageGate()
    stored: list[dict[str, Any]] = []
    assert gate.claim("a", "inference/a", NEW, lambda _: stored) == ""
    assert gate.claim("b", "inference/b", NEW, lambda _: stored) == "inference/a"
    assert gate.claim("a", "inference/a", NEW, lambda _: stored) == ""
    gate.release("b")  # not the holder: nothing changes
    assert gate.claim("b", "inference/b", NEW, lambda _: stored) == "inference/a"
    gate.release("a")
    assert gate.claim("b", "inference/b", NEW, lambda _: stored) == ""


def test_a_deployment_gone_never_takes_the_turn_back() -> None:
    """A race once (seen as a flaky test_default_image): the holder's reconcile in flight when
    the deployment was deleted took the turn back after the controller released it, and held
    it for ever (nothing reconciles a deployment gone)."""
    gate = DefaultImageGate()
    stored: list[dict[str, Any]] = []
    assert gate.claim("a", "inference/a", NEW, lambda _: stored) == ""
    gate.forget("a")
    gate.hold("a", "inference/a")  # its last reconcile, in flight, acting
    assert gate.claim("a", "inference/a", NEW, lambda _: stored) == ""
    assert gate.claim("b", "inference/b", NEW, lambda _: stored) == ""


def test_after_a_restart_the_turn_is_where_a_status_says_a_move_is() -> None:
    stored = [
        kd("a", "a", NEW, "RollingOut"),
        kd("c", "c", NEW, "Reconciled"),  # moved already
        kd("d", "d", OLD, "RollingOut"),  # rolling something else, on the old image
    ]
    assert moving(stored[0], NEW)
    assert not moving(stored[1], NEW)
    assert not moving(stored[2], NEW)
    gate = DefaultImageGate()
    assert gate.claim("b", "inference/b", NEW, lambda _: stored) == "inference/a"
    fresh = DefaultImageGate()
    fresh.hold("a", "inference/a")
    assert fresh.claim("b", "inference/b", NEW, lambda _: []) == "inference/a"


def test_after_a_restart_a_move_in_a_namespace_not_yet_seen_holds_the_turn() -> None:
    """A bug once: the gate read only the namespaces it had seen since the operator started, so
    the first deployment reconciled after a restart took the turn while one of another namespace
    was still moving: two moved at once. The gate now reads every namespace served first."""
    moving_elsewhere = kd("a", "a", NEW, "RollingOut")
    moving_elsewhere["metadata"]["namespace"] = "team-a"
    stored = {"team-a": [moving_elsewhere], "team-b": []}
    asked: list[str | None] = []

    def list_namespace(ns: str | None) -> list[dict[str, Any]]:
        asked.append(ns)
        return [d for where, found in stored.items() if ns in (None, where) for d in found]

    every_namespace = DefaultImageGate()  # the operator serves all namespaces
    assert every_namespace.claim("b", "team-b/b", NEW, list_namespace) == "team-a/a"
    assert asked == [None]
    some = DefaultImageGate()
    some.serve(["team-b", "team-a"])  # the namespaces of a namespaced install
    asked.clear()
    assert some.claim("b", "team-b/b", NEW, list_namespace) == "team-a/a"
    assert asked == ["team-b", "team-a"]
