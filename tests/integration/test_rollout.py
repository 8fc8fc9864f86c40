"""A pod template change rolls through the TP groups one at a time (docs/rollout.md), checked
after every write the embedded API server takes; also with `kimi-operator run` killed (SIGKILL)
in the middle of it and started again."""

import threading
from collections.abc import Mapping
from typing import Any

import pytest

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.processes import OperatorProcess
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, LEADER_WORKER_SET
from kimi_operator.rollout import leader_image
from tests.integration.conftest import resyncs
from tests.support.cluster import condition, sample, status_of, wait_for
from tests.support.groups import Audit, audited, images, kubelet

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)

NS, NAME = "inference", "k3-tp8-dspark"
GROUPS = [f"{NAME}-g{i}" for i in range(3)]
TIMEOUT_S = 60.0
NEW = "registry/vllm-kimi:2"


def create(client: Client, rollout: dict[str, Any] | None = None) -> None:
    doc = sample()
    doc["spec"].update(replicas=3, image="registry/vllm-kimi:1")
    if rollout:
        doc["spec"]["rollout"] = rollout
    client.create(KIMI_DEPLOYMENT, doc)


def settled(client: Client, image: str) -> dict[str, Any] | None:
    status = status_of(client, NS, NAME)
    done = (
        images(client, NS) == dict.fromkeys(GROUPS, image)
        and status.get("updatedReplicas") == status.get("readyReplicas") == 3
        and condition(status, "Progressing")["reason"] == "Reconciled"
    )
    return status if done else None


def template_writes(server: EmbeddedApiServer, since: int) -> list[str]:
    """Names of the LeaderWorkerSets created or changed (not their status) since `since`."""
    return [
        w.name
        for w in server.writes(since)
        if "/leaderworkersets" in w.path and not w.path.endswith("/status") and w.method != "DELETE"
    ]


def roll(api: EmbeddedApiServer, client: Client, audit: Audit, image: str) -> list[str]:
    """Change the image once all groups are Ready; the template writes until it settled."""
    wait_for(lambda: settled(client, "registry/vllm-kimi:1"), TIMEOUT_S, "first groups ready")
    mark, status_mark = api.mark(), api.status_mark()
    audit.armed = True
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"image": image}})
    wait_for(lambda: settled(client, image), TIMEOUT_S, "rolled out")
    messages = {
        c["message"]
        for _, s in api.status_writes(status_mark)
        for c in s.get("conditions", [])
        if c["reason"] == "RollingOut"
    }
    assert "2 of 3 groups updated" in messages
    return template_writes(api, mark)


@pytest.mark.usefixtures("operator")
def test_an_image_change_rolls_one_group_at_a_time(
    api: EmbeddedApiServer,
    client: Client,
) -> None:
    audit = audited(api, NAME)
    create(client)
    with kubelet(api, NS):
        written = roll(api, client, audit, NEW)
    assert sorted(written) == GROUPS  # each group rewritten once
    assert audit.least_ready(NAME) == 2  # replicas - maxUnavailable, never fewer
    assert all(step.groups[NAME] == set(GROUPS) for step in audit.steps)


@pytest.mark.usefixtures("operator")
def test_with_a_surge_group_every_group_keeps_serving(
    api: EmbeddedApiServer,
    client: Client,
) -> None:
    audit = audited(api, NAME)
    create(client, {"maxSurge": 1, "maxUnavailable": 0})
    with kubelet(api, NS):
        written = roll(api, client, audit, NEW)
    spare = f"{NAME}-g3"
    assert sorted(written) == sorted([*GROUPS, spare])
    assert audit.least_ready(NAME) == 3
    assert any(spare in step.groups[NAME] for step in audit.steps)
    assert client.get(LEADER_WORKER_SET, NS, spare) is None  # retired at the end


@pytest.mark.usefixtures("operator")
def test_a_group_never_ready_stops_the_rollout(
    api: EmbeddedApiServer,
    client: Client,
) -> None:
    create(client, {"progressDeadlineSeconds": 2})
    bad = "registry/vllm-kimi:broken"
    with kubelet(api, NS, hold=lambda g: "broken" in str(g)):
        wait_for(lambda: settled(client, "registry/vllm-kimi:1"), TIMEOUT_S, "first groups")
        client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"image": bad}})

        def stalled() -> dict[str, Any] | None:
            status = status_of(client, NS, NAME)
            return status if condition(status, "Degraded")["reason"] == "RolloutStalled" else None

        status = wait_for(stalled, TIMEOUT_S, "RolloutStalled")
        assert condition(status, "Degraded")["status"] == "True"
        assert (
            f"{NAME}-g0 not Ready within spec.rollout.progressDeadlineSeconds (2 s)"
            in (condition(status, "Degraded")["message"])
        )
        assert condition(status, "Progressing")["reason"] == "RolloutStalled"
        assert (status["updatedReplicas"], status["readyReplicas"]) == (1, 2)
        assert images(client, NS) == {
            GROUPS[0]: bad,
            GROUPS[1]: "registry/vllm-kimi:1",
            GROUPS[2]: "registry/vllm-kimi:1",
        }
        # A fixed image continues from there.
        client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"image": "registry/vllm-kimi:3"}})
        status = wait_for(lambda: settled(client, "registry/vllm-kimi:3"), TIMEOUT_S, "fixed")
    assert condition(status, "Degraded")["status"] == "False"


@pytest.mark.usefixtures("operator")
def test_a_change_outside_the_pod_template_touches_no_group(
    api: EmbeddedApiServer,
    client: Client,
) -> None:
    create(client)
    with kubelet(api, NS):
        wait_for(lambda: settled(client, "registry/vllm-kimi:1"), TIMEOUT_S, "first groups")
        mark = api.mark()
        client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"monitoring": {"interval": "30s"}}})
        generation = client.get(KIMI_DEPLOYMENT, NS, NAME)["metadata"]["generation"]  # type: ignore[index]
        wait_for(
            lambda: status_of(client, NS, NAME).get("observedGeneration") == generation,
            TIMEOUT_S,
            "the change acted on",
        )
    assert template_writes(api, mark) == []
    assert any(w.path.endswith(f"/podmonitors/{NAME}") for w in api.writes(mark))


def test_killed_mid_rollout_resumes_without_a_duplicate(
    api: EmbeddedApiServer,
    client: Client,
    token: str,
) -> None:
    audit = audited(api, NAME)
    started = threading.Event()  # the new template's groups may get Ready

    def hold(group: Mapping[str, Any]) -> bool:
        return leader_image(group) == NEW and not started.is_set()

    operator = OperatorProcess(api.url, ["--resync-interval=1", "--workers=4"], token=token)
    create(client)
    with operator, kubelet(api, NS, hold=hold):
        wait_for(lambda: settled(client, "registry/vllm-kimi:1"), TIMEOUT_S, "first groups")
        mark = api.mark()
        audit.armed = True
        client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"image": NEW}})
        wait_for(lambda: images(client, NS)[GROUPS[0]] == NEW, TIMEOUT_S, "g0 rewritten")
        operator.kill()
        operator.start()
        resyncs(operator.metrics, 2)  # of the restarted operator, with g0 still starting
        assert images(client, NS)[GROUPS[1]] == images(client, NS)[GROUPS[2]] != NEW
        started.set()
        wait_for(lambda: settled(client, NEW), TIMEOUT_S, "rolled out after the restart")
    assert sorted(template_writes(api, mark)) == GROUPS
    assert audit.least_ready(NAME) == 2
    assert all(step.groups[NAME] == set(GROUPS) for step in audit.steps)
