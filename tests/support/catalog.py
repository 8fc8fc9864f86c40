"""Every query of the chart (recording rules, alerts, dashboard panels and variables), and the
metric names a query may reference."""

import csv
import json
import re
from typing import Any

import promql_parser
import yaml

from kimi_kernels.decode_metrics import names
from kimi_operator.controller.metrics import Metrics
from kimi_operator.embedded.upstream import VLLM_METRICS, upstream_file
from kimi_operator.observability.dashboards import DEFAULT_GPU_HOUR_PRICE, PRICE_VARIABLE
from tests.support.repo import ROOT

CHART = ROOT / "charts" / "kimi-operator"
RULES = CHART / "rules" / "kimi-k3.rules.yaml"
DASHBOARDS = sorted((CHART / "dashboards").glob("*.json"))
VLLM_CATALOG = upstream_file(VLLM_METRICS)

# What Grafana puts in place of the template variables ("All" is `.*`).
VARIABLES = {
    "datasource": "prometheus",
    "namespace": ".*",
    "deployment": ".*",
    "model": ".*",
    PRICE_VARIABLE: DEFAULT_GPU_HOUR_PRICE,
}


def substitute(expr: str, variables: dict[str, str] = VARIABLES) -> str:
    def value(match: re.Match[str]) -> str:
        return variables[match.group(1) or match.group(2)]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def recording_rules() -> dict[str, str]:
    return {r["record"]: r["expr"] for g in rule_groups() for r in g["rules"] if "record" in r}


def alert_rules() -> dict[str, str]:
    return {r["alert"]: r["expr"] for g in rule_groups() for r in g["rules"] if "alert" in r}


def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard title, panel title, expr) of every panel target."""
    queries = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                queries.append((board["title"], panel["title"], target["expr"]))
    return queries


def variable_queries() -> list[tuple[str, str, str]]:
    queries = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                queries.append((board["title"], variable["name"], variable["query"]))
    return queries


def label_values_selector(query: str) -> str:
    """The series selector of a Grafana `label_values(selector, label)` query."""
    match = re.fullmatch(r"label_values\((.*), *(\w+)\)", query)
    assert match is not None, query
    return match.group(1)


def metric_names(expr: str) -> set[str]:
    found: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            found.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def vllm_samples() -> set[str]:
    with VLLM_CATALOG.open() as f:
        rows = csv.DictReader(f, delimiter="\t")
        return {sample for row in rows for sample in row["samples"].split(",")}


def kimi_kernels_samples() -> set[str]:
    histograms = (names.REQUEST_DECODE_TPS, names.REQUEST_TTFT)
    samples = {f"{h}_{suffix}" for h in histograms for suffix in ("bucket", "sum", "count")}
    return samples | {
        names.BUILD_INFO,
        names.ENGINE_GPUS,
        names.SCHEDULER_CONFIG_INFO,
        f"{names.DECODE_STEPS}_total",
        names.DECODE_PATH_INSTRUMENTED,
    }


def operator_samples() -> set[str]:
    metrics = Metrics()
    metrics.reconciles.labels("create", "reconciled")
    metrics.errors.labels("temporary")
    metrics.duration.labels("create").observe(0.1)
    metrics.observe_request("get", "KimiDeployment", 200)
    metrics.set_conditions("uid-1", {"conditions": [{"type": "Ready", "status": "True"}]})
    metrics.group_failures.labels("OOMKilled")
    metrics.evacuations.labels("Cordoned")
    metrics.set_slo("uid-1", "ns", "k3", {"sloAutoscaler": {"decode": SLO_STATUS}})
    return {s.name for family in metrics.registry.collect() for s in family.samples}


# A role's status.sloAutoscaler entry with every figure the operator's SLO gauges show.
SLO_STATUS = {
    "desiredReplicas": 2,
    "load": {"requestRate": 1.0, "promptTokens": 8000, "outputTokens": 400, "prefixHitRate": 0.5},
    "forecast": {"at": "t", "level": 1.0, "trend": 0.0, "horizonSeconds": 600, "requestRate": 1.5},
    "correction": {"slower": 1.0, "ttftError": 0.1, "decodeError": -0.05},
    "needed": {"replicas": 2, "ttftSeconds": 1.2, "decodeTokensPerSecond": 60.0},
}


def known_names() -> set[str]:
    return vllm_samples() | kimi_kernels_samples() | operator_samples() | set(recording_rules())
