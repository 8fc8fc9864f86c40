"""Every query parses, and references only metrics that exist."""

import json

import pytest

from kimi_operator.observability.dashboards import SELECTOR
from tests.support.catalog import (
    DASHBOARDS,
    alert_rules,
    known_names,
    label_values_selector,
    metric_names,
    panel_queries,
    recording_rules,
    substitute,
    variable_queries,
    vllm_samples,
)

EXPRESSIONS = (
    [(f"record {name}", expr) for name, expr in recording_rules().items()]
    + [(f"alert {name}", expr) for name, expr in alert_rules().items()]
    + [(f"{board} / {panel}", expr) for board, panel, expr in panel_queries()]
    + [(f"{board} / ${name}", label_values_selector(q)) for board, name, q in variable_queries()]
)


@pytest.mark.parametrize(("where", "expr"), EXPRESSIONS, ids=[w for w, _ in EXPRESSIONS])
def test_expression_parses_and_names_exist(where: str, expr: str) -> None:
    used = metric_names(substitute(expr))
    assert used, f"{where}: no metric in {expr}"
    unknown = used - known_names()
    assert not unknown, f"{where}: unknown metrics {sorted(unknown)}"


def test_catalog_check_catches_a_removed_name() -> None:
    # The names most published vLLM dashboards still query: gone from vLLM 0.33.0.
    old = metric_names(
        "rate(vllm:time_per_output_token_seconds_bucket[5m]) + vllm:gpu_cache_usage_perc"
    )
    assert old - known_names() == old
    assert "vllm:inter_token_latency_seconds_bucket" in vllm_samples()


def test_unknown_variable_is_an_error() -> None:
    with pytest.raises(KeyError):
        substitute("x{a=~'$nope'}")


def test_kimi_dashboards_have_the_template_variables() -> None:
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        variables = {v["name"] for v in board["templating"]["list"]}
        assert "datasource" in variables, path.name
        if path.name.startswith("kimi-k3"):
            assert {"namespace", "deployment", "model"} <= variables, path.name
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}", (path.name, panel["title"])


def test_every_kimi_panel_filters_on_the_variables() -> None:
    for board, panel, expr in panel_queries():
        if board.startswith("Kimi K3"):
            assert SELECTOR in expr, f"{board} / {panel}: {expr}"


def test_every_recording_rule_is_on_a_dashboard() -> None:
    shown = set().union(*(metric_names(substitute(e)) for _, _, e in panel_queries()))
    assert set(recording_rules()) - shown == set()
