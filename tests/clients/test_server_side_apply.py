"""Server-side apply's merge and conflict rules, as the Kubernetes documentation states them
(kubernetes.io/docs/reference/using-api/server-side-apply: "Field management", "Conflicts",
"Merge strategy", "Transferring ownership"), on embedded.apply_patch with Kubernetes' own
schemas of the kinds; then through the embedded API server over HTTP."""

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from kimi_operator.embedded import apply_patch, openapi
from kimi_operator.embedded.fieldsets import Schema, from_fields_v1, paths, to_fields_v1
from kimi_operator.embedded.harness import EmbeddedApiServer

CONFIG_MAP = Schema(openapi.built_in()["io.k8s.api.core.v1.ConfigMap"], openapi.built_in())
DEPLOYMENT = Schema(openapi.built_in()["io.k8s.api.apps.v1.Deployment"], openapi.built_in())


def deployment(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "nginx-deployment"},
        "spec": spec,
    }


def containers(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": n, "image": i} for n, i in pairs]}}


def apply(live: dict[str, Any] | None, applied: dict[str, Any], manager: str, **kw: Any) -> Any:
    return apply_patch.apply(live, applied, DEPLOYMENT, manager=manager, force=False, **kw)


def owners(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["manager"]: e["fieldsV1"] for e in obj["metadata"]["managedFields"]}


def test_the_documented_config_map_example_records_its_fields() -> None:
    """The first example of "Field management": what kubectl's apply of test-cm owns."""
    applied = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "test-cm", "namespace": "default", "labels": {"test-label": "test"}},
        "data": {"key": "some value"},
    }
    result = apply_patch.apply(None, applied, CONFIG_MAP, manager="kubectl", force=False)
    (entry,) = result["metadata"]["managedFields"]
    assert entry["fieldsV1"] == {
        "f:data": {"f:key": {}},
        "f:metadata": {"f:labels": {"f:test-label": {}}},
    }
    assert (entry["manager"], entry["operation"], entry["apiVersion"]) == ("kubectl", "Apply", "v1")
    assert entry["fieldsType"] == "FieldsV1"


# "Conflicts": (what the second manager applies, force, the outcome: an error or replicas).
CONFLICTS = [
    pytest.param(
        {"replicas": 5},
        False,
        'Apply failed with 1 conflict: conflict with "first": .spec.replicas',
        id="a different value conflicts",
    ),
    pytest.param({"replicas": 5}, True, 5, id="force overwrites and takes the field"),
    pytest.param({"replicas": 3}, False, 3, id="the same value is shared, no conflict"),
    pytest.param({"minReadySeconds": 9}, False, 3, id="another field: no conflict"),
]


@pytest.mark.parametrize(("second", "force", "outcome"), CONFLICTS)
def test_conflicts_between_appliers(second: dict[str, Any], force: bool, outcome: Any) -> None:
    live = apply(None, deployment(replicas=3), "first")
    if isinstance(outcome, str):
        with pytest.raises(Exception) as refused:  # noqa: PT011 (kmock's error type is generic)
            apply_patch.apply(live, deployment(**second), DEPLOYMENT, manager="second", force=force)
        assert getattr(refused.value, "status", None) == 409
        assert getattr(refused.value, "reason", None) == "Conflict"
        assert getattr(refused.value, "message", None) == outcome
        return
    result = apply_patch.apply(
        live, deployment(**second), DEPLOYMENT, manager="second", force=force
    )
    assert result["spec"]["replicas"] == outcome
    owned = owners(result)
    first_owns = "f:replicas" in owned.get("first", {}).get("f:spec", {})
    second_owns = "f:replicas" in owned["second"].get("f:spec", {})
    if force:
        assert (first_owns, second_owns) == (False, True)
    elif "replicas" in second:
        assert (first_owns, second_owns) == (True, True)  # shared
    else:
        assert (first_owns, second_owns) == (True, False)


def test_a_conflict_with_an_update_names_its_api_version() -> None:
    live = apply(None, deployment(replicas=3), "first")
    changed = json.loads(json.dumps(live))
    changed["spec"]["replicas"] = 4
    apply_patch.updated(live, changed, DEPLOYMENT, manager="kubectl-edit")
    with pytest.raises(Exception) as refused:  # noqa: PT011
        apply(changed, deployment(replicas=5), "first")
    assert getattr(refused.value, "message", None) == (
        'Apply failed with 1 conflict: conflict with "kubectl-edit" using apps/v1: .spec.replicas'
    )


def test_several_conflicts_are_listed_one_a_line() -> None:
    live = apply(None, deployment(replicas=3, minReadySeconds=1), "first")
    with pytest.raises(Exception) as refused:  # noqa: PT011
        apply(live, deployment(replicas=5, minReadySeconds=2), "second")
    assert getattr(refused.value, "message", None) == (
        "Apply failed with 2 conflicts: "
        'conflict with "first": .spec.minReadySeconds\n'
        'conflict with "first": .spec.replicas'
    )


