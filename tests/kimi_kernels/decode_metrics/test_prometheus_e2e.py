"""The proof: a real Prometheus scrapes our plugins' registries and an emitter of vLLM 0.33.0's
names, loads the chart's rules, and every recording rule and every panel query (Grafana variables
substituted) returns data; the decode-rate and cost panels show what was fed, within 5%."""

from collections.abc import Iterator
from typing import Any

import pytest

from kimi_operator import slo_roles
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders.autoscaling import DECODE_SCALE
from kimi_operator.prefill_scaling import SERVING, VALUE, queries
from tests.kimi_kernels.decode_metrics.conftest import TENSOR_PARALLEL
from tests.support.autoscaling import adapter_query, deployment, trigger
from tests.support.catalog import (
    VARIABLES,
    panel_queries,
    recording_rules,
    rule_groups,
    substitute,
)
from tests.support.corpus import POOL, SLO
from tests.support.prometheus import (
    DEPLOYMENT,
    FINISHED,
    GPU_HOUR_PRICE,
    NAMESPACE,
    OUTPUT_TOKENS,
    PROMPT_TOKENS,
    STEP,
    PrefillEmitter,
    Proof,
    expected,
    proof,
)
from tests.support.specs import edited
from tests.support.tools import require_tool

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)

VARIABLES_E2E = VARIABLES | {"gpu_hour_price": str(GPU_HOUR_PRICE)}
# Panel (dashboard, title, legend-free expression index) -> the value it must show.
CHECKED = {
    ("Kimi K3 decode", "Decode tok/s per user (p50)", 0): "decode_p50",
    ("Kimi K3 decode", "Decode tok/s per user (p90)", 0): "decode_p90",
    ("Kimi K3 decode", "Decode tok/s per user", 0): "decode_p50",
    ("Kimi K3 decode", "Decode tok/s per user", 1): "decode_p90",
    ("Kimi K3 decode", "Decode tok/s per user", 2): "decode_mean",
    ("Kimi K3 decode", "Fast-path fraction", 0): "fast_path_fraction",
    ("Kimi K3 decode", "Generation tok/s", 0): "generation_tokens_per_second",
    ("Kimi K3 decode", "Generation tok/s", 1): "tokens_per_gpu_second",
    ("Kimi K3 decode", "Acceptance length", 0): "acceptance_length",
    ("Kimi K3 cost & capacity", "Cost per 1M output tokens", 0): "cost_per_million",
    ("Kimi K3 cost & capacity", "Output tokens per GPU-second", 0): "tokens_per_gpu_second",
    ("Kimi K3 cost & capacity", "GPUs in use", 0): "gpus",
    ("Kimi K3 cost & capacity", "GPUs in use per deployment", 0): "gpus",
    ("Kimi K3 cost & capacity", "Cost per hour", 0): "cost_per_hour",
    ("Kimi K3 cost & capacity", "Output tokens per hour", 0): "tokens_per_hour",
}


@pytest.fixture(scope="module")
def prometheus(vllm_config: Any) -> Iterator[Proof]:
    with proof(require_tool("prometheus"), vllm_config) as running:
        yield running


def prefill_deployment(target: dict[str, float]) -> KimiDeployment:
    scaling = {"maxReplicas": 4, "target": target}
    doc = edited(POOL | {"spec.prefill": {"autoscaling": scaling}, "metadata.name": DEPLOYMENT})
    doc["metadata"]["namespace"] = NAMESPACE
    return KimiDeployment.model_validate(doc)


def numbers(result: list[dict[str, Any]]) -> list[float]:
    return [float(series["value"][1]) for series in result]


def test_scrapes_are_healthy_and_rules_loaded(prometheus: Proof) -> None:
    targets = prometheus.api("targets")["activeTargets"]
    assert {t["labels"]["job"] for t in targets} == {t.job for t in prometheus.targets}
    assert all(t["health"] == "up" for t in targets), targets
    groups = prometheus.api("rules")["groups"]
    assert sorted(g["name"] for g in groups) == sorted(g["name"] for g in rule_groups())
    assert all(r["health"] == "ok" for g in groups for r in g["rules"]), groups


def test_every_recording_rule_returns_data(prometheus: Proof) -> None:
    empty = [name for name in recording_rules() if not prometheus.query(name)]
    assert not empty


def test_every_panel_query_returns_data(prometheus: Proof) -> None:
    empty = [
        f"{board} / {panel}: {expr}"
        for board, panel, expr in panel_queries()
        if not prometheus.query(substitute(expr, VARIABLES_E2E))
    ]
    assert not empty


