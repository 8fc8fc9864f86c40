"""Nodes under the groups of three deployments cordoned and drained as `kubectl drain` does, one
at a time and two at once, then uncordoned (embedded.drains.run_drains): every drain completes,
no pod of a serving group is evicted, a replacement is begun for each group drained, no
deployment has fewer groups serving than it asks for (so never none) nor more than one surge
group, no failure is recorded, and no duplicate or
orphan is found."""

from kimi_operator.embedded.drains import NAMESPACE, REPLICAS, run_drains, summary
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import EVENT
from kimi_operator.runner import OperatorThread


def test_drained_nodes_leave_every_deployment_serving_and_nothing_behind(
    api: EmbeddedApiServer, client: Client, operator: OperatorThread
) -> None:
    report = run_drains(client, api.url, timeout_s=30)  # raises if a drain does not end
    print(summary(report))
    assert [[d.groups for d in round_] for round_ in report.rounds] == [
        [["drain-a-g0"]],
        [["drain-b-g0"], ["drain-c-g1"]],
        [["drain-a-g1"]],  # the first round's replacement, a member like any
    ]
    assert sum(d.refused for d in report.drains) > 0  # the budgets held the serving groups
    assert report.serving_evicted == []
    # Make before break: never fewer groups serving than spec.replicas, so never none, and a
    # replacement begun for each group drained (its Event). At most one surge group at a time;
    # how many are seen together is sampled between steps (the operator may delete a group
    # between the step that readied its replacement and the count).
    assert report.fewest_serving == REPLICAS
    assert all(report.most_groups[name] <= n + 1 for name, n in REPLICAS.items())
    started = [
        e["involvedObject"]["name"]
        for e in client.list(EVENT, NAMESPACE)
        for _ in range(e.get("count") or 1)
        if e.get("reason") == "EvacuationStarted"
    ]
    assert sorted(started) == ["drain-a", "drain-a", "drain-b", "drain-c"]
    # Every group there at the end (replacements among them: names are identities) failed never.
    assert sorted(report.failures.values()) == [0] * sum(REPLICAS.values())
    assert report.last_failures == []
    assert (report.duplicates, report.orphans) == (0, 0)
    assert operator.failure is None
