"""An operator upgrade restarts no group by itself (docs/group-lifecycle.md, "Upgrading the
operator"): the groups an earlier release wrote (fixtures/groups-e337e20.yaml, rendered by the
commit before the kimi-operator.io/routable label) are left on their template under this one, and
say so in the status; a scale leaves them there; an edit of the spec still rolls them, and so
does the roll-template annotation, group by group."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import BY_KIND, KIMI_DEPLOYMENT, LEADER_WORKER_SET
from kimi_operator.rollout import group_ready, leader_image
from kimi_operator.runner import OperatorThread, RunConfig
from kimi_operator.upgrades import INPUTS_ANNOTATION, ROLL_ANNOTATION
from tests.integration.conftest import RESYNC_S, metrics_of, resyncs
from tests.support.cluster import condition, sample, status_of, wait_for
from tests.support.groups import Audit, audited, images, kubelet

NS, NAME = "inference", "k3-tp8-dspark"
GROUPS = [f"{NAME}-g0", f"{NAME}-g1"]
THIRD = f"{NAME}-g2"
OLD, NEW = "registry/vllm-kimi:1", "registry/vllm-kimi:2"
FIXTURE = Path(__file__).parent / "fixtures" / "groups-e337e20.yaml"
TIMEOUT_S = 60.0

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)


def previous_release(client: Client) -> dict[str, dict[str, Any]]:
    """The deployment and its groups as the earlier release left them, every group Ready and the
    status reconciled at the deployment's generation: the groups by name, as stored."""
    doc = sample()
    doc["spec"].update(replicas=2, image=OLD)
    kd = client.create(KIMI_DEPLOYMENT, doc)
    uid = kd["metadata"]["uid"]
    for obj in yaml.safe_load_all(FIXTURE.read_text()):
        (reference,) = obj["metadata"]["ownerReferences"]
        reference["uid"] = uid
        obj["metadata"]["namespace"] = NS
        client.create(BY_KIND[obj["kind"]], obj)
    progressing = {
        "type": "Progressing",
        "status": "False",
        "reason": "Reconciled",
        "message": "all children match the spec",
        "lastTransitionTime": "2026-12-03T17:00:00Z",
    }
    status = {"observedGeneration": kd["metadata"]["generation"], "conditions": [progressing]}
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"status": status}, subresource="status")

    def all_ready() -> dict[str, dict[str, Any]] | None:
        groups = {g["metadata"]["name"]: g for g in client.list(LEADER_WORKER_SET, NS)}
        return groups if all(group_ready(g) for g in groups.values()) else None

    return wait_for(all_ready, TIMEOUT_S, "the previous release's groups Ready")


def template_writes(api: EmbeddedApiServer, since: int) -> list[str]:
    """Names of the LeaderWorkerSets created, changed (status aside) or deleted since `since`."""
    return [
        w.name
        for w in api.writes(since)
        if "/leaderworkersets" in w.path and not w.path.endswith("/status")
    ]


def older_groups(status: dict[str, Any]) -> list[str]:
    return [g["name"] for g in status.get("olderTemplateGroups", [])]


def identity(group: dict[str, Any]) -> tuple[str, int]:
    return group["metadata"]["uid"], group["metadata"]["generation"]


def left_alone(client: Client, operator: OperatorThread) -> dict[str, Any]:
    """The status once this operator has looked at the previous release's groups; no group was
    written or replaced."""

    def named() -> dict[str, Any] | None:
        status = status_of(client, NS, NAME)
        return status if older_groups(status) == GROUPS else None

    wait_for(named, TIMEOUT_S, "the groups on an older template named")
    resyncs(metrics_of(operator), 2)
    return status_of(client, NS, NAME)


def test_an_upgrade_rewrites_no_group_and_a_spec_edit_still_rolls(
    api: EmbeddedApiServer, client: Client, token: str
) -> None:
    with kubelet(api, NS):
        before = previous_release(client)
        mark = api.mark()
        config = RunConfig(server=api.url, token=token, resync_interval_s=RESYNC_S, workers=4)
        with OperatorThread(config) as operator:
            status = left_alone(client, operator)
            assert template_writes(api, mark) == []
            after = {g["metadata"]["name"]: g for g in client.list(LEADER_WORKER_SET, NS)}
            assert {n: identity(g) for n, g in after.items()} == {
                n: identity(g) for n, g in before.items()
            }
            assert (status["updatedReplicas"], status["readyReplicas"]) == (2, 2)
            progressing = condition(status, "Progressing")
            assert (progressing["status"], progressing["reason"]) == ("False", "OlderTemplate")
            assert ROLL_ANNOTATION in progressing["message"]
            assert condition(status, "Ready")["status"] == "True"

            # A scale (a new generation, as an autoscaler's) adds a group and leaves them alone.
            mark = api.mark()
            client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"replicas": 3}})
            wait_for(lambda: scaled(client), TIMEOUT_S, "a third group Ready, the others left")
            resyncs(metrics_of(operator), 2)
            assert template_writes(api, mark) == [THIRD]

            # An edit of the spec rolls every group as before, one at a time, each once.
            audit = audited(api, NAME)
            audit.armed = True
            mark = api.mark()
            client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"image": NEW}})
            wait_for(lambda: rolled(client, NEW, [*GROUPS, THIRD]), TIMEOUT_S, "rolled out")
    assert sorted(template_writes(api, mark)) == [*GROUPS, THIRD]
    assert audit.least_ready(NAME) == 2


def scaled(client: Client) -> dict[str, Any] | None:
    status = status_of(client, NS, NAME)
    generation = client.get(KIMI_DEPLOYMENT, NS, NAME)["metadata"]["generation"]  # type: ignore[index]
    done = (
        status.get("observedGeneration") == generation
        and status.get("readyReplicas") == 3
        and older_groups(status) == GROUPS
    )
    return status if done else None


def rolled(client: Client, image: str, groups: list[str]) -> dict[str, Any] | None:
    status = status_of(client, NS, NAME)
    done = (
        images(client, NS) == dict.fromkeys(groups, image)
        and status.get("updatedReplicas") == status.get("readyReplicas") == len(groups)
        and older_groups(status) == []
        and condition(status, "Progressing")["reason"] == "Reconciled"
    )
    return status if done else None


def test_the_roll_template_annotation_rolls_the_older_groups(
    api: EmbeddedApiServer, client: Client, token: str
) -> None:
    with kubelet(api, NS):
        previous_release(client)
        config = RunConfig(server=api.url, token=token, resync_interval_s=RESYNC_S, workers=4)
        with OperatorThread(config) as operator:
            left_alone(client, operator)
            audit: Audit = audited(api, NAME)
            audit.armed = True
            mark = api.mark()
            patch = {"metadata": {"annotations": {ROLL_ANNOTATION: "1"}}}
            client.patch(KIMI_DEPLOYMENT, NS, NAME, patch)
            wait_for(lambda: rolled(client, OLD, GROUPS), TIMEOUT_S, "rolled to the current one")
            groups = client.list(LEADER_WORKER_SET, NS)
            assert all(INPUTS_ANNOTATION in g["metadata"]["annotations"] for g in groups)
            assert {leader_image(g) for g in groups} == {OLD}
            resyncs(metrics_of(operator), 2)
    assert sorted(template_writes(api, mark)) == GROUPS
    assert audit.least_ready(NAME) == 1