def test_panels_show_what_was_fed(prometheus: Proof) -> None:
    want = expected(TENSOR_PARALLEL)
    seen: dict[tuple[str, str, int], str] = {}
    for board, panel, expr in panel_queries():
        index = sum(1 for key in seen if key[:2] == (board, panel))
        seen[board, panel, index] = expr
    assert set(CHECKED) <= set(seen)
    for key, name in CHECKED.items():
        values = numbers(prometheus.query(substitute(seen[key], VARIABLES_E2E)))
        assert values == [pytest.approx(want[name], rel=0.05)], f"{key}: {values} != {want[name]}"


def test_per_position_acceptance_and_fallback_reasons(prometheus: Proof) -> None:
    want = expected(TENSOR_PARALLEL)
    by_position = {
        s["metric"]["position"]: float(s["value"][1])
        for s in prometheus.query("kimi:spec_decode_acceptance_per_position:ratio_5m")
    }
    assert by_position["0"] == pytest.approx(want["acceptance_position_0"], rel=0.05)
    assert len(by_position) == 7
    reasons = {
        s["metric"]["reason"]: float(s["value"][1])
        for s in prometheus.query("kimi:decode_fallback_steps:rate_5m > 0")
    }
    assert set(reasons) == {"piecewise_graphs", "prefill"}


def test_variables_filter(prometheus: Proof) -> None:
    """Another namespace selects nothing: the panels really filter on the variables."""
    other = VARIABLES_E2E | {"namespace": "elsewhere"}
    _, _, expr = next(q for q in panel_queries() if q[1] == "Cost per 1M output tokens")
    assert prometheus.query(substitute(expr, other)) == []


def test_autoscaling_queries_read_what_was_fed(prometheus: Proof) -> None:
    """What KEDA's trigger and prometheus-adapter ask this Prometheus for spec.autoscaling: one
    group serves, 2 requests wait on it, its KV cache is half full; the decode floor's value is
    groups x floor / the p10 user's rate."""
    (p10,) = numbers(prometheus.query("kimi:decode_tokens_per_second_per_user:p10_5m"))
    floor = 30
    want = {
        "waitingRequestsPerGroup": (2.0, 2.0),
        "kvCacheUsagePercent": (0.5, 0.5),
        "decodeRateFloor": (floor / p10, DECODE_SCALE / p10),
    }
    for target, (keda_value, adapter_value) in want.items():
        kd = deployment(target, floor, NAMESPACE, DEPLOYMENT)
        assert numbers(prometheus.query(trigger(kd)["query"])) == [pytest.approx(keda_value)]
        assert numbers(prometheus.query(adapter_query(kd))) == [pytest.approx(adapter_value)]
    assert numbers(prometheus.query("kimi:serving_groups:count")) == [1.0]


def test_prefill_autoscaler_queries_read_what_was_fed(prometheus: Proof) -> None:
    """What the operator asks this Prometheus for spec.prefill.autoscaling: 3 requests wait on
    the one prefill group; its first tokens all take 0.4 s, which the p90 interpolates within the
    bucket (0.25 s, 0.5 s] as 0.25 + 0.9 x 0.25."""
    waiting = prefill_deployment({"waitingRequestsPerGroup": 2})
    (value,) = numbers(prometheus.query(queries(waiting)[VALUE]))
    assert value == PrefillEmitter.WAITING
    ttft = prefill_deployment({"ttftSecondsP90": 0.5})
    asked = {key: numbers(prometheus.query(q)) for key, q in queries(ttft).items()}
    assert asked == {VALUE: [pytest.approx(0.475)], SERVING: [1.0]}


def test_slo_scaler_queries_read_what_was_fed(prometheus: Proof) -> None:
    """What the operator asks this Prometheus for spec.autoscaling.slo, from the chart's
    per-role rules: the decode group (no role label) finishes 2 requests/s of 8000 prompt and
    400 output tokens, a quarter of prompt tokens from the prefix cache; the prefill group's
    series are not its load."""
    doc = edited({"spec.autoscaling": {"maxReplicas": 4, "slo": SLO}, "metadata.name": DEPLOYMENT})
    doc["metadata"]["namespace"] = NAMESPACE
    kd = KimiDeployment.model_validate(doc)
    asked = {
        key: numbers(prometheus.query(q)) for key, q in slo_roles.queries(kd, "decode").items()
    }
    (p10,) = numbers(prometheus.query("kimi:decode_tokens_per_second_per_user:p10_5m"))
    assert asked == {
        slo_roles.RATE: [pytest.approx(FINISHED / STEP)],
        slo_roles.PROMPT: [pytest.approx(PROMPT_TOKENS)],
        slo_roles.OUTPUT: [pytest.approx(OUTPUT_TOKENS)],
        slo_roles.HITS: [pytest.approx(0.25)],
        slo_roles.SERVING: [1.0],
        slo_roles.TTFT: [pytest.approx(0.475)],  # the p90 of 0.4 s in (0.25 s, 0.5 s]
        slo_roles.DECODE: [pytest.approx(p10)],
    }
