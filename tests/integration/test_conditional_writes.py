"""Every write decided from a read is conditional on that read (docs/architecture.md, "Write
rules"): a DELETE carries the `preconditions` (uid, resourceVersion) of the object the plan
decided on, so a late one (a deposed leader's, a reconcile that stalled) is refused by the API
server rather than destroying what was made or joined since."""

from collections.abc import Mapping
from typing import Any

import pytest

from kimi_operator import caches
from kimi_operator import reconcile as reconcile_module
from kimi_operator.builders import OperatorDefaults
from kimi_operator.builders.lifecycle import SHARED_CLAIM
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.k8s.apply import perform
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.merge import Applied, owner_reference, preconditions
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, LEADER_WORKER_SET, PERSISTENT_VOLUME_CLAIM
from kimi_operator.reconcile import reconcile
from kimi_operator.reconcile.decide import Decision, Observed
from tests.support.cluster import sample

NS, NAME = "inference", "k3-tp8-dspark"
GROUP = f"{NAME}-g1"


def reconcile_once(client: Client) -> None:
    body = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert body is not None
    outcome = reconcile(body, client, OperatorDefaults(), spec_changed=True, now="now")
    assert outcome.error is None
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"status": outcome.status}, subresource="status")


def made_anew(client: Client, obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` deleted and created again under its name (a new uid), as a new leader does."""
    meta = obj["metadata"]
    assert client.delete(LEADER_WORKER_SET, NS, meta["name"])
    kept = ("name", "namespace", "labels", "annotations", "ownerReferences")
    fresh = {**obj, "metadata": {key: meta[key] for key in kept if key in meta}}
    fresh.pop("status", None)
    return client.create(LEADER_WORKER_SET, fresh)


def test_a_stale_prune_is_refused_and_the_recreated_group_survives(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37's scenario: scale 2 -> 1, the plan decides `DELETE LeaderWorkerSet k3-g1` and
    stalls before sending it; meanwhile a new leader scales back to 2 and makes a new `k3-g1`.
    The late DELETE names the old group: refused with 409, the new group untouched."""
    doc = sample()
    doc["spec"]["replicas"] = 2
    client.create(KIMI_DEPLOYMENT, doc)
    reconcile_once(client)
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"replicas": 1}})
    made: list[dict[str, Any]] = []
    decide = reconcile_module.decide  # type: ignore[attr-defined]  # what `reconcile` calls

    def stalled(observed: Observed, defaults: OperatorDefaults, **kwargs: Any) -> Decision:
        decision = decide(observed, defaults, **kwargs)
        assert any(w.name == GROUP and w.verb == "delete" for w in decision.delete)
        if not made:  # while this plan waits to be sent, the group is made anew
            group = client.get(LEADER_WORKER_SET, NS, GROUP)
            assert group is not None
            made.append(made_anew(client, group))
        return decision

    monkeypatch.setattr(reconcile_module, "decide", stalled)
    body = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert body is not None
    outcome = reconcile(body, client, OperatorDefaults(), spec_changed=True, now="now")
    assert isinstance(outcome.error, ApiError)
    assert outcome.error.code == 409
    assert "The object might have been deleted and then recreated" in str(outcome.error)
    survivor = client.get(LEADER_WORKER_SET, NS, GROUP)
    assert survivor is not None
    assert survivor["metadata"]["uid"] == made[0]["metadata"]["uid"]


def test_two_deployments_racing_to_create_the_namespaces_compile_cache_both_serve(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both read the namespace without `kimi-compile-cache` and plan to create it; the first
    does while the second's plan waits. The second's create answers 409 AlreadyExists: the claim
    is shared and owned by nobody, so that is the second joined, not a failed reconcile (a CI
    run's reliability stage timed out on deployments backing off from this 409)."""
    first = sample()
    first["metadata"]["name"] = "first"
    client.create(KIMI_DEPLOYMENT, first)
    client.create(KIMI_DEPLOYMENT, sample())
    decide = reconcile_module.decide  # type: ignore[attr-defined]  # what `reconcile` calls
    raced: list[str] = []

    def stalled(observed: Observed, defaults: OperatorDefaults, **kwargs: Any) -> Decision:
        decision = decide(observed, defaults, **kwargs)
        if not raced:
            raced.append("first")
            assert [w.name for w in decision.caches if w.verb == "create"] == [SHARED_CLAIM]
            body = client.get(KIMI_DEPLOYMENT, NS, "first")
            assert body is not None
            made = reconcile(body, client, OperatorDefaults(), spec_changed=True, now="now")
            assert made.error is None
            assert client.get(PERSISTENT_VOLUME_CLAIM, NS, SHARED_CLAIM) is not None
        return decision

    monkeypatch.setattr(reconcile_module, "decide", stalled)
    body = client.get(KIMI_DEPLOYMENT, NS, NAME)
    assert body is not None
    outcome = reconcile(body, client, OperatorDefaults(), spec_changed=True, now="now")
    assert outcome.error is None
    groups = {group["metadata"]["name"] for group in client.list(LEADER_WORKER_SET, NS)}
    assert groups == {"first-g0", f"{NAME}-g0"}


def cache_claim(client: Client, users: list[Mapping[str, Any]]) -> dict[str, Any]:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "kimi-weights-cache",
            "namespace": NS,
            "labels": {
                "app.kubernetes.io/managed-by": "kimi-operator",
                "app.kubernetes.io/component": "weights-cache",
            },
            "ownerReferences": [dict(user) for user in users],
        },
        "spec": {
            "accessModes": ["ReadOnlyMany"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    return client.create(PERSISTENT_VOLUME_CLAIM, claim)


def user(client: Client, name: str) -> dict[str, Any]:
    """A KimiDeployment `name`, as a cache's user (a non-controller reference to it)."""
    doc = sample()
    doc["metadata"]["name"] = name
    made = client.create(KIMI_DEPLOYMENT, doc)
    return {**owner_reference(made), "controller": False}


def test_the_last_users_release_is_refused_once_another_deployment_joined(
    client: Client,
) -> None:
    """caches.releases decided from a listing where this deployment was the last user; another
    joins (its compare-and-swap patch adds its reference) before the delete is sent: the delete
    is refused, the cache (~1.5 TB downloaded) kept for the one that joined."""
    first, second = user(client, "first"), user(client, "second")
    listed = cache_claim(client, [first])
    writes = caches.releases({"PersistentVolumeClaim": [listed]}, first["uid"], keep=set())
    assert [w.verb for w in writes] == ["delete"]
    joined = {
        "ownerReferences": [first, second],
        "resourceVersion": listed["metadata"]["resourceVersion"],
    }
    client.patch(PERSISTENT_VOLUME_CLAIM, NS, "kimi-weights-cache", {"metadata": joined})
    with pytest.raises(ApiError) as refused:
        perform(client, writes[0], Applied())
    assert refused.value.code == 409
    kept = client.get(PERSISTENT_VOLUME_CLAIM, NS, "kimi-weights-cache")
    assert kept is not None
    users = [ref["uid"] for ref in kept["metadata"]["ownerReferences"]]
    assert users == [first["uid"], second["uid"]]


STALE = {"uid": {"uid": "another-uid"}, "resourceVersion": {"resourceVersion": "1"}}
MESSAGES = {
    "uid": (
        "the UID in the precondition (another-uid) does not match the UID in record ({uid}). "
        "The object might have been deleted and then recreated"
    ),
    "resourceVersion": (
        "the ResourceVersion in the precondition (1) does not match the ResourceVersion in "
        "record ({resourceVersion}). The object might have been modified"
    ),
}


@pytest.mark.parametrize("field", sorted(STALE))
def test_the_api_server_refuses_a_delete_whose_preconditions_fail_as_kube_apiserver_does(
    api: EmbeddedApiServer, client: Client, field: str
) -> None:
    """kube-apiserver's rest.BeforeDelete: 409 Conflict, a Status naming the kind and object."""
    claim = cache_claim(client, [])
    meta = claim["metadata"]
    mark = api.mark()
    with pytest.raises(ApiError) as refused:
        client.delete(PERSISTENT_VOLUME_CLAIM, NS, meta["name"], precondition=STALE[field])
    why = MESSAGES[field].format(**meta)
    expected = f'Operation cannot be fulfilled on PersistentVolumeClaim "{meta["name"]}": {why}'
    assert refused.value.code == 409
    assert expected in str(refused.value)
    assert [w.code for w in api.writes(mark)] == [409]
    assert client.get(PERSISTENT_VOLUME_CLAIM, NS, meta["name"]) is not None
    assert client.delete(
        PERSISTENT_VOLUME_CLAIM, NS, meta["name"], precondition=preconditions(claim)
    )
    assert client.get(PERSISTENT_VOLUME_CLAIM, NS, meta["name"]) is None


def test_a_status_sent_on_a_stale_version_is_refused_and_kept_for_the_fault_report(
    api: EmbeddedApiServer, client: Client
) -> None:
    """The reliability run's fault report counts what the operator said in a status the API
    server refused because the deployment was edited after it was read (a phase once failed
    with "the status never said ApiThrottled": the throttled reconcile's status was refused)."""
    created = client.create(KIMI_DEPLOYMENT, sample(NAME))
    read_at = created["metadata"]["resourceVersion"]
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"replicas": 2}})
    accepted, stale = api.status_mark(), api.stale_status_mark()
    status = {"observedGeneration": 1, "conditions": [{"type": "Degraded", "status": "True"}]}
    with pytest.raises(ApiError) as refused:
        client.patch(
            KIMI_DEPLOYMENT, NS, NAME,
            {"metadata": {"resourceVersion": read_at}, "status": status}, subresource="status",
        )  # fmt: skip
    assert refused.value.code == 409
    assert api.status_writes(accepted) == []
    assert api.stale_status_writes(stale) == [(f"{NS}/{NAME}", status)]
