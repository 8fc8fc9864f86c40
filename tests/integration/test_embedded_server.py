"""The embedded API server refuses, rewrites and keeps what kube-apiserver would: structural schemas
and CEL rules of the installed CRDs, RBAC from the chart, the owner-reference permission check.
Each answer is compared with kube-apiserver's own wording (docs/embedded-api-server.md)."""

import json
import re
import urllib.error
import urllib.request
from typing import Any

import pytest

from kimi_operator.api.crd import crd
from kimi_operator.api.validation import check_document
from kimi_operator.embedded.authorization import Check
from kimi_operator.embedded.chart import operator_identity
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.merge import owner_reference
from kimi_operator.k8s.resources import (
    COMPUTE_DOMAIN,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    SERVICE,
)
from tests.support.cluster import NAME, NS, children, create, older_crd, sample
from tests.support.repo import ROOT

KDS = KIMI_DEPLOYMENT.collection(NS)
NOT_CHECKED = (
    '<nil>: Invalid value: "null": some validation rules were not checked because the object '
    "was invalid; correct the existing errors to complete validation"
)
OPERATOR = "system:serviceaccount:kimi-system:kimi-kimi-operator"


def send(
    api: EmbeddedApiServer,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = None,
    merge: bool = False,
) -> tuple[int, dict[str, Any], list[str]]:
    """(HTTP status, JSON answer, Warning headers) of one request."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/merge-patch+json" if merge else "application/json"
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(api.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            warnings = response.headers.get_all("Warning") or []
            return response.status, json.loads(response.read() or b"{}"), warnings
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}"), []


# --- structural schemas ------------------------------------------------------------------------


def test_unknown_fields_are_pruned_with_a_warning(api: EmbeddedApiServer) -> None:
    doc = sample()
    doc["spec"]["turbo"] = True
    doc["spec"]["decode"] = {"backend": "auto", "fast": 1}
    code, stored, warnings = send(api, "POST", KDS, doc)
    assert code == 201
    assert "turbo" not in stored["spec"]
    assert stored["spec"]["decode"] == {
        "backend": "auto",
        "contextParallelSize": 1,
        "cudaGraphMode": "FULL_AND_PIECEWISE",
        "maxNumSeqs": 8,
    }  # and the schema's defaults applied
    assert sorted(warnings) == [
        '299 - "unknown field \\"spec.decode.fast\\""',
        '299 - "unknown field \\"spec.turbo\\""',
    ]


def test_strict_field_validation_refuses_unknown_fields(api: EmbeddedApiServer) -> None:
    doc = sample()
    doc["spec"]["turbo"] = True
    code, status, _ = send(api, "POST", KDS + "?fieldValidation=Strict", doc)
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"] == (
        'KimiDeployment in version "v1alpha1" cannot be handled as a KimiDeployment: strict '
        'decoding error: unknown field "spec.turbo"'
    )


def test_type_errors_are_422_with_the_field_path(api: EmbeddedApiServer) -> None:
    doc = sample()
    doc["spec"]["gpus"] = "16"
    code, status, _ = send(api, "POST", KDS, doc)
    assert (code, status["reason"]) == (422, "Invalid")
    wrong = (
        'spec.gpus: Invalid value: "string": spec.gpus in body must be of type integer: "string"'
    )
    assert (
        status["message"]
        == f'KimiDeployment.kimi-operator.io "{NAME}" is invalid: [{wrong}, {NOT_CHECKED}]'
    )
    assert status["details"]["causes"][0] == {
        "reason": "FieldValueTypeInvalid",
        "message": 'Invalid value: "string": spec.gpus in body must be of type integer: "string"',
        "field": "spec.gpus",
    }


def test_cel_rules_refuse_with_the_message_validate_prints(api: EmbeddedApiServer) -> None:
    """The rule's message is `kimi-operator validate`'s, less the value it got (a CEL `message`
    is fixed text)."""
    doc = sample()
    doc["spec"]["env"] = [{"name": "VLLM_KIMI_K3_AUX_ATTN_RES_STREAM", "value": "1"}]
    (problem,) = check_document(doc).problems
    message = re.sub(r"\(got .*; allowed: ", "(allowed: ", str(problem))
    assert message != str(problem)
    code, status, _ = send(api, "POST", KDS, doc)
    assert code == 422
    assert status["message"] == (
        f'KimiDeployment.kimi-operator.io "{NAME}" is invalid: spec.env: Invalid value: '
        f'"object": {message}'
    )


def test_upstream_crds_are_checked_too(api: EmbeddedApiServer, client: Client) -> None:
    """A LeaderWorkerSet by its schema; a ComputeDomain's spec by its CEL transition rule
    (`self == oldSelf`: immutable)."""
    create_kd = sample()
    client.create(KIMI_DEPLOYMENT, create_kd)
    lws = {
        "apiVersion": LEADER_WORKER_SET.api_version,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "g", "namespace": NS},
        "spec": {"replicas": "one", "leaderWorkerTemplate": {"size": 2}},
    }
    code, status, _ = send(api, "POST", LEADER_WORKER_SET.collection(NS), lws)
    assert code == 422
    assert status["details"]["causes"][0]["field"] == "spec.replicas"
    domain = {
        "apiVersion": COMPUTE_DOMAIN.api_version,
        "kind": "ComputeDomain",
        "metadata": {"name": "d", "namespace": NS},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "d"}}},
    }
    assert send(api, "POST", COMPUTE_DOMAIN.collection(NS), domain)[0] == 201
    code, status, _ = send(
        api, "PATCH", COMPUTE_DOMAIN.item(NS, "d"), {"spec": {"numNodes": 4}}, merge=True
    )
    assert code == 422
    assert status["message"] == (
        'ComputeDomain.resource.nvidia.com "d" is invalid: spec: Invalid value: "object": '
        "A computeDomain.spec is immutable"
    )
    labels = {"metadata": {"labels": {"a": "b"}}}
    assert send(api, "PATCH", COMPUTE_DOMAIN.item(NS, "d"), labels, merge=True)[0] == 200


def test_an_object_stored_under_an_older_crd_can_still_be_written(api: EmbeddedApiServer) -> None:
    """Ratcheting: an update is refused only for the values it changes."""
    api.install_crds([older_crd()])
    doc = sample()
    doc["spec"]["gpus"] = 12
    assert send(api, "POST", KDS, doc)[0] == 201
    api.install_crds([crd()])
    item = KIMI_DEPLOYMENT.item(NS, NAME)
    status = {"status": {"observedGeneration": 1}}
    assert send(api, "PATCH", item + "/status", status, merge=True)[0] == 200
    assert send(api, "PATCH", item, {"metadata": {"labels": {"a": "b"}}}, merge=True)[0] == 200
    code, _, _ = send(api, "PATCH", item, {"spec": {"gpus": 13}}, merge=True)
    assert code == 422
    bad_status = {"status": {"observedGeneration": -1}}
    assert send(api, "PATCH", item + "/status", bad_status, merge=True)[0] == 422


# --- RBAC and owner references ----------------------------------------------------------------


def test_requests_are_authorized_by_the_chart_s_rbac(api: EmbeddedApiServer) -> None:
    token = operator_identity(api)
    assert send(api, "GET", KDS, token=token)[0] == 200
    assert send(api, "GET", "/apis", token=token)[0] == 200  # discovery: every user
    code, status, _ = send(api, "GET", f"/api/v1/namespaces/{NS}/secrets/hf", token=token)
    assert (code, status["reason"]) == (403, "Forbidden")
    assert status["message"] == (
        f'secrets "hf" is forbidden: User "{OPERATOR}" cannot get resource "secrets" in API '
        f'group "" in the namespace "{NS}"'
    )
    code, status, _ = send(api, "DELETE", KIMI_DEPLOYMENT.item(NS, NAME), token=token)
    assert code == 403
    assert "cannot delete resource" in status["message"]
    assert send(api, "GET", KDS, token="not-issued")[0] == 401


def _service(owner: dict[str, Any], *, block: bool) -> dict[str, Any]:
    reference = owner_reference(owner) | {"blockOwnerDeletion": block}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"s-{block}".lower(), "namespace": NS, "ownerReferences": [reference]},
        "spec": {"ports": [{"port": 8000}]},
    }


def test_blocking_an_owner_s_deletion_needs_its_finalizers(
    api: EmbeddedApiServer, client: Client
) -> None:
    """The OwnerReferencesPermissionEnforcement admission plugin, for a user who may create
    Services but not update KimiDeployments' finalizers."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "services", "namespace": NS},
        "rules": [{"apiGroups": [""], "resources": ["services"], "verbs": ["create", "patch"]}],
    }
    subject = {"kind": "ServiceAccount", "name": "maker", "namespace": NS}
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "services"}
    binding = {
        "apiVersion": role["apiVersion"],
        "kind": "RoleBinding",
        "metadata": role["metadata"],
        "roleRef": ref,
        "subjects": [subject],
    }
    api.store([role, binding])
    token = api.issue_token(NS, "maker")
    owner = client.create(KIMI_DEPLOYMENT, sample())
    assert (
        send(api, "POST", SERVICE.collection(NS), _service(owner, block=False), token=token)[0]
        == 201
    )
    code, status, _ = send(
        api, "POST", SERVICE.collection(NS), _service(owner, block=True), token=token
    )
    assert (code, status["reason"]) == (403, "Forbidden")
    assert status["message"] == (
        'services "s-true" is forbidden: cannot set blockOwnerDeletion if an ownerReference '
        "refers to a resource you can't set finalizers on: , <nil>"
    )
    # Changing the references of an existing object needs delete on it.
    disown = {"metadata": {"ownerReferences": None}}
    code, status, _ = send(
        api, "PATCH", SERVICE.item(NS, "s-false"), disown, token=token, merge=True
    )
    assert code == 403
    assert "cannot set an ownerRef on a resource you can't delete" in status["message"]


