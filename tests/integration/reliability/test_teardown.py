"""Deletions with each propagation policy while the deployments are held terminating, and
watches gone silent (a connection lost without a reset): the audit of embedded.teardown."""

from kimi_operator.embedded.faults import Fault
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.kubelet import mark_ready
from kimi_operator.embedded.teardown import run_deletions, run_silent_watch
from kimi_operator.k8s.client import Client
from kimi_operator.runner import OperatorThread, RunConfig
from tests.support.cluster import NAME, NS, create, sample, status_of, wait_for
from tests.support.watches import set_watches


def test_deletions_with_every_policy_leave_nothing_behind_and_create_nothing(
    api: EmbeddedApiServer, client: Client, operator: OperatorThread
) -> None:
    report = run_deletions(api, client, deployments=6, settle_s=2.0, timeout_s=60)
    assert report.deletions == {"Foreground": 2, "Orphan": 2, "Background": 2}
    assert report.created_for_terminating == []
    assert report.orphans_with_owner == []
    assert report.orphans_kept == 2 * 5  # every child of the two Orphan deletions
    assert report.left_behind == []
    assert report.after.exact, report.after.summary()
    assert operator.failure is None


def test_a_watch_silent_past_the_inactivity_timeout_is_resumed(
    api: EmbeddedApiServer, client: Client, token: str
) -> None:
    """The LeaderWorkerSet watch goes silent as its group becomes Ready: the operator resumes
    it after the inactivity timeout (1 s here) and reports Ready long before its resync (60 s)."""
    config = RunConfig(
        server=api.url, token=token, resync_interval_s=60, workers=2, watch_inactivity_s=1.0
    )
    with OperatorThread(config):
        create(client, sample())
        api.inject(Fault("GET", "/leaderworkersets", drop_watch=True, silent=True))
        mark_ready(client, NS)
        wait_for(
            lambda: status_of(client, NS, NAME).get("readyReplicas") == 1,
            20,
            "the group's readiness, seen through the resumed watch",
        )
    assert api.injected().get("watch-silence") == 1


def test_deployments_created_while_the_watch_is_silent_converge_once_it_is_resumed(
    api: EmbeddedApiServer, client: Client, token: str
) -> None:
    """`run_silent_watch` as benchmarks/reliability.py runs it, on an operator whose inactivity
    timeout is 1 s (bookmarks every 0.3 s keep its quiet watches alive, as every minute does for
    70 s in a cluster) and whose resync (60 s) cannot find new deployments: only the resumed
    watch brings them."""
    set_watches(api, bookmark_interval_s=0.3)
    config = RunConfig(
        server=api.url, token=token, resync_interval_s=60, workers=2, watch_inactivity_s=1.0
    )
    with OperatorThread(config) as operator:
        report = run_silent_watch(api, client, deployments=3, timeout_s=60)
    assert (report.silenced, report.deployments) == (1, 3)
    assert report.resumed >= 1
    assert report.converged.exact, report.converged.summary()
    assert operator.failure is None
