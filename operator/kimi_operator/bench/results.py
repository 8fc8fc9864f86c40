"""What a run writes to `results.json` and `bench compare` reads back."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Profile = Literal["headline", "long-context", "agentic", "calibration"]
Api = Literal["completions", "chat"]
# Open: every request at its trace time. Closed: a request waits for the answers it depends on.
Replay = Literal["open", "closed"]
# How a request's token counts were obtained: usage in every chunk (exact per chunk), usage only
# at the end (exact total, spread evenly over chunks), or no usage at all (chunks counted, which
# undercounts when a chunk carries several tokens, as with speculative decoding).
TokenCounts = Literal["per_chunk_usage", "final_usage", "chunks"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Distribution(Model):
    p50: float
    p90: float
    p99: float
    mean: float


class TraceInfo(Model):
    source: str = Field(description="The trace file, or `synthetic` for a generated one.")
    sha256: str = Field(description="Digest of the trace as replayed (canonical JSONL).")
    entries: int
    seed: int | None = Field(description="Generator seed for a synthetic trace.")


class ServerInfo(Model):
    version: str | None = None
    decode_backend: str | None = None
    metrics_url: str | None = None


class RunConfig(Model):
    endpoint: str
    model: str
    api: Api
    profile: Profile
    concurrency: int | None = Field(description="Most requests in flight; None: as the trace says.")
    requests: int
    warmup: int
    prompt_tokens: float = Field(description="Mean prompt length asked for, in tokens.")
    output_tokens: float = Field(description="Mean output length asked for, in tokens.")
    ignore_eos: bool
    seed: int
    trace: TraceInfo | None
    gpus: int | None
    gpu_hour_price_usd: float | None
    deployment: str | None
    server: ServerInfo
    started_at: str
    tool_version: str
    replay: Replay | None = Field(default=None, description="How a trace was replayed.")
    trace_sampling: float | None = Field(
        default=None,
        description="Share of the requests whose traceparent said sampled; None: none sent.",
    )
    trace_url: str | None = Field(
        default=None, description="The trace UI's page of a trace, `{trace_id}` in it."
    )


class RequestRecord(Model):
    index: int
    group: str | None
    request_id: str | None
    scheduled_start_s: float = Field(description="When the plan said to send, from run start.")
    start_s: float = Field(description="When it was sent, from run start.")
    prompt_tokens: int | None
    output_tokens: int
    ttft_s: float | None
    e2e_s: float | None
    decode_tokens_per_s: float | None
    chunk_times_s: list[float] = Field(
        description="Arrival of each token-carrying chunk, from when the request was sent."
    )
    chunk_tokens: list[int] | None = Field(description="Tokens per chunk, when the server says.")
    token_counts: TokenCounts
    error: str | None
    burst: bool = Field(
        default=False,
        description="Its chunks arrived together (one read, or far inside the server's own "
        "inter-token latency): a buffering proxy or a busy client; its TTFT, ITL and decode rate "
        "are left out of the summary.",
    )
    tool_calls: int | None = Field(
        default=None,
        description="Structured tool calls in the answer; None: the request offered no tools.",
    )
    tool_markup: bool = Field(
        default=False,
        description="The answer's text holds Kimi K3's tool-call markup: the server parsed no "
        "call out of it (no --tool-call-parser kimi_k3).",
    )
    trace_id: str | None = Field(
        default=None,
        description="The W3C trace id of the traceparent it was sent with: its trace in the "
        "deployment's collector (spec.observability.tracing) when sampled.",
    )
    trace_sampled: bool | None = Field(
        default=None, description="Whether that traceparent asked for the request to be traced."
    )


class PrefixCacheGroup(Model):
    metrics_url: str = Field(description="The group's leader's /metrics.")
    queries: float | None = Field(description="Prompt tokens looked up in the prefix cache.")
    hits: float | None = Field(description="Of those, tokens found there.")
    hit_rate: float | None = Field(description="hits / queries; None when unreachable or idle.")


class ServedConfig(Model):
    """The server's settings as its metrics report them: after vLLM's platform adjusted what the
    command line asked (vLLM's CPU build, for one, turns prefix caching and chunked prefill off
    for an MLA model without AMX). None where the server does not say."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool | None = None
    max_model_len: int | None = None
    enable_prefix_caching: bool | None = None
    block_size: int | None = None


