"""One configuration's prediction, written as a bench run would be (`bench compare` reads it).

The simulated requests become bench's request records (every decode step a chunk), and bench's
own summary code turns them into TTFT, decode-rate, ITL, task and cost figures: a plan and a
measurement are summarized by the same code.
"""

from dataclasses import dataclass, replace

from kimi_operator.bench.profiles import PlannedRequest
from kimi_operator.bench.results import (
    RequestRecord,
    Results,
    RunConfig,
    ServerInfo,
    ServerMetrics,
    TraceInfo,
)
from kimi_operator.bench.stats import decode_rate, summarize
from kimi_operator.bench.tasks import summarize_tasks, task_records
from kimi_operator.plan.calibration import Calibration, accepted_drafts
from kimi_operator.plan.configs import Configuration
from kimi_operator.plan.costs import KvTransfer
from kimi_operator.plan.engine import EngineSpec, Live
from kimi_operator.plan.memory import nixl_transfer
from kimi_operator.plan.simulate import Topology, simulate


@dataclass(frozen=True)
class Workload:
    plan: list[PlannedRequest]
    closed: bool
    trace: TraceInfo
    gpu_hour_price_usd: float


def total_gpus(config: Configuration) -> int:
    prefill = config.disaggregated.prefill_replicas if config.disaggregated else 0
    return config.gpus * (config.replicas + prefill)


def kv_transfer(
    config: Configuration, calibration: Calibration, prefill: Calibration | None = None
) -> KvTransfer:
    """A disaggregated configuration's hand-over: the time it gives, else NIXL's as a calibration
    (the decode role's first) measured it, else the built-in NVLink figure (memory.py)."""
    given = config.disaggregated.kv_transfer_s if config.disaggregated else None
    if given is not None:
        return KvTransfer(fixed_s=given, source="given: kvTransferS")
    measured = calibration.kv_transfer or (prefill.kv_transfer if prefill else None)
    return measured or nixl_transfer(config.gpus)


def topology(
    config: Configuration, calibration: Calibration, prefill: Calibration | None = None
) -> Topology:
    """The groups; a disaggregated configuration's prefill groups priced by `prefill` (a prefill
    role's calibration) when given, else by the decode role's."""
    costs = calibration.costs
    if config.backend == "auto" and costs.fast is not None:
        costs = replace(costs, fast=None)
    acceptance = (
        min(config.acceptance, float(config.draft_tokens))
        if config.acceptance is not None
        else accepted_drafts(calibration.acceptance, calibration.draft_tokens, config.draft_tokens)
    )
    spec = EngineSpec(
        costs=costs,
        max_num_seqs=config.max_num_seqs,
        max_batched_tokens=config.max_num_batched_tokens,
        draft_tokens=config.draft_tokens,
        acceptance=acceptance,
        prefix_caching=config.prefix_caching,
        block_tokens=calibration.block_tokens,
    )
    split = config.disaggregated
    if split is None:
        return Topology(groups=[spec] * config.replicas, routing=config.routing)
    decode = replace(spec, role="decode")
    prefilling = replace(spec, role="prefill", draft_tokens=0, costs=(prefill or calibration).costs)
    return Topology(
        groups=[decode] * config.replicas,
        routing=config.routing,
        prefill_groups=[prefilling] * split.prefill_replicas,
        kv_transfer=kv_transfer(config, calibration, prefill),
        uncached_tokens=split.uncached_tokens,
    )


def _record(live: Live) -> RequestRecord:
    request = live.request
    times = [round(t - live.sent_s, 7) for t in live.token_times]
    return RequestRecord(
        index=request.index,
        group=request.group,
        request_id=None,
        scheduled_start_s=live.sent_s,
        start_s=live.sent_s,
        prompt_tokens=request.prompt_tokens,
        output_tokens=request.output_tokens,
        ttft_s=times[0],
        e2e_s=times[-1],
        decode_tokens_per_s=decode_rate(times, live.token_counts, request.output_tokens),
        chunk_times_s=times,
        chunk_tokens=live.token_counts,
        token_counts="per_chunk_usage",
        error=None,
    )


def predict(
    config: Configuration,
    calibration: Calibration,
    workload: Workload,
    prefill: Calibration | None = None,
) -> Results:
    groups = topology(config, calibration, prefill)
    outcome = simulate(workload.plan, groups, workload.closed)
    records = [_record(live) for live in outcome.lives]
    duration = max(live.finished_s or 0.0 for live in outcome.lives)
    gpus = total_gpus(config)
    looked_up = sum(live.request.prompt_tokens for live in outcome.lives)
    metrics = ServerMetrics(
        reachable=True,
        # What the model simulated, not the calibration's (a what-if may draft fewer tokens).
        spec_decode_acceptance_length=1 + groups.groups[0].acceptance
        if config.draft_tokens
        else None,
        fast_path_fraction=outcome.fast_steps / outcome.decode_steps
        if outcome.decode_steps
        else None,
        # As vLLM counts it (vllm:prefix_cache_hits / queries): prompt tokens found in the cache
        # over prompt tokens looked up, each request once, when its group admitted it.
        prefix_cache_hit_rate=sum(live.cached for live in outcome.lives) / looked_up
        if looked_up
        else None,
    )
    summary = summarize(
        records=records,
        duration_s=duration,
        gpus=gpus,
        gpu_hour_price_usd=workload.gpu_hour_price_usd,
        server_metrics=metrics,
        warnings=[f"modelled by kimi-operator plan, not measured ({calibration.origin})"],
    )
    plan = workload.plan
    tasks = task_records(plan, records)
    summary.tasks = summarize_tasks(
        tasks,
        records,
        duration_s=duration,
        gpus=gpus,
        gpu_hour_price_usd=workload.gpu_hour_price_usd,
    )
    run_config = RunConfig(
        endpoint=f"plan:{config.name}",
        model=calibration.model,
        api="completions",
        profile="agentic",
        concurrency=None,
        requests=len(plan),
        warmup=0,
        prompt_tokens=sum(r.prompt_tokens for r in plan) / len(plan),
        output_tokens=sum(r.output_tokens for r in plan) / len(plan),
        ignore_eos=True,
        seed=0,
        trace=workload.trace,
        gpus=gpus,
        gpu_hour_price_usd=workload.gpu_hour_price_usd,
        deployment=config.name,
        server=ServerInfo(version=f"plan: {calibration.name}", decode_backend=config.backend),
        started_at="modelled",
        tool_version="kimi-operator plan",
        replay="closed" if workload.closed else "open",
    )
    return Results(config=run_config, summary=summary, requests=records, tasks=tasks)
