"""Every string, list and map of the CRD schema is bounded.

A real API server estimates the worst-case cost of each CEL rule from these bounds and refuses a CRD
whose rules could exceed its budget; bounds also keep a hostile object small before any rule runs.
"""

import re
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


# Kubernetes' static cost estimate of a CEL rule (k8s.io/apiserver/pkg/cel/library/cost.go): a
# `matches` costs (0.1 x the string's maxLength) x (0.25 x the pattern's length), a list macro
# maxItems times its body. The API server refuses a CRD with a rule estimated above 10^7
# (StaticEstimatedCostLimit) or rules summing to more than 10^8 (StaticEstimatedCRDCostLimit).
RULE_LIMIT, CRD_LIMIT = 10**7, 10**8
_MATCHES = re.compile(r"\.matches\('((?:[^'\\]|\\.)*)'\)")


def _estimated_cost(rule: str, items: int, length: int) -> float:
    patterns = _MATCHES.findall(rule)
    return items * sum(0.1 * length * 0.25 * len(p) for p in patterns)


def test_engine_args_rules_fit_the_api_servers_cost_budget() -> None:
    node = openapi_schema()["properties"]["spec"]["properties"]["engineArgs"]
    rules = [entry["rule"] for entry in node["x-kubernetes-validations"]]
    costs = [_estimated_cost(r, node["maxItems"], node["items"]["maxLength"]) for r in rules]
    assert len(costs) > 10
    assert max(costs) < RULE_LIMIT
    assert sum(costs) < CRD_LIMIT / 2  # room for the rest of the schema's rules
