"""What the autoscalers of spec.autoscaling read: the KEDA trigger's query and prometheus-adapter's
external metric queries parse, name only the chart's recording rules, and evaluate on
Prometheus's own engine (promtool test rules, over the chart's rules) to the numbers whose
quotient by the target is the number of groups wanted."""

import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kimi_operator.builders.autoscaling import horizontal_pod_autoscaler
from tests.support.autoscaling import NAME, NAMESPACE, TARGETS, adapter_query, deployment, trigger
from tests.support.catalog import RULES, metric_names, recording_rules
from tests.support.tools import require_tool

# Two serving groups (one engine each): 12 and 6 requests waiting, KV caches 90% and 70% full;
# 10 requests a minute, one decoding in (5, 10] tok/s and nine in (10, 20]: the p10 user gets
# 10 tok/s. A third group waits for nodes: it has no pod to scrape, so it adds no series.
LABELS = f'namespace="{NAMESPACE}",deployment="{NAME}",model_name="m",engine="0"'
SERIES = [
    *(
        {"series": f'vllm:num_requests_running{{{LABELS},pod="{pod}"}}', "values": "4x20"}
        for pod in ("busy-g0-0", "busy-g1-0")
    ),
    {"series": f'vllm:num_requests_waiting{{{LABELS},pod="busy-g0-0"}}', "values": "12x20"},
    {"series": f'vllm:num_requests_waiting{{{LABELS},pod="busy-g1-0"}}', "values": "6x20"},
    {"series": f'vllm:kv_cache_usage_perc{{{LABELS},pod="busy-g0-0"}}', "values": "0.9x20"},
    {"series": f'vllm:kv_cache_usage_perc{{{LABELS},pod="busy-g1-0"}}', "values": "0.7x20"},
    # A prefill group of spec.prefill: busy, but not one of the groups the autoscaler scales.
    *(
        {"series": f'{metric}{{{LABELS},role="prefill",pod="busy-p0-0"}}', "values": values}
        for metric, values in (
            ("vllm:num_requests_running", "4x20"),
            ("vllm:num_requests_waiting", "50x20"),
            ("vllm:kv_cache_usage_perc", "1x20"),
        )
    ),
    *(
        {
            "series": "kimi_request_decode_tokens_per_second_bucket"
            f'{{namespace="{NAMESPACE}",deployment="{NAME}",model_name="m",le="{le}"}}',
            "values": f"0+{per_minute}x20",
        }
        for le, per_minute in (("5", 0), ("10", 1), ("20", 10), ("+Inf", 10))
    ),
]


def hpa_target(target: str) -> float:
    """The HPA's averageValue, a Kubernetes quantity, as a number."""
    metric: dict[str, Any] = horizontal_pod_autoscaler(deployment(target))["spec"]["metrics"][0]
    quantity: str = metric["external"]["target"]["averageValue"]
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


@pytest.mark.parametrize("target", TARGETS)
def test_queries_parse_and_name_only_recording_rules(target: str) -> None:
    kd = deployment(target)
    for query in (trigger(kd)["query"], adapter_query(kd)):
        used = metric_names(query)
        assert used, query
        assert used <= set(recording_rules()), query


@pytest.mark.parametrize("target", TARGETS)
def test_the_two_autoscalers_want_the_same_groups(target: str) -> None:
    _, keda_value, adapter_value, groups = TARGETS[target]
    threshold = float(trigger(deployment(target))["threshold"])
    assert math.ceil(round(keda_value / threshold, 6)) == groups
    assert math.ceil(round(adapter_value / hpa_target(target), 6)) == groups


def test_queries_evaluate_on_prometheus(tmp_path: Path) -> None:
    expressions = []
    for target, (_, keda_value, adapter_value, _) in TARGETS.items():
        kd = deployment(target)
        for query, value in (
            (trigger(kd)["query"], keda_value),
            (adapter_query(kd), adapter_value),
        ):
            expressions.append(
                {
                    "expr": f"round({query}, 0.001)",
                    "eval_time": "15m",
                    "exp_samples": [{"labels": labels_of(query), "value": value}],
                }
            )
    suite = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": SERIES, "promql_expr_test": expressions}],
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    result = subprocess.run(
        [require_tool("promtool"), "test", "rules", str(tmp_path / "t.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def labels_of(query: str) -> str:
    """The labels a query's result keeps: `sum by (namespace)` keeps namespace, `sum` none."""
    return f'{{namespace="{NAMESPACE}"}}' if "by (namespace)" in query else "{}"
