"""The controller against the embedded API server, its queue on a virtual clock: a deletion during
a reconcile leaves nothing behind, nothing cuts a Retry-After short, a reconcile's requeue is
honoured, and children are pruned exactly when some can be there to prune."""

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kimi_operator.api.crd import crd
from kimi_operator.builders import OperatorDefaults
from kimi_operator.controller.loop import Controller
from kimi_operator.controller.metrics import Metrics
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.reliability import NAMESPACE, deployment
from kimi_operator.embedded.upstream import child_crds
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, LEADER_WORKER_SET, SERVICE, Resource
from kimi_operator.reconcile import Outcome, reconcile
from tests.kimi_operator.controller.clock import VirtualClock

INSTANCE = "app.kubernetes.io/instance="


class CountingClient(Client):
    """Counts the lists of Services: pruning lists every child kind, and only pruning lists
    Services (a rollout lists the deployment's LeaderWorkerSets on every reconcile)."""

    lists = 0

    def list(
        self, resource: Resource, namespace: str | None = None, *, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        self.lists += resource == SERVICE
        return super().list(resource, namespace, label_selector=label_selector)


@pytest.fixture(scope="module")
def api() -> Iterator[EmbeddedApiServer]:
    with EmbeddedApiServer() as server:
        server.install_crds([crd(), *child_crds()])
        yield server


@pytest.fixture
def client(api: EmbeddedApiServer) -> CountingClient:
    return CountingClient(load_configuration(api.url))


class Harness:
    """A controller whose reconciles a test can intercept: `before` runs inside the reconcile,
    `after` may replace its outcome."""

    def __init__(self, client: Client) -> None:
        self.clock = VirtualClock()
        self.reasons: list[str] = []
        self.before: Callable[[], None] = lambda: None
        self.after: Callable[[Outcome], Outcome] = lambda outcome: outcome
        self.controller = Controller(
            client, OperatorDefaults(), Metrics(), clock=self.clock, reconcile_fn=self._reconcile
        )

    def _reconcile(self, *args: Any, **kwargs: Any) -> Outcome:
        self.before()
        outcome: Outcome = self.after(reconcile(*args, **kwargs))
        return outcome

    def run_due(self) -> int:
        """Process every key due now (virtual time); how many were processed."""
        n = 0
        while self.controller.process_one(0):
            n += 1
        return n


def created(client: Client, harness: Harness, name: str, **spec: Any) -> dict[str, Any]:
    obj = client.create(KIMI_DEPLOYMENT, deployment(name, **spec))
    harness.controller.observe("ADDED", obj)
    return obj


def assert_forgotten(controller: Controller, uid: str) -> None:
    assert controller.known() == {}
    assert controller.deployments == {}
    assert controller.metrics.deployments_by_condition() == {}
    assert (controller.queue.failures(uid), controller.queue.waiting(uid)) == (0, None)


def test_a_deletion_during_a_reconcile_leaves_nothing_behind(client: CountingClient) -> None:
    """The DELETED event comes while the deployment's reconcile is in flight: once it is done,
    neither what was acted on, the deployments gauge nor a backoff holds it."""
    harness = Harness(client)
    uid = created(client, harness, "racing")["metadata"]["uid"]
    harness.before = lambda: harness.controller.deleted(uid)
    assert harness.run_due() == 2  # the reconcile, then the deletion it held back
    assert_forgotten(harness.controller, uid)


def test_a_deletion_during_a_failing_reconcile_schedules_no_retry(client: CountingClient) -> None:
    harness = Harness(client)
    uid = created(client, harness, "racing-throttled")["metadata"]["uid"]
    harness.before = lambda: harness.controller.deleted(uid)

    def throttled(outcome: Outcome) -> Outcome:
        outcome.error = ApiError("create Service: HTTP 429", code=429, retry_after_s=2.0)
        return outcome

    harness.after = throttled
    assert harness.run_due() == 2
    assert_forgotten(harness.controller, uid)


def test_nothing_cuts_a_retry_after_short(client: CountingClient) -> None:
    """A 429 with Retry-After: 2; meanwhile a child changes, the object is edited (its event
    arrives), and the periodic resync runs. The next reconcile is the retry, 2 s later."""
    harness = Harness(client)
    obj = created(client, harness, "throttled")
    uid = obj["metadata"]["uid"]
    calls = 0

    def throttled_once(outcome: Outcome) -> Outcome:
        nonlocal calls
        calls += 1
        if calls == 1:
            outcome.error = ApiError("create Service: HTTP 429", code=429, retry_after_s=2.0)
        return outcome

    harness.after = throttled_once
    assert harness.run_due() == 1
    controller = harness.controller
    controller.child_changed(uid)
    edited = client.patch(KIMI_DEPLOYMENT, NAMESPACE, "throttled", {"spec": {"replicas": 2}})
    controller.observe("MODIFIED", edited)
    controller.resync()
    harness.clock.advance(1.999)
    assert harness.run_due() == 0
    harness.clock.advance(0.001)
    assert harness.run_due() == 1
    assert calls == 2
    assert controller.queue.failures(uid) == 0  # it succeeded: the backoff starts afresh
    reconciles = controller.metrics.registry.get_sample_value(
        "kimi_operator_reconciles_total", {"trigger": "retry", "result": "reconciled"}
    )
    assert reconciles == 1


def test_failures_in_a_row_double_the_wait(client: CountingClient) -> None:
    harness = Harness(client)
    created(client, harness, "failing")

    def failing(outcome: Outcome) -> Outcome:
        outcome.error = ApiError("create Service: HTTP 500", code=500)
        return outcome

    harness.after = failing
    assert harness.run_due() == 1
    for wait in (1.0, 2.0, 4.0):
        harness.clock.advance(wait - 0.01)
        assert harness.run_due() == 0
        harness.clock.advance(0.01)
        assert harness.run_due() == 1


def test_a_requeue_after_is_honoured(client: CountingClient) -> None:
    harness = Harness(client)
    created(client, harness, "deadline")
    requeues = [30.0, None]

    def deadline(outcome: Outcome) -> Outcome:
        outcome.requeue_after_s = requeues.pop(0)
        return outcome

    harness.after = deadline
    assert harness.run_due() == 1
    harness.clock.advance(29.9)
    assert harness.run_due() == 0
    harness.clock.advance(0.1)
    assert harness.run_due() == 1
    assert requeues == []


def test_children_are_pruned_only_when_some_can_be_there(client: CountingClient) -> None:
    """A new deployment's first reconcile and a refresh at the same generation list nothing; an
    edit, a failure and the periodic resync prune."""
    harness = Harness(client)
    uid = created(client, harness, "prune", replicas=2)["metadata"]["uid"]
    controller = harness.controller

    def lists_when(step: Any) -> int:
        before = client.lists
        step()
        assert harness.run_due() == 1
        return client.lists - before

    assert lists_when(lambda: None) == 0  # created, generation 1: nothing to scale down
    assert lists_when(lambda: controller.child_changed(uid)) == 0
    assert lists_when(controller.resync) > 0
    assert lists_when(lambda: controller.child_changed(uid)) == 0

    def scale_down() -> None:
        edited = client.patch(KIMI_DEPLOYMENT, NAMESPACE, "prune", {"spec": {"replicas": 1}})
        controller.observe("MODIFIED", edited)

    assert lists_when(scale_down) > 0
    assert controller.deployments[uid].pruned == 2
    groups = client.list(LEADER_WORKER_SET, NAMESPACE, label_selector=INSTANCE + "prune")
    assert [g["metadata"]["name"] for g in groups] == ["prune-g0"]

    def fail_once(outcome: Outcome) -> Outcome:
        outcome.error = ApiError("create Service: HTTP 500", code=500)
        harness.after = lambda outcome: outcome
        return outcome

    harness.after = fail_once
    assert lists_when(lambda: controller.child_changed(uid)) == 0
    assert lists_when(lambda: harness.clock.advance(1.0)) > 0  # the retry after the failure


def test_a_child_dropped_without_an_edit_is_pruned_at_once(client: CountingClient) -> None:
    """The prefill autoscaler takes a group away in a reconcile that listed nothing (no edit, no
    resync): the controller reconciles again at once, pruning, not at the next resync."""
    harness = Harness(client)
    uid = created(client, harness, "dropped")["metadata"]["uid"]
    assert harness.run_due() == 1

    def dropped_once(outcome: Outcome) -> Outcome:
        outcome.prune_again = True
        harness.after = lambda outcome: outcome
        return outcome

    harness.after = dropped_once
    harness.controller.child_changed(uid)
    before = client.lists
    assert harness.run_due() == 2  # the reconcile, then the pruning one, with no time passing
    assert client.lists > before
    assert harness.controller.deployments[uid].pruned == 1


def test_a_child_kept_for_its_pods_is_pruned_by_the_next_look(client: CountingClient) -> None:
    """A scale-down's ComputeDomain kept while the group's pods terminate (decide.py, `_prune`):
    the reconcile the outcome's requeue brings prunes again, though the generation is the one
    already pruned at."""
    harness = Harness(client)
    uid = created(client, harness, "awaiting", replicas=2)["metadata"]["uid"]
    controller = harness.controller
    waits = [True, False]

    def awaiting(outcome: Outcome) -> Outcome:
        outcome.prune_later = waits.pop(0)
        outcome.requeue_after_s = 5.0 if outcome.prune_later else None
        return outcome

    harness.after = awaiting
    edited = client.patch(KIMI_DEPLOYMENT, NAMESPACE, "awaiting", {"spec": {"replicas": 1}})
    controller.observe("MODIFIED", edited)
    assert harness.run_due() == 1
    assert controller.deployments[uid].pruned is None
    before = client.lists
    harness.clock.advance(5.0)
    assert harness.run_due() == 1
    assert client.lists > before  # it pruned
    assert controller.deployments[uid].pruned == 2
    assert waits == []


def test_an_edit_before_the_first_status_prunes(client: CountingClient) -> None:
    """Edited (generation 2) before the operator wrote any status: children of generation 1 may
    exist (the churn reliability test found groups left after such a scale-down)."""
    harness = Harness(client)
    obj = client.create(KIMI_DEPLOYMENT, deployment("edited-early", replicas=3))
    edited = client.patch(KIMI_DEPLOYMENT, NAMESPACE, "edited-early", {"spec": {"replicas": 1}})
    assert edited["metadata"]["generation"] == 2
    assert not edited.get("status")
    harness.controller.observe("ADDED", obj)
    harness.controller.observe("MODIFIED", edited)
    before = client.lists
    assert harness.run_due() == 1
    assert client.lists > before


def test_a_deployment_found_gone_is_forgotten(client: CountingClient) -> None:
    """Its DELETED event was lost with a dropped watch: the resync finds it gone and forgets it."""
    harness = Harness(client)
    obj = created(client, harness, "gone")
    uid = obj["metadata"]["uid"]
    assert harness.run_due() == 1
    client.delete(KIMI_DEPLOYMENT, NAMESPACE, "gone")
    harness.controller.resync()
    assert harness.run_due() == 1
    assert_forgotten(harness.controller, uid)


def test_a_deployment_created_again_under_its_name_stays_counted(client: CountingClient) -> None:
    """The new object's reconcile comes before the old one's deletion is processed: the gauge
    still counts the new one."""
    harness = Harness(client)
    old = created(client, harness, "again")["metadata"]["uid"]
    assert harness.run_due() == 1
    client.delete(KIMI_DEPLOYMENT, NAMESPACE, "again")
    new = created(client, harness, "again")["metadata"]["uid"]
    assert harness.run_due() == 1
    harness.controller.deleted(old)
    assert harness.run_due() == 1
    assert list(harness.controller.deployments) == [new]
    assert set(harness.controller.metrics.deployments_by_condition().values()) == {1}


def error_counts(controller: Controller) -> dict[str, float]:
    sample = controller.metrics.registry.get_sample_value
    return {
        kind: sample("kimi_operator_reconcile_errors_total", {"kind": kind}) or 0.0
        for kind in ("temporary", "permanent", "unexpected")
    }


def test_a_bug_is_counted_apart_from_the_api_s_refusals(
    client: CountingClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A 403 is the API refusing (permanent); an exception from our own code is a bug: its own
    kind, logged with its traceback, so that an alert or a test can tell them apart."""
    harness = Harness(client)
    created(client, harness, "refused")

    def forbidden(outcome: Outcome) -> Outcome:
        outcome.error = ApiError("create Service: HTTP 403", code=403)
        return outcome

    harness.after = forbidden
    assert harness.run_due() == 1
    assert error_counts(harness.controller) == {"temporary": 0, "permanent": 1, "unexpected": 0}

    def broken(_: Outcome) -> Outcome:
        raise KeyError("a bug")

    harness.after = broken
    created(client, harness, "buggy")
    assert harness.run_due() == 1
    assert error_counts(harness.controller) == {"temporary": 0, "permanent": 1, "unexpected": 1}
    (record,) = [r for r in caplog.records if "raised unexpectedly" in r.getMessage()]
    assert record.exc_info is not None
    assert record.exc_info[0] is KeyError


def test_a_relist_finds_a_deployment_whose_added_event_was_missed(
    client: CountingClient,
) -> None:
    """The resync revisits known deployments only: one created while the watch was down (no
    ADDED event) is found by the periodic relist, and only that one."""
    harness = Harness(client)
    harness.controller.namespaces = ("relisting",)  # the module's server holds others' too
    announced = client.create(KIMI_DEPLOYMENT, deployment("announced", "relisting"))
    harness.controller.observe("ADDED", announced)
    assert harness.run_due() == 1
    missed = client.create(KIMI_DEPLOYMENT, deployment("missed", "relisting"))
    assert harness.controller.relist() == 1
    assert missed["metadata"]["uid"] in harness.controller.known()
    assert harness.run_due() == 1
    assert client.get(SERVICE, "relisting", "missed") is not None
    assert harness.controller.relist() == 0


def test_a_status_write_overtaken_by_another_status_write_is_made_again(
    client: CountingClient,
) -> None:
    """The status is conditional on the version it was made from: after a write that changed
    only the status (the same generation), it is written again on the fresh version; after an
    edit, the 409 stands and the retry reconciles the new spec."""
    harness = Harness(client)
    uid = created(client, harness, "overtaken")["metadata"]["uid"]
    overtake = {"status": {"observedGeneration": 0}}

    def overtaken() -> None:
        client.patch(KIMI_DEPLOYMENT, NAMESPACE, "overtaken", overtake, subresource="status")

    harness.before = overtaken
    assert harness.run_due() == 1
    found = client.get(KIMI_DEPLOYMENT, NAMESPACE, "overtaken")
    assert found is not None
    assert found["status"]["observedGeneration"] == 1  # the reconcile's status, not the other
    assert harness.controller.queue.failures(uid) == 0
    # A status to write again (read as 0), and an edit while the reconcile runs.
    client.patch(KIMI_DEPLOYMENT, NAMESPACE, "overtaken", overtake, subresource="status")

    def edited() -> None:
        client.patch(KIMI_DEPLOYMENT, NAMESPACE, "overtaken", {"spec": {"replicas": 2}})

    harness.before = edited
    harness.controller.resync()
    assert harness.run_due() == 1
    assert harness.controller.queue.failures(uid) == 1  # refused: the spec it described is gone


def test_the_image_gate_reads_the_namespaces_the_controller_serves(
    client: CountingClient,
) -> None:
    """The default-image turn is given knowing every namespace served (builders/images.py), not
    only those reconciled since the start."""
    defaults = OperatorDefaults()
    Controller(client, defaults, Metrics(), namespaces=["team-a", "team-b"])
    asked: list[str | None] = []

    def listed(ns: str | None) -> list[dict[str, Any]]:
        asked.append(ns)
        return []

    assert defaults.image_gate.claim("uid", "team-b/b", "image:1", listed) == ""
    assert asked == ["team-a", "team-b"]