# "If a field is removed from the manifest and the field isn't owned by any other manager, it's
# deleted"; kept when another manager owns it too.
@pytest.mark.parametrize(("also_owned", "kept"), [(False, False), (True, True)])
def test_a_field_left_out_is_removed_unless_another_manager_owns_it(
    also_owned: bool, kept: bool
) -> None:
    live = apply(None, deployment(replicas=3, minReadySeconds=7), "first")
    if also_owned:
        live = apply(live, deployment(minReadySeconds=7), "second")
    result = apply(live, deployment(replicas=3), "first")
    assert ("minReadySeconds" in result["spec"]) is kept


def test_list_map_items_merge_by_their_keys() -> None:
    """containers is `x-kubernetes-list-type: map` keyed by name: each applier owns its items."""
    template = {"template": containers(("a", "nginx:1"))}
    live = apply(None, deployment(**template), "first")
    live = apply(live, deployment(template=containers(("b", "sidecar:1"))), "second")
    names = [c["name"] for c in live["spec"]["template"]["spec"]["containers"]]
    assert names == ["a", "b"]
    owned = owners(live)["second"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
    assert owned == {'k:{"name":"b"}': {".": {}, "f:image": {}, "f:name": {}}}
    # The first applier drops its item: only that item goes.
    live = apply(live, deployment(template={"spec": {"containers": []}}), "first")
    assert [c["name"] for c in live["spec"]["template"]["spec"]["containers"]] == ["b"]
    # Changing the other's item conflicts at the item's field.
    with pytest.raises(Exception) as refused:  # noqa: PT011
        apply(live, deployment(template=containers(("b", "sidecar:2"))), "first")
    assert getattr(refused.value, "message", None) == (
        'Apply failed with 1 conflict: conflict with "second": '
        '.spec.template.spec.containers[name="b"].image'
    )


def test_atomic_lists_are_owned_whole() -> None:
    """A list without a list type (a container's args) is atomic: replaced, owned whole."""
    live = apply(None, deployment(template=containers(("a", "x"))), "first")
    args = {"spec": {"containers": [{"name": "a", "image": "x", "args": ["--one", "--two"]}]}}
    live = apply(live, deployment(template=args), "first")
    fields = paths(live, DEPLOYMENT)
    container = ("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"a"}')
    assert (*container, "f:args") in fields
    assert not any(len(p) > len(container) + 1 and p[len(container)] == "f:args" for p in fields)
    fewer = {"spec": {"containers": [{"name": "a", "image": "x", "args": ["--three"]}]}}
    live = apply(live, deployment(template=fewer), "first")
    assert live["spec"]["template"]["spec"]["containers"][0]["args"] == ["--three"]


def test_set_lists_merge_by_value() -> None:
    """A `set` list (a Pod's finalizers-like `x-kubernetes-list-type: set`): a union."""
    schema = Schema(
        {
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "tags": {
                            "type": "array",
                            "items": {"type": "string"},
                            "x-kubernetes-list-type": "set",
                        }
                    },
                }
            },
        },
        {},
    )
    live = apply_patch.apply(None, {"spec": {"tags": ["a"]}}, schema, manager="one", force=False)
    live = apply_patch.apply(live, {"spec": {"tags": ["b"]}}, schema, manager="two", force=False)
    assert live["spec"]["tags"] == ["a", "b"]
    assert owners(live)["two"] == {"f:spec": {"f:tags": {'v:"b"': {}}}}


def test_transferring_ownership_of_replicas_to_an_autoscaler() -> None:
    """ "Transferring ownership": once the HPA's update owns replicas, the user's manifest can
    leave replicas out without resetting them."""
    live = apply(None, deployment(replicas=3, minReadySeconds=1), "kubectl")
    scaled = json.loads(json.dumps(live))
    scaled["spec"]["replicas"] = 7
    apply_patch.updated(live, scaled, DEPLOYMENT, manager="kube-controller-manager")
    assert "f:replicas" not in owners(scaled)["kubectl"]["f:spec"]
    result = apply(scaled, deployment(minReadySeconds=1), "kubectl")
    assert result["spec"]["replicas"] == 7


def test_fields_v1_round_trips() -> None:
    live = apply(None, deployment(replicas=1, template=containers(("a", "x"))), "m")
    owned = paths(live, DEPLOYMENT)
    assert from_fields_v1(to_fields_v1(owned)) == owned


def test_the_server_applies_creates_and_refuses_without_a_field_manager() -> None:
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "data": {"key": "v"}}).encode()

    def patch(url: str) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            url, data=body, method="PATCH", headers={"Content-Type": apply_patch.APPLY}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    with EmbeddedApiServer() as api:
        path = f"{api.url}/api/v1/namespaces/default/configmaps/test-cm"
        code, status = patch(path)
        assert (code, status["reason"]) == (400, "BadRequest")
        assert status["message"] == (
            "PATCH, application/apply-patch+yaml requires fieldManager to be set"
        )
        code, created = patch(path + "?fieldManager=tester")
        assert code == 201
        assert created["data"] == {"key": "v"}
        assert created["metadata"]["managedFields"][0]["manager"] == "tester"
        code, again = patch(path + "?fieldManager=tester")
        assert code == 200
        assert again["metadata"]["uid"] == created["metadata"]["uid"]
