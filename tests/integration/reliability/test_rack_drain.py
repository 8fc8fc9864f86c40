"""#56: a rack's maintenance under two deployments whose groups share the rack, the operator
SIGKILLed and restarted in the middle (embedded.drains.run_rack_drain): one `kubectl drain` of
every node of the rack completes, no deployment ever has fewer groups serving than it asks for,
each group on the rack is replaced by exactly one start, nothing starts after the uncordon, no
failure is recorded, and no duplicate or orphan is found."""

from kimi_operator.embedded.drains import RACK_REPLICAS, rack_summary, run_rack_drain
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.processes import OperatorProcess
from kimi_operator.k8s.client import Client

RESYNC_S = 2  # the operator_process fixture's --resync-interval


def test_a_rack_drained_under_two_deployments_with_a_restart_in_the_middle(
    api: EmbeddedApiServer, client: Client, operator_process: OperatorProcess
) -> None:
    def restart() -> None:
        operator_process.kill()
        operator_process.start()

    report = run_rack_drain(client, api.url, restart=restart, timeout_s=90, settle_s=3 * RESYNC_S)
    print(rack_summary(report))
    # Mid-drain: once a replacement had started, before the last; the operator started again
    # carried on with the evacuations under way and began the others.
    assert 0 < report.started_before_restart < len(report.groups)
    assert len(report.groups) == sum(RACK_REPLICAS.values())  # every group was on the rack
    assert report.refused > 0  # the budgets held the serving groups until replaced
    assert report.serving_evicted == []
    assert report.fewest_serving == RACK_REPLICAS
    # One start per evacuated group: a replacement each, under a new name, nothing restarted.
    assert len(report.started) == len(report.groups)
    assert len(set(report.started)) == len(report.started)
    assert not set(report.started) & set(report.groups)
    assert report.started_after_uncordon == []
    assert sorted(report.failures.values()) == [0] * sum(RACK_REPLICAS.values())
    assert report.last_failures == []
    assert (report.duplicates, report.orphans) == (0, 0)