def test_granting_a_permission_not_held_is_refused(api: EmbeddedApiServer) -> None:
    """kube-apiserver's RBAC escalation check: a user who may write Roles and RoleBindings may
    grant only what it holds itself (the operator grants its endpoint pickers their Role)."""
    rbac_group = "rbac.authorization.k8s.io"
    writes = ["create", "patch"]
    held = [
        {"apiGroups": [rbac_group], "resources": ["roles", "rolebindings"], "verbs": writes},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    ]
    api.store(
        [
            {
                "apiVersion": f"{rbac_group}/v1",
                "kind": "Role",
                "metadata": {"name": "granter", "namespace": NS},
                "rules": held,
            },
            _binding("granter", "granter"),
        ]
    )
    token = api.issue_token(NS, "granter")
    roles = f"/apis/{rbac_group}/v1/namespaces/{NS}/roles"
    bindings = f"/apis/{rbac_group}/v1/namespaces/{NS}/rolebindings"

    def role(name: str, verbs: list[str]) -> dict[str, Any]:
        rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]
        return {
            "apiVersion": f"{rbac_group}/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": NS},
            "rules": rules,
        }

    assert send(api, "POST", roles, role("readers", ["get", "list"]), token=token)[0] == 201
    code, status, _ = send(api, "POST", roles, role("watchers", ["get", "watch"]), token=token)
    assert (code, status["reason"]) == (403, "Forbidden")
    account = f"system:serviceaccount:{NS}:granter"
    assert status["message"] == (
        f'roles.rbac.authorization.k8s.io "watchers" is forbidden: user "{account}" '
        f'(groups=["system:authenticated" "system:serviceaccounts" "system:serviceaccounts:{NS}"]) '
        "is attempting to grant RBAC permissions not currently held:\n"
        '{APIGroups:[""], Resources:["pods"], Verbs:["watch"]}'
    )
    # Widening a Role it may patch: refused the same way.
    wider = {"rules": role("readers", ["get", "list", "delete"])["rules"]}
    code, status, _ = send(api, "PATCH", f"{roles}/readers", wider, token=token, merge=True)
    assert code == 403
    assert 'Verbs:["delete"]' in status["message"]
    # Binding a role: allowed for one whose permissions it holds, not for another.
    api.store([role("admins", ["get", "list", "delete"])])
    assert send(api, "POST", bindings, _binding("b1", "readers"), token=token)[0] == 201
    code, status, _ = send(api, "POST", bindings, _binding("b2", "admins"), token=token)
    assert code == 403
    assert status["message"].startswith('rolebindings.rbac.authorization.k8s.io "b2" is forbidden')
    assert 'Verbs:["delete"]' in status["message"]


