"""A deposed leader writes nothing: two `kimi-operator run --leader-elect` processes, the leader
frozen (SIGSTOP, as a long pause or a partition does) in the middle of a burst of creates, the
standby takes the Lease and converges everything, then the old leader wakes (SIGCONT). Its
writes are fenced, and it exits (code 3): what reaches the API server but to the Lease is at most
the one request each worker had already passed the fence with when it froze (the fence is asked
right before a request is sent, but a process can be stopped between the answer and the send; no
client closes that window, client-go's leader election neither: docs/architecture.md). Unfenced,
its workers went on reconciling on waking: 75 writes in a burst of 120."""

import pytest

from kimi_operator.embedded.chart import NAMESPACE as RELEASE_NAMESPACE
from kimi_operator.embedded.chart import operator_identity
from kimi_operator.embedded.server import EmbeddedApiServer
from kimi_operator.embedded.teardown import EXIT_LEADERSHIP_LOST, run_frozen_leader
from kimi_operator.k8s.client import Client

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)

ARGS = [
    "--leader-elect",
    f"--leader-elect-resource-namespace={RELEASE_NAMESPACE}",
    "--leader-elect-resource-name=kimi-kimi-operator",  # the chart's: its Role names it
    "--leader-elect-lease-duration=3",
    "--leader-elect-renew-deadline=2",
    "--leader-elect-retry-period=0.5",
    "--resync-interval=2",
    "--workers=4",
]
WORKERS = 4


def test_a_frozen_leader_that_wakes_up_writes_nothing_but_to_the_lease(
    api: EmbeddedApiServer, client: Client
) -> None:
    report = run_frozen_leader(
        api, client, ARGS, token=operator_identity(api), burst=40, timeout_s=60
    )
    assert len(report.writes_after_wake) <= WORKERS, report.writes_after_wake
    assert report.exit_code == EXIT_LEADERSHIP_LOST
    assert report.converged.exact, report.converged.summary()
