"""A real Prometheus (Debian's) on 127.0.0.1 scraping known data, for the end-to-end proof of the
rules and dashboards and for the README picture (scripts/observability_picture.py).

Targets, all text format on 127.0.0.1:
- `kimi-plugin`: the stat-logger plugin's registry, fed finished requests as vLLM builds them;
- `kimi-decode-path`: the decode-path plugin's registry (what it serves on $KIMI_METRICS_PORT);
- `vllm`: an emitter of vLLM 0.33.0's metric names (third_party/vllm-0.33.0-metrics.tsv);
- `vllm-prefill`: a prefill group's queue and first tokens (`role="prefill"`: spec.prefill);
- `operator`: kimi_operator's own registry (scraped with honor_labels, as the chart must).

`rate(...[5m])` needs minutes of history, so each target replays SNAPSHOTS states of its real
registry (rendered by prometheus-client after each step) with explicit sample timestamps STEP
seconds apart, one per scrape, the last one at the moment the servers start: Prometheus honours
them, and the test sees 12 minutes of history within seconds. The first half is a degraded phase
(fast path mostly off, slower users); the last 6 minutes are steady at the values of EXPECTED.
"""

import contextlib
import json
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from kimi_kernels.decode_metrics import names
from kimi_kernels.decode_metrics.decode_path import DecodePathRecorder
from kimi_kernels.decode_metrics.stat_logger import KimiStatLogger
from kimi_operator.controller.metrics import Metrics
from kimi_operator.embedded.processes import free_port, wait
from tests.support.catalog import SLO_STATUS
from tests.support.feed import record, served
from tests.support.repo import ROOT

RULES = ROOT / "charts" / "kimi-operator" / "rules" / "kimi-k3.rules.yaml"
STEP = 30  # seconds of history between snapshots
SNAPSHOTS = 24
STEADY_FROM = 12  # snapshots from here on are the steady phase
SCRAPE_INTERVAL = "500ms"
NAMESPACE, DEPLOYMENT = "inference", "k3"
GPU_HOUR_PRICE = 3.0
SPECULATIVE_TOKENS = 7
ACCEPTED_PER_POSITION = (90, 75, 60, 50, 35, 25, 15)  # per 100 drafts: acceptance length 4.5

# What the steady phase feeds, per STEP, and what the panels must show.
STEADY_RATES = [605 + 10 * i for i in range(40)]  # tok/s per request: p50 800, p90 960, mean 800
DEGRADED_RATES = [305 + 5 * i for i in range(40)]
GENERATION_TOKENS = {"degraded": 2400, "steady": 4800}  # per STEP: 160 tok/s when steady
FAST_PATH = {"degraded": (20, 80), "steady": (90, 10)}  # (specialized, piecewise) steps per STEP
PREFILL_STEPS = 20  # per STEP, never part of the fast-path fraction
FINISHED, PROMPT_TOKENS, OUTPUT_TOKENS = 60, 8000, 400  # requests per STEP (2/s), their lengths


def expected(gpus: int) -> dict[str, float]:
    tokens_per_second = GENERATION_TOKENS["steady"] / STEP
    return {
        "decode_p50": 800.0,
        "decode_p90": 960.0,
        "decode_mean": 800.0,
        "fast_path_fraction": 0.9,
        "generation_tokens_per_second": tokens_per_second,
        "tokens_per_gpu_second": tokens_per_second / gpus,
        "gpus": float(gpus),
        "cost_per_million": gpus * GPU_HOUR_PRICE / (tokens_per_second * 3600) * 1e6,
        "cost_per_hour": gpus * GPU_HOUR_PRICE,
        "tokens_per_hour": tokens_per_second * 3600,
        "acceptance_length": 4.5,
        "acceptance_position_0": 0.9,
    }


