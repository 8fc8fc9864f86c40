"""What the embedded API server serves to clients beside objects, over HTTP: /version,
discovery, OpenAPI, lists, Tables, Status errors, namespaces."""

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from kimi_operator.api.crd import crd
from kimi_operator.embedded import discovery, openapi, tables
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.server import ApiServer
from kimi_operator.embedded.upstream import child_crds
from tests.support.builtin_openapi import definitions

TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1,application/json"
AGGREGATED = f"{discovery.AGGREGATED},application/json"
KIMI = "/apis/kimi-operator.io/v1alpha1"


@pytest.fixture(scope="module")
def api() -> Iterator[EmbeddedApiServer]:
    with EmbeddedApiServer() as server:
        server.install_crds([crd(), *child_crds()])
        yield server


def call(
    api: EmbeddedApiServer, method: str, path: str, body: Any = None, accept: str = ""
) -> tuple[int, dict[str, str], Any]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", **({"Accept": accept} if accept else {})}
    request = urllib.request.Request(api.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers), json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def kimi(name: str, namespace: str = "inference") -> dict[str, Any]:
    return {
        "apiVersion": "kimi-operator.io/v1alpha1",
        "kind": "KimiDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"name": "m", "source": {"pvc": {"claimName": "w"}}},
            "gpus": 16,
            "replicas": 2,
        },
    }


def test_version_satisfies_the_chart_s_kube_version(api: EmbeddedApiServer) -> None:
    _, _, version = call(api, "GET", "/version")
    assert version["gitVersion"].startswith("v1.")
    assert (int(version["major"]), int(version["minor"])) >= (1, 34)


def test_subresources_are_discovered_as_subresources(api: EmbeddedApiServer) -> None:
    _, _, listed = call(api, "GET", KIMI)
    by_name = {r["name"]: r for r in listed["resources"]}
    assert by_name["kimideployments"]["shortNames"] == ["kimi"]
    assert by_name["kimideployments"]["categories"] == ["all"]
    assert "shortNames" not in by_name["kimideployments/status"]
    scale = by_name["kimideployments/scale"]
    assert (scale["group"], scale["version"], scale["kind"]) == ("autoscaling", "v1", "Scale")
    assert "shortNames" not in scale


def test_aggregated_discovery(api: EmbeddedApiServer) -> None:
    _, headers, document = call(api, "GET", "/apis", accept=AGGREGATED)
    assert headers["Content-Type"] == discovery.AGGREGATED
    (group,) = [g for g in document["items"] if g["metadata"]["name"] == "kimi-operator.io"]
    (resource,) = group["versions"][0]["resources"]
    assert resource["resource"] == "kimideployments"
    assert resource["scope"] == "Namespaced"
    assert [s["subresource"] for s in resource["subresources"]] == ["scale", "status"]
    _, _, core = call(api, "GET", "/api", accept=AGGREGATED)
    (legacy,) = core["items"]
    served = {r["resource"] for r in legacy["versions"][0]["resources"]}
    assert {"namespaces", "pods", "secrets", "services"} <= served
    # Without the aggregated type first: the plain documents.
    _, _, plain = call(api, "GET", "/apis")
    assert plain["kind"] == "APIGroupList"