class ServerMetrics(Model):
    reachable: bool
    served: ServedConfig | None = Field(
        default=None,
        description="What the server runs with (kimi_scheduler_config_info from kimi_kernels' "
        "plugin, vllm:cache_config_info), when it says.",
    )
    spec_decode_acceptance_length: float | None = None
    spec_decode_acceptance_rate: float | None = None
    fast_path_fraction: float | None = None
    fallback_reasons: dict[str, float] = Field(default_factory=dict)
    decode_tokens_per_s: float | None = Field(
        default=None, description="The server's own mean per-request decode rate over the run."
    )
    decode_rate_metric: str | None = Field(
        default=None, description="Where decode_tokens_per_s comes from."
    )
    inter_token_latency_s: float | None = Field(
        default=None, description="The server's own mean inter-token latency over the run."
    )
    prefix_cache_hit_rate: float | None = Field(
        default=None,
        description="Prompt tokens found in vLLM's prefix cache over those looked up, during the "
        "run (vllm:prefix_cache_hits / vllm:prefix_cache_queries; over every group when "
        "prefix_cache_groups are read).",
    )
    prefix_cache_groups: list[PrefixCacheGroup] = Field(
        default_factory=list, description="Per TP group (--group-metrics-url), when given."
    )
    external_prompt_fraction: float | None = Field(
        default=None,
        description="Prompt tokens whose KV a connector handed over, of all prompt tokens, during "
        "the run (vllm:prompt_tokens_by_source): on a decode group of spec.prefill, what it did "
        "not prefill itself.",
    )
    kv_transfer_time_s: float | None = Field(
        default=None,
        description="NixlConnector's mean transfer time during the run "
        "(vllm:nixl_xfer_time_seconds), on the side that reads the KV.",
    )
    kv_transfer_failures: int | None = Field(
        default=None,
        description="NixlConnector's failed transfers during the run "
        "(vllm:nixl_num_failed_transfers); None where the server has no NIXL connector.",
    )
    offload_hit_rate: float | None = Field(
        default=None,
        description="Prompt tokens the KV connector (the CPU tier of kvCache.cpuOffload) found "
        "over those it was asked for, the ones not in GPU memory, during the run "
        "(vllm:external_prefix_cache_hits / vllm:external_prefix_cache_queries).",
    )
    offload_hit_tokens: float | None = Field(
        default=None, description="Prompt tokens the KV connector found, during the run."
    )
    offload_loaded_bytes: float | None = Field(
        default=None,
        description="Bytes loaded from the CPU tier into GPU memory (vllm:kv_offload_load_bytes).",
    )
    offload_stored_bytes: float | None = Field(
        default=None,
        description="Bytes stored from GPU memory into the CPU tier (vllm:kv_offload_store_bytes).",
    )


class TaskRecord(Model):
    task: str = Field(description="The trace's session, or request-N for a request of its own.")
    requests: list[int] = Field(description="Indexes of its planned requests.")
    requests_failed: int = Field(description="Sent and failed.")
    requests_not_sent: int = Field(description="Closed replay: a request it waited for failed.")
    completed: bool = Field(description="Every request of it was sent and completed.")
    start_s: float | None = Field(description="Its first send, from run start.")
    completion_s: float | None = Field(
        description="First send to the last token of its last request (completed tasks)."
    )
    prompt_tokens: int = Field(description="Server-counted, over its completed requests.")
    output_tokens: int
    ttft_sum_s: float = Field(description="Sum of its completed requests' TTFTs.")


class ToolCallSummary(Model):
    """Requests that offered tools (agent turns), and how their answers came back."""

    requests: int = Field(description="Completed requests that offered tools.")
    with_tool_calls: int = Field(description="Of those, answers with structured tool_calls.")
    markup_in_text: int = Field(
        description="Of those, answers whose text holds tool-call markup the server left unparsed."
    )


class TaskSummary(Model):
    completed: int
    failed: int
    requests_not_sent: int
    completion_s: Distribution | None
    ttft_sum_s: Distribution | None
    ttft_first_turn_s: Distribution | None = Field(
        default=None, description="TTFT of each task's first request: its context is new."
    )
    ttft_returning_turn_s: Distribution | None = Field(
        default=None,
        description="TTFT of the task's later requests: they come back with the context of the "
        "earlier ones, which a prefix cache (GPU or CPU tier) may still hold.",
    )
    output_tokens: Distribution | None
    tasks_per_hour: float
    cost_per_task_usd: float | None = Field(description="Run cost / completed tasks.")


class Summary(Model):
    requests_ok: int
    requests_failed: int
    output_tokens_total: int
    prompt_tokens: Distribution | None
    duration_s: float
    output_tokens_per_s: float
    ttft_s: Distribution | None
    decode_tokens_per_s: Distribution | None
    itl_s: Distribution | None = Field(description="Inter-token latency per token.")
    itl_chunk_s: Distribution | None = Field(description="Inter-token latency per SSE chunk.")
    e2e_s: Distribution | None
    tokens_per_chunk: float | None
    cost_per_million_output_tokens_usd: float | None
    cost_per_request_usd: float | None
    server_metrics: ServerMetrics
    errors: dict[str, int] = Field(description="Failed requests by error message.")
    warnings: list[str]
    tasks: TaskSummary | None = Field(default=None, description="Trace replays only.")
    tool_calls: ToolCallSummary | None = Field(
        default=None, description="Requests that offered tools (a trace with `tools`) only."
    )


class Results(Model):
    schema_version: int = SCHEMA_VERSION
    config: RunConfig
    summary: Summary
    requests: list[RequestRecord] = Field(description="The requests sent, in plan order.")
    tasks: list[TaskRecord] = Field(default_factory=list)
