"""A group's life under the operator (embedded.reliability.run_group_life): scale to zero and
back, evictions, a group stopped during a rollout; nothing but the crash counted, the one group
serving never touched while the other is stopped, and no duplicate or orphan at the end."""

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.reliability import EVICTED, run_group_life
from kimi_operator.k8s.client import Client
from kimi_operator.runner import OperatorThread


def test_a_group_s_life_counts_only_its_failures(
    api: EmbeddedApiServer, client: Client, operator: OperatorThread
) -> None:
    assert operator.failure is None
    report = run_group_life(api, client, timeout_s=60)
    none = {"life-g0": 0, "life-g1": 0}
    for step in ("scaled 2 -> 0 -> 2 (1)", "scaled 2 -> 0 -> 2 (3)", "evicted"):
        assert report.failures[step] == none, step
    assert report.disruptions == [EVICTED]
    assert report.failures["stopped"] == {"life-g0": 0, "life-g1": 1}
    assert report.while_stopped == (1, 1)  # g0 serving, g1 stopped
    assert report.serving_written == []
    assert report.failures["resumed"] == {"life-g0": 0, "life-g1": 1}
    assert (report.duplicates, report.orphans) == (0, 0)
