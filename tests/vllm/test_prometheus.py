"""A real Prometheus (Debian's) scrapes the real server's /metrics and the decode-path plugin's side
port, loads the chart's rules and alerts, and the Kimi K3 dashboards' panels show real vLLM
series. vLLM 0.32.0 (CPU build), not 0.33.0: what it cannot show is listed, with the reason."""

import csv
import math
import time
import urllib.error
from collections.abc import Iterator
from typing import Any

import pytest

from kimi_kernels.decode_metrics import names
from kimi_operator.embedded.processes import wait
from tests.support.catalog import (
    VARIABLES,
    VLLM_CATALOG,
    panel_queries,
    recording_rules,
    rule_groups,
    substitute,
)
from tests.support.prometheus import Proof, prometheus_scraping
from tests.support.tools import require_tool
from tests.vllm.conftest import Served, timed_requests

LABELS = {"namespace": "inference", "deployment": "k3-cpu"}
NOT_INSTRUMENTED = "no Kimi K3 module in vLLM 0.32.0: the decode-path plugin counts no steps"
NO_DRAFTS = "the CPU server runs without speculative decoding: no drafts to accept"
NO_TIER = (
    "the CPU KV tier cannot run on vLLM's CPU build (v1/kv_offload/cpu/spec.py: CUDA-alike and "
    "XPU GPUs only): no offload series (docs/kv-cache.md)"
)
NO_CONNECTOR = (
    "this server has no KV connector: NixlConnector's series come from a decode group of "
    "spec.prefill (tests/vllm/test_disaggregation.py hands KV over with ExampleConnector)"
)
NO_PREFILL_ROLE = (
    'this server is not a prefill group of spec.prefill: no role="prefill" series '
    "(tests/kimi_kernels/decode_metrics/test_prometheus_e2e.py feeds a prefill group's)"
)
# Panels (dashboard, title) that stay empty on this server, and why.
EMPTY_PANELS = {
    ("Kimi K3 decode", "Fast-path fraction"): NOT_INSTRUMENTED,
    ("Kimi K3 decode", "Fallback steps by reason"): NOT_INSTRUMENTED,
    ("Kimi K3 decode", "Acceptance length"): NO_DRAFTS,
    ("Kimi K3 decode", "Speculative decoding: acceptance length"): NO_DRAFTS,
    ("Kimi K3 decode", "Speculative decoding: acceptance by position"): NO_DRAFTS,
    ("Kimi K3 decode", "CPU KV tier: hit rate"): NO_TIER,
    ("Kimi K3 decode", "CPU KV tier: traffic and transfer load"): NO_TIER,
    ("Kimi K3 decode", "CPU KV tier: share pinned by transfers"): NO_TIER,
    ("Kimi K3 decode", "CPU KV tier: failed stores"): NO_TIER,
    ("Kimi K3 decode", "Disaggregated prefill: KV transfers"): NO_CONNECTOR,
    ("Kimi K3 decode", "Disaggregated prefill: autoscaling"): NO_PREFILL_ROLE,
}
EMPTY_RULES = {
    "kimi:decode_fast_path_fraction:ratio_5m": NOT_INSTRUMENTED,
    "kimi:decode_fallback_steps:rate_5m": NOT_INSTRUMENTED,
    "kimi:spec_decode_acceptance_length:ratio_5m": NO_DRAFTS,
    "kimi:spec_decode_acceptance_per_position:ratio_5m": NO_DRAFTS,
    "kimi:offload_hit_ratio:ratio_5m": NO_TIER,
    "kimi:prefill_serving_groups:count": NO_PREFILL_ROLE,
    "kimi:prefill_num_requests_waiting:sum": NO_PREFILL_ROLE,
    "kimi:prefill_time_to_first_token_seconds:p90_5m": NO_PREFILL_ROLE,
}
# vLLM 0.33.0 metrics registered by default that vLLM 0.32.0 (CPU build) does not serve.
MISSING_IN_0_32: set[str] = set()


@pytest.fixture(scope="module")
def prometheus(served: Served) -> Iterator[Proof]:
    side = served.server.metrics_url.split("/")[2]
    scrape_configs = [
        {"job_name": job, "static_configs": [{"targets": [target], "labels": labels}]}
        for job, target, labels in (
            ("vllm", served.root.split("/")[2], LABELS),
            ("kimi-decode-path", side, LABELS | {"pod": "k3-cpu-0"}),
        )
    ]
    with prometheus_scraping(require_tool("prometheus"), scrape_configs) as (url, alive):
        proof = Proof(url, 0, [])

        def scraped() -> bool:
            alive()
            try:
                targets = proof.api("targets")["activeTargets"]
            except urllib.error.URLError:  # still starting
                return False
            return len(targets) == 2 and all(t["health"] == "up" for t in targets)

        wait(scraped, 60, "both targets to be scraped")
        for _ in range(3):  # requests spread over a few scrapes: rates need two samples
            timed_requests(served, 2, 32)
            time.sleep(1.5)
        time.sleep(2.5)  # two rule evaluations after the last sample
        yield proof


def values(result: list[dict[str, Any]]) -> list[float]:
    return [float(series["value"][1]) for series in result]


def test_targets_up_and_rules_loaded(prometheus: Proof) -> None:
    targets = prometheus.api("targets")["activeTargets"]
    assert all(t["health"] == "up" for t in targets), targets
    groups = prometheus.api("rules")["groups"]
    assert sorted(g["name"] for g in groups) == sorted(g["name"] for g in rule_groups())
    assert all(r["health"] == "ok" for g in groups for r in g["rules"]), groups


def test_every_rule_has_data_and_no_nan(prometheus: Proof) -> None:
    empty, nan = [], []
    for name in recording_rules():
        found = values(prometheus.query(name))
        if not found:
            empty.append(name)
        nan += [name for v in found if math.isnan(v)]
    # The prefix-cache hit ratio among those with data: the server caches on every machine.
    assert sorted(empty) == sorted(EMPTY_RULES)
    assert nan == []


def test_every_panel_shows_real_series(prometheus: Proof) -> None:
    variables = VARIABLES | {"gpu_hour_price": "3"}
    empty = {
        (board, panel)
        for board, panel, expr in panel_queries()
        if board.startswith("Kimi K3") and not prometheus.query(substitute(expr, variables))
    }
    assert empty == set(EMPTY_PANELS)
    decode = values(prometheus.query("kimi:decode_tokens_per_second_per_user:mean_5m"))
    assert len(decode) == 1
    assert decode[0] > 10
    assert values(prometheus.query("kimi:engine_gpus:sum")) == [1.0]


def test_not_instrumented_alert_is_pending(prometheus: Proof) -> None:
    alerts = prometheus.api("alerts")["alerts"]
    pending = {a["labels"]["alertname"]: a["state"] for a in alerts}
    assert pending == {"KimiDecodePathNotInstrumented": "pending"}
    value = values(prometheus.query(names.DECODE_PATH_INSTRUMENTED))
    assert value == [0.0]


def test_metric_names_vllm_0_32_lacks(served: Served) -> None:
    """Which of vLLM 0.33.0's default metrics the CPU build (0.32.0) does not serve."""
    served_names = {
        line.split()[2] for line in served.metrics_text().splitlines() if line.startswith("# TYPE")
    }
    with VLLM_CATALOG.open() as f:
        default = {
            row["name"]
            for row in csv.DictReader(f, delimiter="\t")
            if row["notes"].startswith("default")
        }
    # prometheus-client names a counter's family without its _total.
    served_names |= {name.removesuffix("_total") for name in served_names}
    assert default - served_names == MISSING_IN_0_32
