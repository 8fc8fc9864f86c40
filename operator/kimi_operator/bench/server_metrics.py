"""The server's Prometheus counters before and after a run: spec-decode acceptance, fast path, the
server's own per-request decode rate and inter-token latency (to check the client's timing), and
the prefix-cache hit rate, overall and per TP group (what routing by prefix is for); on a decode
group of spec.prefill, the KV hand-over (docs/disaggregation.md)."""

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from kimi_operator.bench.results import PrefixCacheGroup, ServedConfig, ServerMetrics

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DECODE_STEPS = "kimi_decode_steps_total"  # kimi_kernels' plugin: labels path, reason
BUILD_INFO = "kimi_build_info"  # kimi_kernels' plugin: labels vllm_version, decode_backend, ...
# The settings the server runs with: the scheduler's (kimi_kernels' plugin), the cache's (vLLM).
CONFIG_INFO = ("kimi_scheduler_config_info", "vllm:cache_config_info")
KIMI_DECODE_RATE = "kimi_request_decode_tokens_per_second"  # kimi_kernels: mean of per-request
DECODE_TIME = "vllm:request_decode_time_seconds"  # vLLM's own, per request: first to last token
GENERATION_TOKENS = "vllm:request_generation_tokens"
ITL = "vllm:inter_token_latency_seconds"
# Counters of prompt tokens looked up in, and found in, vLLM's prefix cache (0.33.0 catalog).
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
# Prompt tokens by where their KV came from (local_compute, local_cache_hit, external_kv_transfer).
PROMPT_SOURCES = "vllm:prompt_tokens_by_source_total"
# NixlConnector's own, on the side that reads the KV (the decode group).
NIXL_XFER_TIME = "vllm:nixl_xfer_time_seconds"
NIXL_FAILED = "vllm:nixl_num_failed_transfers_total"
# The KV connector's: with kvCache.cpuOffload, tokens looked up in (and found in) the CPU tier,
# those the GPU prefix cache missed; and the bytes moved each way (OffloadingConnector only).
OFFLOAD_QUERIES = "vllm:external_prefix_cache_queries_total"
OFFLOAD_HITS = "vllm:external_prefix_cache_hits_total"
OFFLOAD_LOADED = "vllm:kv_offload_load_bytes_total"
OFFLOAD_STORED = "vllm:kv_offload_store_bytes_total"


@dataclass
class Snapshot:
    """Sums of each metric over its series, plus decode steps by (path, reason) and build info."""

    totals: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    steps: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    info: dict[str, str] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)  # the CONFIG_INFO families' labels
    sources: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # PROMPT_SOURCES


def parse(text: str) -> Snapshot:
    snapshot = Snapshot()
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match is None or line.startswith("#"):
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        name = match["name"]
        labels = dict(_LABEL.findall(match["labels"] or ""))
        snapshot.totals[name] += value
        if name == DECODE_STEPS:
            snapshot.steps[labels.get("path", ""), labels.get("reason", "")] += value
        elif name == BUILD_INFO:
            snapshot.info = labels
        elif name in CONFIG_INFO:
            snapshot.config |= labels
        elif name == PROMPT_SOURCES:
            snapshot.sources[labels.get("source", "")] += value
    return snapshot


