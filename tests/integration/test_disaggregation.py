"""spec.prefill against the embedded API server, as the chart's ServiceAccount: both roles' groups
are created, Ready waits for both, each role scales and rolls without touching the other (the
prefill role with a surge group too), going
back to aggregated prunes the prefill groups, and deleting the deployment removes every group."""

from collections.abc import Mapping
from typing import Any

import pytest

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.upstream import CHILD_KINDS, ROUTING_KINDS
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, LEADER_WORKER_SET
from tests.integration.test_rollout import template_writes
from tests.support.cluster import NS, condition, create, reconciled, sample, status_of, wait_for
from tests.support.groups import audited, kubelet

NAME = "k3-pd"
TIMEOUT_S = 60.0
WITH_ROUTING = [*CHILD_KINDS, *ROUTING_KINDS]
pytestmark = pytest.mark.usefixtures("operator")


def _groups(client: Client) -> dict[str, str]:
    """name -> resourceVersion of each LeaderWorkerSet of the deployment."""
    return {
        g["metadata"]["name"]: g["metadata"]["resourceVersion"]
        for g in client.list(LEADER_WORKER_SET, NS)
        if g["metadata"]["labels"].get("app.kubernetes.io/instance") == NAME
    }


def _names(decode: int, prefill: int) -> list[str]:
    return sorted(
        [f"{NAME}-g{i}" for i in range(decode)] + [f"{NAME}-p{i}" for i in range(prefill)]
    )


def _serving(client: Client, decode: int, prefill: int) -> dict[str, Any] | None:
    """The status once exactly these groups exist, all ready, and Ready says so."""
    status = status_of(client, NS, NAME)
    done = (
        sorted(_groups(client)) == _names(decode, prefill)
        and (status.get("readyReplicas"), status.get("prefillReadyReplicas", 0))
        == (decode, prefill)
        and condition(status, "Ready")["status"] == "True"
        and condition(status, "Progressing")["reason"] == "Reconciled"
    )
    return status if done else None


def _edit(client: Client, spec: dict[str, Any], generation: int) -> None:
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": spec})
    wait_for(lambda: reconciled(client, generation, NAME), TIMEOUT_S, f"generation {generation}")


def _prefill_group(group: Mapping[str, Any]) -> bool:
    return str(group["metadata"]["name"]).startswith(f"{NAME}-p")


@pytest.mark.parametrize("installed", [WITH_ROUTING], indirect=True)
def test_create_scale_roll_each_role_switch_back_and_delete(
    api: EmbeddedApiServer, client: Client
) -> None:
    doc = sample()
    doc["metadata"]["name"] = NAME
    doc["spec"] |= {"replicas": 2, "routing": {"mode": "InferencePool"}, "prefill": {}}

    # The decode groups serve, the prefill group does not yet: not Ready.
    with kubelet(api, NS, hold=_prefill_group):
        create(client, doc)

        def decode_only() -> dict[str, Any] | None:
            status = status_of(client, NS, NAME)
            return status if status.get("readyReplicas") == 2 else None

        status = wait_for(decode_only, TIMEOUT_S, "the decode groups ready")
        assert sorted(_groups(client)) == _names(2, 1)
        ready = condition(status, "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "GroupsNotReady")
        assert "0 of 1 prefill groups" in ready["message"]

    with kubelet(api, NS):
        status = wait_for(lambda: _serving(client, 2, 1), TIMEOUT_S, "both roles ready")
        assert (status["replicas"], status["prefillReplicas"]) == (2, 1)
        assert status["gpus"] == 8 * 3
        # The scale subresource's selector: the decode groups' leaders.
        assert "llm-d.ai/role=decode" in status["selector"].split(",")

        # The scale subresource's replicas are the decode groups: the prefill group stays as it is.
        before = _groups(client)
        _edit(client, {"replicas": 3}, 2)
        wait_for(lambda: _serving(client, 3, 1), TIMEOUT_S, "a third decode group")
        assert _groups(client)[f"{NAME}-p0"] == before[f"{NAME}-p0"]

        # spec.prefill.replicas scales the prefill groups alone.
        before = _groups(client)
        _edit(client, {"prefill": {"replicas": 2}}, 3)
        wait_for(lambda: _serving(client, 3, 2), TIMEOUT_S, "a second prefill group")
        assert {n: v for n, v in _groups(client).items() if "-g" in n} == {
            n: v for n, v in before.items() if "-g" in n
        }

        # An edit of the prefill role's flags rolls the prefill groups only.
        mark = api.mark()
        _edit(
            client,
            {"prefill": {"replicas": 2, "engineArgs": ["--max-num-batched-tokens=16384"]}},
            4,
        )
        wait_for(lambda: _serving(client, 3, 2), TIMEOUT_S, "the prefill role rolled")
        assert sorted(set(template_writes(api, mark))) == [f"{NAME}-p0", f"{NAME}-p1"]

        # With maxSurge 1 and maxUnavailable 0 the prefill role has a surge group too: -p2 is
        # made first, both prefill groups keep serving throughout, and -p2 goes at the end.
        audit = audited(api, NAME, role="p")
        audit.armed = True
        mark = api.mark()
        surge = {
            "rollout": {"maxSurge": 1, "maxUnavailable": 0},
            "prefill": {"replicas": 2, "engineArgs": ["--max-num-batched-tokens=32768"]},
        }
        _edit(client, surge, 5)
        wait_for(lambda: _serving(client, 3, 2), TIMEOUT_S, "the prefill role rolled with a surge")
        audit.armed = False
        written = sorted(set(template_writes(api, mark)))
        assert written == [f"{NAME}-p0", f"{NAME}-p1", f"{NAME}-p2"]
        assert audit.least_ready(NAME) == 2
        assert any(f"{NAME}-p2" in step.groups[NAME] for step in audit.steps)
        assert client.get(LEADER_WORKER_SET, NS, f"{NAME}-p2") is None

        # Back to aggregated: the prefill groups are pruned, the groups of spec.replicas rolled
        # (no connector, no role label any more).
        _edit(client, {"prefill": None, "routing": {"mode": "Service"}}, 6)
        status = wait_for(lambda: _serving(client, 3, 0), TIMEOUT_S, "aggregated again")
        assert status["prefillReplicas"] == 0
        for group in client.list(LEADER_WORKER_SET, NS):
            leader = group["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
            assert "llm-d.ai/role" not in leader["metadata"]["labels"]

    client.delete(KIMI_DEPLOYMENT, NS, NAME)
    wait_for(lambda: not _groups(client) or None, TIMEOUT_S, "every group deleted")