class VllmEmitter:
    """vLLM 0.33.0's metric names with known values (names from its catalog)."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        r, labels, values = self.registry, ["model_name", "engine"], (model_name, "0")
        self.values = values

        def counter(name: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, name, [*labels, *extra], registry=r)

        self.generation = counter("vllm:generation_tokens").labels(*values)
        self.prefix_queries = counter("vllm:prefix_cache_queries").labels(*values)
        self.prefix_hits = counter("vllm:prefix_cache_hits").labels(*values)
        self.drafts = counter("vllm:spec_decode_num_drafts").labels(*values)
        self.draft_tokens = counter("vllm:spec_decode_num_draft_tokens").labels(*values)
        self.accepted = counter("vllm:spec_decode_num_accepted_tokens").labels(*values)
        per_pos = counter("vllm:spec_decode_num_accepted_tokens_per_pos", ("position",))
        self.per_position = [per_pos.labels(*values, str(p)) for p in range(SPECULATIVE_TOKENS)]
        self.running = Gauge("vllm:num_requests_running", "", labels, registry=r).labels(*values)
        self.waiting = Gauge("vllm:num_requests_waiting", "", labels, registry=r).labels(*values)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "", labels, registry=r).labels(*values)
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds", "", labels, registry=r,
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1),
        ).labels(*values)  # fmt: skip
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "", labels, registry=r, buckets=names.TTFT_BUCKETS
        ).labels(*values)
        # The CPU KV tier (spec.kvCache.cpuOffload): its lookups and traffic.
        self.tier_queries = counter("vllm:external_prefix_cache_queries").labels(*values)
        self.tier_hits = counter("vllm:external_prefix_cache_hits").labels(*values)
        self.tier_loaded = counter("vllm:kv_offload_load_bytes").labels(*values)
        self.tier_stored = counter("vllm:kv_offload_store_bytes").labels(*values)
        self.tier_failures = counter("vllm:kv_offload_allocation_failure").labels(*values)
        self.tier_pinned = Gauge(
            "vllm:kv_offload_cpu_cache_usage_perc", "", labels, registry=r
        ).labels(*values)
        # Disaggregated prefill (spec.prefill): prompt tokens by source, NIXL's transfers.
        self.by_source = counter("vllm:prompt_tokens_by_source", ("source",))
        self.nixl_time = Histogram(
            "vllm:nixl_xfer_time_seconds", "", labels, registry=r, buckets=(0.01, 0.1, 1.0)
        ).labels(*values)
        self.nixl_failed = counter("vllm:nixl_num_failed_transfers").labels(*values)
        # What the SLO scaler reads of the load: requests finished and their lengths.
        self.finished = counter("vllm:request_success", ("finished_reason",)).labels(
            *values, "stop"
        )
        self.prompt_tokens = Histogram(
            "vllm:request_prompt_tokens", "", labels, registry=r, buckets=(1024, 8192, 65536)
        ).labels(*values)
        self.output_tokens = Histogram(
            "vllm:request_generation_tokens", "", labels, registry=r, buckets=(128, 1024)
        ).labels(*values)

    def step(self, phase: str) -> None:
        self.generation.inc(GENERATION_TOKENS[phase])
        self.prefix_queries.inc(1000)
        self.prefix_hits.inc(250)
        self.drafts.inc(100)
        self.draft_tokens.inc(100 * SPECULATIVE_TOKENS)
        self.accepted.inc(sum(ACCEPTED_PER_POSITION))
        for counter, accepted in zip(self.per_position, ACCEPTED_PER_POSITION, strict=True):
            counter.inc(accepted)
        self.running.set(8)
        self.waiting.set(2 if phase == "steady" else 6)
        self.kv.set(0.5 if phase == "steady" else 0.8)
        for _ in range(100):
            self.itl.observe(0.0015 if phase == "steady" else 0.004)
        for _ in range(40):
            self.ttft.observe(0.4)
        self.tier_queries.inc(750)
        self.tier_hits.inc(300)
        self.tier_loaded.inc(2**30)
        self.tier_stored.inc(2**29)
        self.tier_failures.inc(0)
        self.tier_pinned.set(0.1)
        self.by_source.labels(*self.values, "local_compute").inc(100)
        self.by_source.labels(*self.values, "external_kv_transfer").inc(900)
        self.nixl_time.observe(0.05)
        self.nixl_failed.inc(0)
        self.finished.inc(FINISHED)
        for _ in range(FINISHED):
            self.prompt_tokens.observe(PROMPT_TOKENS)
            self.output_tokens.observe(OUTPUT_TOKENS)


class PrefillEmitter:
    """A prefill group of spec.prefill (scraped with `role="prefill"`, as the PodMonitor labels
    it): what the prefill autoscaler's rules read. Its first tokens take what the decode group's
    do, so the deployment's TTFT rules show the same values with it."""

    WAITING = 3

    def __init__(self, model_name: str) -> None:
        self.registry = r = CollectorRegistry()
        labels, values = ["model_name", "engine"], (model_name, "0")
        self.running = Gauge("vllm:num_requests_running", "", labels, registry=r).labels(*values)
        self.waiting = Gauge("vllm:num_requests_waiting", "", labels, registry=r).labels(*values)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "", labels, registry=r, buckets=names.TTFT_BUCKETS
        ).labels(*values)

    def step(self) -> None:
        self.running.set(4)
        self.waiting.set(self.WAITING)
        for _ in range(40):
            self.ttft.observe(0.4)


def stamp(text: str, millis: int) -> str:
    return "".join(
        line if line.startswith("#") or not line.strip() else f"{line.rstrip()} {millis}\n"
        for line in text.splitlines(keepends=True)
    )


@dataclass
class Target:
    """A scrape target replaying its snapshots, one per scrape, the last one forever after."""

    job: str
    snapshots: list[str]
    labels: dict[str, str]
    honor_labels: bool = False
    served: int = 0
    port: int = 0

    def body(self) -> bytes:
        index = min(self.served, len(self.snapshots) - 1)
        self.served += 1
        return self.snapshots[index].encode()

    @property
    def done(self) -> bool:
        return self.served >= len(self.snapshots)