def test_openapi_v3_lets_kubectl_leave_validation_to_the_server(api: EmbeddedApiServer) -> None:
    _, _, root = call(api, "GET", "/openapi/v3")
    url = root["paths"]["apis/kimi-operator.io/v1alpha1"]["serverRelativeURL"]
    _, _, document = call(api, "GET", url)
    patch = document["paths"][f"{KIMI}/namespaces/{{namespace}}/kimideployments/{{name}}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"]["kind"] == "KimiDeployment"
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    schemas = document["components"]["schemas"]
    kind = schemas["io.kimi-operator.v1alpha1.KimiDeployment"]
    assert kind["properties"]["spec"]["properties"]["gpus"]["enum"] == [8, 16]
    assert kind["properties"]["metadata"] == {
        "$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    }
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in schemas
    _, _, core = call(api, "GET", root["paths"]["api/v1"]["serverRelativeURL"])
    containers = core["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"][
        "containers"
    ]
    assert containers["x-kubernetes-list-map-keys"] == ["name"]
    _, _, v2 = call(api, "GET", "/openapi/v2")
    assert v2["swagger"] == "2.0"
    assert "io.kimi-operator.v1alpha1.KimiDeployment" in v2["definitions"]


def test_the_built_in_definitions_are_kubernetes_own() -> None:
    assert openapi.built_in() == definitions()


def test_lists_have_their_kind_and_tables_the_crd_s_columns(api: EmbeddedApiServer) -> None:
    call(api, "POST", f"{KIMI}/namespaces/inference/kimideployments", kimi("listed"))
    status = {"conditions": [{"type": "Ready", "status": "True"}], "endpoint": "http://e"}
    path = f"{KIMI}/namespaces/inference/kimideployments/listed"
    call(api, "PATCH", path + "/status", {"status": status})
    _, _, listed = call(api, "GET", f"{KIMI}/kimideployments")
    assert (listed["kind"], listed["apiVersion"]) == (
        "KimiDeploymentList",
        "kimi-operator.io/v1alpha1",
    )
    _, _, table = call(api, "GET", f"{KIMI}/kimideployments", accept=TABLE)
    assert table["kind"] == "Table"
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names == [
        "Name",
        "GPUS",
        "DESIRED",
        "READY-GROUPS",
        "STOPPED",
        "SLO-GROUPS",  # priority 1: kubectl shows it with -o wide only
        "PREFILL",
        "PREFILL-DESIRED",
        "PREFILL-SLO",
        "PREFILL-READY",
        "BACKEND",
        "ROUTING",
        "READY",
        "ENDPOINT",
        "AGE",
        "SLO-WHY",
    ]
    (row,) = [r for r in table["rows"] if r["cells"][0] == "listed"]
    assert row["cells"][2] == 2  # .spec.replicas
    assert row["cells"][12] == "True"  # .status.conditions[?(@.type=="Ready")].status
    assert row["cells"][13] == "http://e"
    assert row["object"]["kind"] == "PartialObjectMetadata"
    _, _, one = call(api, "GET", path, accept=TABLE)
    assert [r["cells"][0] for r in one["rows"]] == ["listed"]
    _, _, namespaces = call(api, "GET", "/api/v1/namespaces", accept=TABLE)
    assert [c["name"] for c in namespaces["columnDefinitions"]] == ["Name", "Status", "Age"]


@pytest.mark.parametrize(
    ("seconds", "printed"),
    [
        (5, "5s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (9 * 3600, "9h"),
        (49 * 3600, "2d1h"),
        (10 * 86400, "10d"),
        (800 * 86400, "2y70d"),
    ],
)
def test_ages_are_printed_as_kubectl_prints_them(seconds: int, printed: str) -> None:
    assert tables.human_duration(seconds) == printed


def test_errors_are_status_objects_with_kube_apiserver_s_words(api: EmbeddedApiServer) -> None:
    code, _, missing = call(api, "GET", f"{KIMI}/namespaces/inference/kimideployments/nope")
    assert (code, missing["kind"], missing["reason"]) == (404, "Status", "NotFound")
    assert missing["message"] == 'kimideployments.kimi-operator.io "nope" not found'
    call(api, "POST", f"{KIMI}/namespaces/inference/kimideployments", kimi("twice"))
    code, _, again = call(
        api, "POST", f"{KIMI}/namespaces/inference/kimideployments", kimi("twice")
    )
    assert (code, again["reason"]) == (409, "AlreadyExists")
    assert again["message"] == 'kimideployments.kimi-operator.io "twice" already exists'
    code, _, unknown = call(api, "GET", "/apis/nothing.example/v1/things")
    assert (code, unknown["reason"]) == (404, "NotFound")
    assert unknown["message"] == "the server could not find the requested resource"


def test_a_failure_inside_the_server_is_a_500_without_python_text() -> None:
    def broken(_: ApiServer) -> None:
        raise ValueError("a Python exception's own words")

    with EmbeddedApiServer() as api:
        api.observe(broken)
        code, _, status = call(
            api,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
        )
    assert (code, status["kind"], status["reason"]) == (500, "Status", "InternalError")
    assert "Python" not in status["message"]
    assert "ValueError" not in json.dumps(status)


def test_namespaces_are_created_listed_and_deleted_with_what_is_in_them() -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}}
    with EmbeddedApiServer() as api:
        api.install_crds([crd()])
        code, _, created = call(api, "POST", "/api/v1/namespaces", namespace)
        assert code == 201
        assert created["status"] == {"phase": "Active"}
        assert created["metadata"]["labels"] == {"kubernetes.io/metadata.name": "gone"}
        _, _, listed = call(api, "GET", "/api/v1/namespaces")
        assert listed["kind"] == "NamespaceList"
        assert {"default", "kube-system", "gone"} <= {
            n["metadata"]["name"] for n in listed["items"]
        }
        call(api, "POST", f"{KIMI}/namespaces/gone/kimideployments", kimi("inside", "gone"))
        call(api, "POST", f"{KIMI}/namespaces/inference/kimideployments", kimi("outside"))
        code, _, _ = call(api, "DELETE", "/api/v1/namespaces/gone")
        assert code == 200
        code, _, _ = call(api, "GET", "/api/v1/namespaces/gone")
        assert code == 404
        _, _, left = call(api, "GET", f"{KIMI}/kimideployments")
        assert [k["metadata"]["name"] for k in left["items"]] == ["outside"]
