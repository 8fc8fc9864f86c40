"""Every string, list and map of the CRD schema is bounded.

A real API server estimates the worst-case cost of each CEL rule from these bounds and refuses a CRD
whose rules could exceed its budget; bounds also keep a hostile object small before any rule runs.
"""

from collections.abc import Iterator
from typing import Any

from kimi_operator.api.crd import openapi_schema


def unbounded(node: dict[str, Any], path: str) -> Iterator[str]:
    kind = node.get("type")
    if kind == "string" and "enum" not in node and "maxLength" not in node:
        yield f"{path}: string without maxLength"
    if kind == "array" and "maxItems" not in node:
        yield f"{path}: list without maxItems"
    if kind == "object" and "additionalProperties" in node and "maxProperties" not in node:
        yield f"{path}: map without maxProperties"
    for name, prop in node.get("properties", {}).items():
        yield from unbounded(prop, f"{path}.{name}")
    if "items" in node:
        yield from unbounded(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from unbounded(node["additionalProperties"], f"{path}{{}}")


def test_every_string_list_and_map_has_a_bound() -> None:
    schema = openapi_schema()
    found = [
        problem
        for part in ("metadata", "spec", "status")
        for problem in unbounded(schema["properties"][part], part)
    ]
    assert found == []


def test_the_walk_finds_an_unbounded_field() -> None:
    node = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "array"}}}
    assert list(unbounded(node, "x")) == [
        "x.a: string without maxLength",
        "x.b: list without maxItems",
    ]


def test_rules_over_map_keys_never_read_a_whole_key() -> None:
    """A map's keys have no maxLength: the API server would estimate `matches` or `==` on a key at
    the size of a whole request and refuse the CRD for its CEL cost. size() and startsWith() with
    a literal cost next to nothing."""
    metadata = openapi_schema()["properties"]["spec"]["properties"]["podMetadata"]
    rules = [entry["rule"] for entry in metadata["x-kubernetes-validations"]]
    assert len(rules) == 2
    for rule in rules:
        assert "matches(" not in rule
        assert "k ==" not in rule
        assert "k in " not in rule


def test_affinity_rules_fit_the_cel_cost_budget() -> None:
    """Estimated as tests/kimi_operator/api/test_crd.py does for engineArgs: the integer check of
    Gt/Lt values runs `matches` on at most terms x requirements values of 63 characters."""
    affinity = openapi_schema()["properties"]["spec"]["properties"]["scheduling"]["properties"][
        "affinity"
    ]
    for kind, node in affinity["properties"].items():
        (entry,) = node["x-kubernetes-validations"]
        regex = entry["rule"].split("matches('", 1)[1].split("'", 1)[0]
        lists = entry["rule"].count(".all(r, ")  # requirement lists the rule walks
        cost = lists * 8 * 16 * (63 * 0.1) * (len(regex) * 0.25)
        assert cost < 1e7, kind