def _binding(name: str, role: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "granter", "namespace": NS}],
    }


@pytest.mark.usefixtures("operator")
def test_the_chart_lets_the_operator_block_its_deployments_deletion(
    client: Client, api: EmbeddedApiServer
) -> None:
    """A bug once: every child carries blockOwnerDeletion: true, which clusters that
    enforce owner-reference permissions refuse without `update` on kimideployments/finalizers."""
    create(client, sample())
    assert len(children(client)) == 5
    finalizers = Check(
        OPERATOR, "kimi-operator.io", "kimideployments/finalizers", "update", True, True
    )
    assert finalizers in api.checks()
    assert not [c for c in api.checks() if not c.allowed]


def test_docs_list_every_test_of_this_file() -> None:
    docs = (ROOT / "docs" / "embedded-api-server.md").read_text()
    names = [name for name in globals() if name.startswith("test_") and "docs" not in name]
    assert [n for n in names if n not in docs] == []


def test_lists_come_in_pages(api: EmbeddedApiServer) -> None:
    """limit and continue, as kube-apiserver pages a list (client-go's pager, `Client.list`)."""
    asked: list[str] = []
    client = Client(
        load_configuration(api.url), page_size=2, on_request=lambda verb, *_: asked.append(verb)
    )
    names = ["e", "a", "d", "b", "c"]
    for name in names:
        meta = {"name": name, "namespace": "paged"}
        client.create(SERVICE, {"apiVersion": "v1", "kind": "Service", "metadata": meta})
    asked.clear()
    assert [s["metadata"]["name"] for s in client.list(SERVICE, "paged")] == sorted(names)
    assert asked == ["list", "list", "list"]  # 2 + 2 + 1
    first = client.listing(SERVICE, "paged", limit=2)
    assert first is not None
    assert [s["metadata"]["name"] for s in first.items] == ["a", "b"]
    code, answer, _ = send(api, "GET", "/api/v1/namespaces/paged/services?limit=2&continue=x")
    assert (code, answer["message"]) == (400, "continue key is not valid")
    client.close()


