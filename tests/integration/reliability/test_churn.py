"""Deployments created, updated and deleted in random order by concurrent clients: the final
state is exactly the one they left; the operator's memory over a short soak stays flat."""

import statistics

from kimi_operator.embedded.processes import OperatorProcess
from kimi_operator.embedded.reliability import run_churn
from kimi_operator.k8s.client import Client

SOAK_S = 30.0


def test_churn_converges_and_memory_stays_flat(
    client: Client, operator_process: OperatorProcess
) -> None:
    report = run_churn(
        client,
        deployments=100,
        clients=4,
        seed=8,
        soak_s=SOAK_S,
        operator_pid=lambda: operator_process.pid,
        converge_timeout_s=120,
    )
    assert report.converged > 0
    assert (report.duplicates, report.orphans) == (0, 0)
    assert sum(report.operations.values()) >= 200
    # Flat: the last third of the soak holds no more than the first third, give or take.
    soak = [mb for t, mb in report.rss_mb if t >= report.rss_mb[-1][0] - report.soak_s]
    third = max(1, len(soak) // 3)
    assert statistics.mean(soak[-third:]) <= statistics.mean(soak[:third]) * 1.10 + 5
