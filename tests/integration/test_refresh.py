"""Children's status changes reach the deployment at once, not at the next resync."""

from collections.abc import Iterator

import pytest

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.kubelet import mark_ready
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import LEADER_WORKER_SET
from kimi_operator.runner import OperatorThread, RunConfig
from tests.support.cluster import NAME, NS, children, condition, create, sample, status_of, wait_for


@pytest.fixture
def slow_resync(api: EmbeddedApiServer, token: str) -> Iterator[OperatorThread]:
    config = RunConfig(server=api.url, token=token, resync_interval_s=3600, workers=4)
    with OperatorThread(config) as op:
        yield op


@pytest.mark.usefixtures("slow_resync")
def test_readiness_and_deletions_are_seen_without_a_resync(client: Client) -> None:
    create(client, sample())
    mark_ready(client, NS)
    # Each child's event refreshes at once: Ready may come from the LeaderWorkerSet's before
    # the ComputeDomain is marked, MNNVLReady then from the ComputeDomain's.
    wait_for(
        lambda: all(
            condition(status_of(client, NS, NAME), kind)["status"] == "True"
            for kind in ("Ready", "MNNVLReady")
        ),
        timeout=30,  # far below the resync (3600 s): only the event can do it
        what="Ready and MNNVLReady from the LeaderWorkerSet's and ComputeDomain's events",
    )
    client.delete(LEADER_WORKER_SET, NS, f"{NAME}-g0")
    wait_for(
        lambda: f"LeaderWorkerSet/{NAME}-g0" in children(client),
        timeout=30,  # far below the resync (3600 s): only the event can do it
        what="the deleted group restored from its DELETED event",
    )