def test_a_status_write_keeps_only_what_it_says(api: EmbeddedApiServer, client: Client) -> None:
    """The status subresource as kube-apiserver serves it: a merge patch's null removes a field,
    a PUT replaces the whole status and leaves the spec and labels as they are, a stale
    resourceVersion is refused with 409 (the operator's status writes: controller/loop.py)."""
    client.create(KIMI_DEPLOYMENT, sample())
    path = f"{KDS}/{NAME}/status"
    status = {"replicas": 2, "groups": [{"name": f"{NAME}-g0"}], "autoscaler": "ScaledObject/x"}
    code, written, _ = send(api, "PATCH", path, {"status": status}, merge=True)
    assert code == 200
    version = written["metadata"]["resourceVersion"]
    drop = {"metadata": {"resourceVersion": version}, "status": {"groups": None}}
    code, dropped, _ = send(api, "PATCH", path, drop, merge=True)
    assert code == 200
    assert "groups" not in dropped["status"]
    assert (dropped["status"]["replicas"], dropped["status"]["autoscaler"]) == (2, "ScaledObject/x")
    code, _, _ = send(api, "PATCH", path, drop, merge=True)  # on the version it replaced
    assert code == 409
    put = {**dropped, "spec": {**dropped["spec"], "replicas": 5}, "status": {"replicas": 1}}
    put["metadata"] = {**dropped["metadata"], "labels": {"put": "yes"}}
    code, replaced, _ = send(api, "PUT", path, put)
    assert code == 200
    assert (replaced["status"]["replicas"], replaced["status"]["autoscaler"]) == (1, "")
    assert replaced["spec"]["replicas"] == dropped["spec"]["replicas"]
    assert "put" not in (replaced["metadata"].get("labels") or {})
    code, _, _ = send(api, "PUT", path, put)  # put's resourceVersion is stale now
    assert code == 409