def serve_target(target: Target) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = target.body()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    target.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def build_targets(vllm_config: Any) -> tuple[list[Target], int]:
    """Feeds every source SNAPSHOTS times; returns the targets and the history's last instant."""
    model = str(vllm_config.model_config.served_model_name)
    plugin = CollectorRegistry()
    stat_logger = KimiStatLogger(vllm_config, [0], registry=plugin)
    decode = DecodePathRecorder(CollectorRegistry())
    decode.on_runner(vllm_config, tp_rank=0, local_rank=1)
    decode.instrumented.set(1)
    emitter, prefill = VllmEmitter(model), PrefillEmitter(model)
    operator = Metrics()
    registries = {"kimi-plugin": plugin, "kimi-decode-path": decode.registry}
    registries |= {"vllm": emitter.registry, "operator": operator.registry}
    registries |= {"vllm-prefill": prefill.registry}
    snapshots: dict[str, list[str]] = {job: [] for job in registries}
    end = int(time.time() * 1000)
    for k in range(SNAPSHOTS):
        phase = "steady" if k >= STEADY_FROM else "degraded"
        rates = STEADY_RATES if phase == "steady" else DEGRADED_RATES
        decode_seconds = 2.0
        record(
            stat_logger,
            served([(1 + int(rate * decode_seconds), 0.4, decode_seconds) for rate in rates]),
        )
        specialized, piecewise = FAST_PATH[phase]
        for _ in range(specialized):
            decode.count(names.PATH_SPECIALIZED, names.REASON_NONE)
        for _ in range(piecewise):
            decode.count(names.PATH_FALLBACK, names.REASON_PIECEWISE_GRAPHS)
        for _ in range(PREFILL_STEPS):
            decode.count(names.PATH_FALLBACK, names.REASON_PREFILL)
        emitter.step(phase)
        prefill.step()
        operator.reconciles.labels("resync", "reconciled").inc(10)
        operator.errors.labels("temporary").inc(1 if phase == "degraded" else 0)
        operator.duration.labels("resync").observe(0.2)
        operator.observe_request("patch", "KimiDeployment", 200)
        operator.group_failures.labels("Crashed").inc(1 if phase == "degraded" else 0)
        operator.evacuations.labels("Cordoned").inc(1 if phase == "degraded" else 0)
        operator.set_conditions("uid-k3", {"conditions": [{"type": "Ready", "status": "True"}]})
        operator.set_conditions(
            "uid-k3-canary", {"conditions": [{"type": "Ready", "status": "False"}]}
        )
        operator.set_slo("uid-k3", NAMESPACE, DEPLOYMENT, {"sloAutoscaler": {"decode": SLO_STATUS}})
        millis = end - (SNAPSHOTS - 1 - k) * STEP * 1000
        for job, registry in registries.items():
            snapshots[job].append(stamp(generate_latest(registry).decode(), millis))
    scrape_labels = {"namespace": NAMESPACE, "deployment": DEPLOYMENT}
    labels = {"operator": {}, "vllm-prefill": scrape_labels | {"role": "prefill"}}
    targets = [
        Target(job, snaps, labels.get(job, scrape_labels), honor_labels=job == "operator")
        for job, snaps in snapshots.items()
    ]
    return targets, end


@dataclass
class Proof:
    url: str
    end_ms: int
    targets: list[Target]

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        params = {"query": expr, "start": str(start), "end": str(end), "step": str(step)}
        result: list[dict[str, Any]] = self.api("query_range", **params)["result"]
        return result


@contextlib.contextmanager
def prometheus_scraping(
    prometheus: str, scrape_configs: list[dict[str, Any]]
) -> Iterator[tuple[str, Callable[[], None]]]:
    """Debian's Prometheus on 127.0.0.1 with the chart's rules, scraping `scrape_configs`; yields
    its URL and a check that raises when it has exited."""
    with tempfile.TemporaryDirectory(prefix="kimi-prometheus-") as tmp:
        config = {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": scrape_configs,
        }
        (Path(tmp) / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        process = subprocess.Popen(
            [
                prometheus,
                f"--config.file={tmp}/prometheus.yml",
                f"--storage.tsdb.path={tmp}/data",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

        def alive() -> None:
            if process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {process.stderr.read().decode()}")  # type: ignore[union-attr]

        try:
            yield f"http://127.0.0.1:{port}", alive
        finally:
            process.terminate()
            process.wait(timeout=10)


@contextlib.contextmanager
def proof(prometheus: str, vllm_config: Any) -> Iterator[Proof]:
    """Prometheus scraping every target until each has replayed its history, rules evaluated."""
    targets, end_ms = build_targets(vllm_config)
    servers = [serve_target(t) for t in targets]
    scrape_configs = [
        {
            "job_name": t.job,
            "honor_labels": t.honor_labels,
            "static_configs": [{"targets": [f"127.0.0.1:{t.port}"], "labels": t.labels}],
        }
        for t in targets
    ]
    try:
        with prometheus_scraping(prometheus, scrape_configs) as (url, alive):

            def ready() -> bool:
                alive()
                return all(t.done for t in targets)

            wait(ready, 60, "every target's history to be scraped")
            time.sleep(2.5)  # two rule evaluations after the last sample
            yield Proof(url, end_ms, targets)
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
