"""A new operator default image (`helm upgrade --set servingImage.tag=...`) reaches the
deployments that follow it one deployment at a time, each group by group; a pinned one stays."""

from functools import partial
from typing import Any

import pytest

from kimi_operator.builders import OperatorDefaults
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT
from kimi_operator.runner import OperatorThread, RunConfig
from tests.integration.conftest import metrics_of, resyncs
from tests.support.cluster import condition, sample, status_of, wait_for
from tests.support.groups import Step, audited, kubelet

NS = "inference"
OLD, NEW = "registry/vllm-kimi:0.33.0", "registry/vllm-kimi:0.33.1"
FOLLOWING = ("a", "b", "c")
TIMEOUT_S = 90.0
HOLD = "example.com/hold"  # someone else's finalizer: the deployment stays terminating


def operator(api: EmbeddedApiServer, token: str, image: str) -> OperatorThread:
    defaults = OperatorDefaults(serving_image=image)
    config = RunConfig(
        server=api.url, token=token, resync_interval_s=0.5, workers=4, defaults=defaults
    )
    return OperatorThread(config)


def on(client: Client, name: str, image: str) -> dict[str, Any] | None:
    status = status_of(client, NS, name)
    done = (
        status.get("image") == image
        and status.get("updatedReplicas") == status.get("readyReplicas") == 2
        and condition(status, "Progressing")["reason"] == "Reconciled"
    )
    return status if done else None


def moving(step: Step) -> list[str]:
    """The deployments part-way to NEW after this write: some group on it, not all Ready on it."""
    return [
        name
        for name, groups in step.images.items()
        if NEW in groups.values() and (set(groups.values()) != {NEW} or step.ready[name] < 2)
    ]


def test_a_new_default_image_moves_one_deployment_at_a_time(
    api: EmbeddedApiServer,
    client: Client,
    token: str,
) -> None:
    for name in (*FOLLOWING, "pinned"):
        doc = sample()
        doc["metadata"]["name"] = name
        doc["spec"]["replicas"] = 2
        if name == "pinned":
            doc["spec"]["imagePolicy"] = "Pinned"
        client.create(KIMI_DEPLOYMENT, doc)
    audit = audited(api, *FOLLOWING, "pinned")
    with kubelet(api, NS):
        with operator(api, token, OLD):
            for name in (*FOLLOWING, "pinned"):
                wait_for(partial(on, client, name, OLD), TIMEOUT_S, f"{name} on {OLD}")
        status_mark = api.status_mark()
        audit.armed = True
        with operator(api, token, NEW):  # the upgraded operator
            for name in FOLLOWING:
                wait_for(partial(on, client, name, NEW), TIMEOUT_S, f"{name} on {NEW}")
            pinned = status_of(client, NS, "pinned")
    assert max(len(moving(step)) for step in audit.steps) == 1
    assert {name for step in audit.steps for name in moving(step)} == set(FOLLOWING)
    assert min(step.ready[name] for step in audit.steps for name in FOLLOWING) == 1
    waited = {
        name.partition("/")[2]
        for name, status in api.status_writes(status_mark)
        if condition(status, "Progressing")["reason"] == "WaitingForTurn"
    }
    assert len(waited) >= 2  # the others waited for their turn, and the status said so
    assert (pinned["image"], pinned["imageSource"], pinned["pendingImage"]) == (OLD, "Pinned", NEW)
    assert set(audit.steps[-1].images["pinned"].values()) == {OLD}


def waiting(client: Client, name: str) -> bool:
    return condition(status_of(client, NS, name), "Progressing").get("reason") == "WaitingForTurn"


@pytest.mark.parametrize("held", [False, True], ids=["deleted", "held-terminating"])
def test_deleting_the_deployment_that_holds_the_turn_lets_the_next_one_move(
    api: EmbeddedApiServer, client: Client, token: str, held: bool
) -> None:
    """The turn is released with its holder (deleted outright, or held terminating by someone's
    finalizer): the next deployment moves at the next resync, not after an operator restart."""
    for name in ("a", "b"):
        doc = sample()
        doc["metadata"]["name"] = name
        client.create(KIMI_DEPLOYMENT, doc)
    with kubelet(api, NS), operator(api, token, OLD):
        for name in ("a", "b"):
            wait_for(partial(on_one, client, name, OLD), TIMEOUT_S, f"{name} on {OLD}")
    # No kubelet from here: the mover's new group never gets ready, so it keeps the turn.
    with operator(api, token, NEW) as upgraded:
        waiter = wait_for(
            lambda: next((n for n in ("a", "b") if waiting(client, n)), None),
            TIMEOUT_S,
            "one deployment waiting for its turn",
        )
        holder = "b" if waiter == "a" else "a"
        found = client.get(KIMI_DEPLOYMENT, NS, holder)
        assert found is not None
        if held:
            client.patch(KIMI_DEPLOYMENT, NS, holder, {"metadata": {"finalizers": [HOLD]}})
        client.delete(KIMI_DEPLOYMENT, NS, holder)
        uid = found["metadata"]["uid"]
        if held:
            wait_for(
                lambda: (
                    condition(status_of(client, NS, holder), "Progressing").get("reason")
                    == "Terminating"
                ),
                TIMEOUT_S,
                f"{holder}'s Terminating status",
            )
        else:
            wait_for(lambda: uid not in upgraded.controller.known(), TIMEOUT_S, "the drop")
        resyncs(metrics_of(upgraded), count=2)  # the second began after the drop (conftest)
        assert not waiting(client, waiter), status_of(client, NS, waiter)
        status = status_of(client, NS, waiter)
        assert status.get("image") == NEW, status
        if held:
            client.patch(KIMI_DEPLOYMENT, NS, holder, {"metadata": {"finalizers": None}})


def on_one(client: Client, name: str, image: str) -> dict[str, Any] | None:
    status = status_of(client, NS, name)
    ready = status.get("image") == image and status.get("readyReplicas") == 1
    return status if ready and condition(status, "Progressing")["reason"] == "Reconciled" else None
