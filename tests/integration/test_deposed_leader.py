"""A deposed leader writes nothing: two `kimi-operator run --leader-elect` processes, the leader
frozen (SIGSTOP, as a long pause or a partition does) in the middle of a burst of creates, the
standby takes the Lease and converges everything, then the old leader wakes (SIGCONT). Its
writes are fenced: none reaches the API server but to the Lease, and it exits (code 3)."""

import signal
import subprocess

from kimi_operator.embedded.chart import NAMESPACE as RELEASE_NAMESPACE
from kimi_operator.embedded.chart import operator_identity
from kimi_operator.embedded.processes import OperatorProcess, metric_total, wait
from kimi_operator.embedded.reliability import converge, create_all, deployment
from kimi_operator.embedded.server import EmbeddedApiServer
from kimi_operator.k8s.client import Client

BURST = 40
LEASE = ["--leader-elect-lease-duration=3", "--leader-elect-renew-deadline=2"]
ARGS = [
    "--leader-elect",
    f"--leader-elect-resource-namespace={RELEASE_NAMESPACE}",
    "--leader-elect-resource-name=kimi-kimi-operator",  # the chart's: its Role names it
    *LEASE,
    "--leader-elect-retry-period=0.5",
    "--resync-interval=2",
    "--workers=4",
]
EXIT_LEADERSHIP_LOST = 3


def leads(operator: OperatorProcess) -> bool:
    return metric_total(operator.metrics(), "kimi_operator_leader") == 1


def test_a_frozen_leader_that_wakes_up_writes_nothing_but_to_the_lease(
    api: EmbeddedApiServer, client: Client
) -> None:
    token = operator_identity(api)
    first = OperatorProcess(api.url, ARGS, token=token, stderr=subprocess.DEVNULL)
    second = OperatorProcess(api.url, ARGS, token=token, stderr=subprocess.DEVNULL)
    with first:
        wait(lambda: leads(first), 30, "the first replica to lead")
        with second:
            docs = [deployment(f"burst-{i}") for i in range(BURST)]
            create_all(client, docs[: BURST // 2])
            wait(lambda: len(api.writes()) > BURST, 30, "the leader to be writing")
            first.process.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
            create_all(client, docs[BURST // 2 :])
            wait(lambda: leads(second), 30, "the standby to take the Lease over")
            report = converge(client, 60)
            assert report.exact, report.summary()
            woken = api.mark()
            first.process.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
            code = first.process.wait(timeout=30)  # type: ignore[union-attr]
            assert code == EXIT_LEADERSHIP_LOST
            writes = [f"{w.method} {w.path}" for w in api.writes(woken)]
            assert [w for w in writes if "/leases/" not in w] == []
            assert converge(client, 10).exact
