"""The embedded API server's matching of validating webhook rules and selectors, case by case as
kube-apiserver's (admission/plugin/webhook/predicates/rules and label selectors)."""

from typing import Any

import pytest

from kimi_operator.embedded.webhooks import resource_matches, selects


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("kimideployments", "kimideployments", True),
        ("kimideployments", "kimideployments/status", False),
        ("kimideployments", "kimideployments/scale", False),
        ("kimideployments/status", "kimideployments/status", True),
        ("kimideployments/status", "kimideployments", False),
        ("kimideployments/*", "kimideployments", True),
        ("kimideployments/*", "kimideployments/scale", True),
        ("*", "kimideployments", True),
        ("*", "kimideployments/status", False),
        ("*/status", "leaderworkersets/status", True),
        ("*/status", "leaderworkersets", False),
        ("*/*", "kimideployments", True),
        ("*/*", "kimideployments/scale", True),
        ("leaderworkersets", "kimideployments", False),
    ],
)
def test_rule_resources(pattern: str, name: str, matches: bool) -> None:
    assert resource_matches(pattern, name) is matches


LABELS = {"kubernetes.io/metadata.name": "inference", "team": "a"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ({}, True),
        ({"matchLabels": {"team": "a"}}, True),
        ({"matchLabels": {"team": "b"}}, False),
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]}, True),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, False),
        ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["a"]}]}, True),
        ({"matchExpressions": [{"key": "env", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["a"]}]}, False),
    ],
)
def test_label_selectors(selector: dict[str, Any], matches: bool) -> None:
    assert selects(selector, LABELS) is matches