def _integer(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _flag(text: str | None) -> bool | None:
    return {"True": True, "False": False}.get(text or "")


def served_config(snapshot: Snapshot) -> ServedConfig | None:
    """What the server says it runs with; None when it says nothing."""
    labels = snapshot.config
    if not labels:
        return None
    return ServedConfig(
        max_num_seqs=_integer(labels.get("max_num_seqs")),
        max_num_batched_tokens=_integer(labels.get("max_num_batched_tokens")),
        enable_chunked_prefill=_flag(labels.get("enable_chunked_prefill")),
        max_model_len=_integer(labels.get("max_model_len")),
        enable_prefix_caching=_flag(labels.get("enable_prefix_caching")),
        block_size=_integer(labels.get("block_size")),
    )


def delta(before: Snapshot | None, after: Snapshot | None) -> ServerMetrics:
    """What happened on the server during the run (counters after minus before)."""
    if before is None or after is None:
        return ServerMetrics(reachable=False)

    def change(name: str) -> float:
        return after.totals.get(name, 0.0) - before.totals.get(name, 0.0)

    def mean(histogram: str) -> float | None:
        count = change(f"{histogram}_count")
        return change(f"{histogram}_sum") / count if count > 0 else None

    # The plugin's mean per-request rate (the client's definition); else vLLM's own figures:
    # tokens after each request's first over the requests' decode time.
    rate, source = mean(KIMI_DECODE_RATE), KIMI_DECODE_RATE
    decode_time = change(f"{DECODE_TIME}_sum")
    if rate is None and decode_time > 0:
        decoded = change(f"{GENERATION_TOKENS}_sum") - change(f"{GENERATION_TOKENS}_count")
        rate, source = decoded / decode_time, DECODE_TIME
    drafts, accepted, draft_tokens = change(DRAFTS), change(ACCEPTED), change(DRAFT_TOKENS)
    steps = {key: after.steps[key] - before.steps.get(key, 0.0) for key in after.steps}
    all_steps = sum(steps.values())
    fast = sum(v for (path, _), v in steps.items() if path == "specialized")
    reasons: dict[str, float] = defaultdict(float)
    for (path, reason), value in steps.items():
        if path != "specialized" and value and all_steps:
            reasons[reason or "unknown"] += value / all_steps
    return ServerMetrics(
        reachable=True,
        served=served_config(after),
        spec_decode_acceptance_length=1 + accepted / drafts if drafts > 0 else None,
        spec_decode_acceptance_rate=accepted / draft_tokens if draft_tokens > 0 else None,
        fast_path_fraction=fast / all_steps if all_steps > 0 else None,
        fallback_reasons=dict(reasons),
        decode_tokens_per_s=rate,
        decode_rate_metric=source if rate is not None else None,
        inter_token_latency_s=mean(ITL),
        prefix_cache_hit_rate=_ratio(change(PREFIX_HITS), change(PREFIX_QUERIES)),
        external_prompt_fraction=_ratio(
            after.sources.get("external_kv_transfer", 0.0)
            - before.sources.get("external_kv_transfer", 0.0),
            sum(after.sources.values()) - sum(before.sources.values()),
        ),
        kv_transfer_time_s=mean(NIXL_XFER_TIME),
        kv_transfer_failures=int(change(NIXL_FAILED)) if NIXL_FAILED in after.totals else None,
        offload_hit_rate=_ratio(change(OFFLOAD_HITS), change(OFFLOAD_QUERIES)),
        offload_hit_tokens=change(OFFLOAD_HITS) if OFFLOAD_HITS in after.totals else None,
        offload_loaded_bytes=change(OFFLOAD_LOADED) if OFFLOAD_LOADED in after.totals else None,
        offload_stored_bytes=change(OFFLOAD_STORED) if OFFLOAD_STORED in after.totals else None,
    )


def _ratio(hits: float, queries: float) -> float | None:
    return hits / queries if queries > 0 else None


def prefix_cache_groups(
    scraped: Mapping[str, tuple[Snapshot | None, Snapshot | None]],
) -> list[PrefixCacheGroup]:
    """Each group's prefix-cache counters over the run, from its leader's /metrics before and
    after (URL -> snapshots)."""
    groups = []
    for url, (before, after) in scraped.items():
        if before is None or after is None:
            groups.append(PrefixCacheGroup(metrics_url=url, queries=None, hits=None, hit_rate=None))
            continue
        queries = after.totals.get(PREFIX_QUERIES, 0.0) - before.totals.get(PREFIX_QUERIES, 0.0)
        hits = after.totals.get(PREFIX_HITS, 0.0) - before.totals.get(PREFIX_HITS, 0.0)
        groups.append(
            PrefixCacheGroup(
                metrics_url=url, queries=queries, hits=hits, hit_rate=_ratio(hits, queries)
            )
        )
    return groups


def with_groups(metrics: ServerMetrics, groups: list[PrefixCacheGroup]) -> ServerMetrics:
    """The run's metrics with the groups' prefix caches; the overall hit rate over all of them
    (the one server behind --metrics-url is only one group)."""
    if not groups:
        return metrics
    read = [g for g in groups if g.queries is not None and g.hits is not None]
    queries = sum(g.queries or 0.0 for g in read)
    hits = sum(g.hits or 0.0 for g in read)
    overall = _ratio(hits, queries) if len(read) == len(groups) else None
    return metrics.model_copy(
        update={"prefix_cache_groups": groups, "prefix_cache_hit_rate": overall}
    )
