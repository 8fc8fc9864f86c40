"""The generated CRD is a valid, structural apiextensions.k8s.io/v1 object with sensible rules."""

from collections.abc import Iterator
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest

from kimi_operator.api import constants as c
from kimi_operator.api.crd import crd

CRD = crd()
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
# What a structural schema may not contain (apiextensions.k8s.io/v1, "structural schema").
FORBIDDEN_KEYS = {
    "$ref",
    "definitions",
    "dependencies",
    "patternProperties",
    "anyOf",
    "oneOf",
    "const",
}


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, prop in schema.get("properties", {}).items():
        yield from nodes(prop, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")


def test_is_a_valid_custom_resource_definition() -> None:
    kubernetes_validate.validate(CRD, "1.33.0", strict=True)


def test_names_and_scope() -> None:
    spec = CRD["spec"]
    assert CRD["metadata"]["name"] == "kimideployments.kimi-operator.io"
    assert (spec["group"], spec["scope"]) == ("kimi-operator.io", "Namespaced")
    assert spec["names"]["kind"] == c.KIND
    assert spec["names"]["shortNames"] == ["kimi"]
    assert (VERSION["name"], VERSION["served"], VERSION["storage"]) == ("v1alpha1", True, True)
    assert set(VERSION["subresources"]) == {"status", "scale"}


@pytest.mark.parametrize(
    ("path", "node"), list(nodes(SCHEMA)), ids=lambda x: x if isinstance(x, str) else ""
)
def test_every_node_is_structural(path: str, node: dict[str, Any]) -> None:
    assert "type" in node, f"{path or '<root>'} has no type"
    assert not FORBIDDEN_KEYS & node.keys(), path
    assert node.get("additionalProperties") is not False, path
    assert not ("properties" in node and "additionalProperties" in node), path
    if "default" in node:
        jsonschema.Draft4Validator(node).validate(node["default"])


def test_every_spec_field_has_a_description() -> None:
    spec = SCHEMA["properties"]["spec"]
    missing = [
        p
        for p, n in nodes(spec, "spec")
        if p.count(".") >= 1 and "description" not in n and not p.endswith(("[]", "{}"))
    ]
    assert missing == []


def test_printer_columns_point_at_fields() -> None:
    columns = {col["name"]: col["jsonPath"] for col in VERSION["additionalPrinterColumns"]}
    assert list(columns) == [
        "GPUS",
        "DESIRED",
        "READY-GROUPS",
        "STOPPED",
        "SLO-GROUPS",
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
    known = {p for p, _ in nodes(SCHEMA)}
    names = [*columns][:11]  # GPUS .. ROUTING
    for name in (*names, "ENDPOINT", "SLO-WHY"):
        assert columns[name] in known, name
    # The roles' columns in `kubectl get -o wide`: the default table stays as it was.
    wide = [c["name"] for c in VERSION["additionalPrinterColumns"] if c.get("priority") == 1]
    assert wide == [
        "SLO-GROUPS",
        "PREFILL",
        "PREFILL-DESIRED",
        "PREFILL-SLO",
        "PREFILL-READY",
        "SLO-WHY",
    ]
    assert columns["READY"].startswith('.status.conditions[?(@.type=="Ready")]')


def test_the_scale_subresource_points_at_fields() -> None:
    scale = VERSION["subresources"]["scale"]
    known = {p for p, _ in nodes(SCHEMA)}
    for key in ("specReplicasPath", "statusReplicasPath", "labelSelectorPath"):
        assert scale[key] in known, key
    status = SCHEMA["properties"]["status"]["properties"]
    assert status["selector"]["type"] == "string"  # kube-apiserver requires a string selector
    assert status["replicas"]["type"] == "integer"


def test_cel_rules_compile_name_their_field_and_point_at_it() -> None:
    env = celpy.Environment()
    count = 0
    for path, node in nodes(SCHEMA):
        for entry in node.get("x-kubernetes-validations", []):
            env.program(env.compile(entry["rule"]))
            field = path + entry.get("fieldPath", "")
            assert entry["message"].startswith(field.lstrip(".") + ": "), entry["message"]
            assert field in {p for p, _ in nodes(SCHEMA)}, field
            count += 1
    assert count >= 20


def test_metadata_name_is_limited_to_what_children_names_allow() -> None:
    name = SCHEMA["properties"]["metadata"]["properties"]["name"]
    assert name["maxLength"] == c.MAX_NAME_LENGTH
    assert name["pattern"] == c.NAME_PATTERN
    # <name>-g<group>-<lws group index>-<worker index> must stay a 63-character DNS label.
    assert c.MAX_NAME_LENGTH + len("-g63-0-3") <= 63


def test_engine_args_rules_fit_the_api_servers_cel_cost_budget() -> None:
    """The API server refuses a CRD whose rules' estimated cost is too high; estimate it as cel-go.

    `list.all(a, a.matches(re))` costs about maxItems x (maxLength x 0.1) x (len(re) x 0.25); the
    limits are 10^7 per rule and 10^8 for the whole CRD (apiextensions-apiserver).
    """
    args = SCHEMA["properties"]["spec"]["properties"]["engineArgs"]
    per_item = args["items"]["maxLength"] * 0.1
    costs = []
    for entry in args["x-kubernetes-validations"]:
        regex = entry["rule"].split("matches('", 1)[1].rsplit("'", 1)[0]
        costs.append(args["maxItems"] * per_item * len(regex) * 0.25)
    assert max(costs) < 1e7
    assert sum(costs) < 1e8
