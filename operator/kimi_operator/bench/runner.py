"""One benchmark run: probe the server, warm up, send the plan, read /metrics around it."""

import asyncio
import contextlib
import json
import statistics
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import TextIO

import aiohttp

from kimi_operator.bench.client import Progress, request_body, stamping_connector
from kimi_operator.bench.endpoint import (
    Endpoint,
    choose_model,
    get_text,
    served_models,
    server_version,
)
from kimi_operator.bench.profiles import PlannedRequest, Prompts, fixed_plan
from kimi_operator.bench.replay import run_plan
from kimi_operator.bench.results import (
    Api,
    Profile,
    Replay,
    RequestRecord,
    Results,
    RunConfig,
    ServerInfo,
    ServerMetrics,
    TraceInfo,
)
from kimi_operator.bench.server_metrics import (
    Snapshot,
    delta,
    parse,
    prefix_cache_groups,
    with_groups,
)
from kimi_operator.bench.stats import mark_bursts, summarize
from kimi_operator.bench.tasks import summarize_tasks, task_records

WARMUP_OUTPUT_TOKENS = 16
PROMPT_TOLERANCE = 0.10  # warn when prompts come out this far from the asked-for length
LATE_START_S = 1.0  # warn when trace requests start this much later than scheduled


@dataclass(frozen=True)
class RunOptions:
    endpoint: Endpoint
    model: str | None
    api: Api
    profile: Profile
    plan: list[PlannedRequest]
    trace: TraceInfo | None
    concurrency: int | None
    warmup: int
    ignore_eos: bool
    seed: int
    gpus: int | None
    gpu_hour_price_usd: float | None
    deployment: str | None
    decode_backend: str | None  # what the deployment's spec says
    replicas: int
    api_key: str | None
    timeout_s: float
    metrics_url: str
    replay: Replay | None = None  # trace replays only
    group_metrics_urls: tuple[str, ...] = ()  # each TP group's leader: its prefix cache
    tasks_cut: int = 0  # tasks that --requests left incomplete
    trace_sampling: float | None = None  # share of traceparents sampled; None: none sent
    trace_url: str | None = None  # the trace UI's page of a trace, `{trace_id}` in it


def tool_version() -> str:
    try:
        return version("kimi-operator")
    except PackageNotFoundError:
        return "unknown"


async def _scrape(session: aiohttp.ClientSession, url: str) -> Snapshot | None:
    text = await get_text(session, url)
    return parse(text) if text is not None else None


async def _scrape_groups(
    session: aiohttp.ClientSession, urls: tuple[str, ...]
) -> list[Snapshot | None]:
    return list(await asyncio.gather(*(_scrape(session, url) for url in urls)))


def _warnings(
    options: RunOptions, records: list[RequestRecord], metrics: ServerMetrics, info: ServerInfo
) -> list[str]:
    ok = [r for r in records if r.error is None]
    notes: list[str] = []
    if any(r.token_counts == "final_usage" for r in ok):
        notes.append(
            "the server reported usage only at the end of streams: tokens per chunk are averaged"
        )
    if any(r.token_counts == "chunks" for r in ok):
        notes.append(
            "the server reported no usage: output tokens are counted as chunks, an undercount "
            "when chunks carry several tokens (speculative decoding)"
        )
    planned = {p.index: p for p in options.plan}
    measured = [r.prompt_tokens / planned[r.index].prompt_tokens for r in ok if r.prompt_tokens]
    if measured and abs(statistics.median(measured) - 1) > PROMPT_TOLERANCE:
        notes.append(
            f"prompts came out at {statistics.median(measured):.2f}x the asked-for length in "
            "tokens (the server's tokenizer or chat template)"
        )
    short = sum(r.output_tokens < planned[r.index].output_tokens for r in ok)
    if short:
        notes.append(
            f"{short} request(s) stopped before their output length: "
            "the server may not honour ignore_eos"
        )
    late = sum(r.start_s - r.scheduled_start_s > LATE_START_S for r in records)
    if options.trace is not None and late:
        due = "their trace time" if options.replay == "open" else "they were due"
        notes.append(f"{late} request(s) started over {LATE_START_S:.0f}s after {due}")
    if options.tasks_cut:
        notes.append(
            f"--requests cut {options.tasks_cut} task(s) short: their figures cover only the "
            "requests kept"
        )
    unparsed = sum(r.tool_markup for r in ok)
    if unparsed:
        notes.append(
            f"{unparsed} tool-using request(s) came back with Kimi K3's tool-call markup in their "
            "text and no structured tool_calls: the server runs without --enable-auto-tool-choice "
            "--tool-call-parser kimi_k3 (spec.serving.toolCalling)"
        )
    if not metrics.reachable:
        notes.append(
            f"no /metrics at {options.metrics_url}: acceptance length and fast-path fraction "
            "not measured"
        )
    elif options.replicas > 1:
        notes.append(f"/metrics came from one of {options.replicas} replicas behind the Service")
    if (
        options.decode_backend
        and info.decode_backend
        and options.decode_backend != info.decode_backend
    ):
        notes.append(
            f"the deployment asks for decode backend {options.decode_backend!r} but the server "
            f"reports {info.decode_backend!r}"
        )
    return notes


async def run(options: RunOptions, progress_out: TextIO | None) -> Results:
    """The whole run. Raises BenchError only before the first measured request is sent."""
    headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else None
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=options.timeout_s)
    connector = stamping_connector()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, headers=headers
    ) as session:
        model = choose_model(
            options.model, await served_models(session, options.endpoint), options.endpoint.base
        )
        server = await server_version(session, options.endpoint)
        prompts = Prompts(options.seed)
        payloads = [
            json.dumps(
                request_body(
                    options.api,
                    model,
                    prompts.text(r),
                    r.output_tokens,
                    options.ignore_eos,
                    tools=r.tools,
                )
            ).encode()
            for r in options.plan
        ]
        url = options.endpoint.url(options.api)
        if options.warmup:  # not measured: first-request effects stay out of the results
            warm = [
                json.dumps(
                    request_body(
                        options.api, model, f"warm up {i}", WARMUP_OUTPUT_TOKENS, options.ignore_eos
                    )
                ).encode()
                for i in range(options.warmup)
            ]
            await run_plan(
                session=session,
                url=url,
                plan=fixed_plan(options.warmup, 1, WARMUP_OUTPUT_TOKENS),
                payloads=warm,
                concurrency=options.concurrency,
                progress=Progress(total=options.warmup),
            )
        before = await _scrape(session, options.metrics_url)
        groups_before = await _scrape_groups(session, options.group_metrics_urls)
        progress = Progress(total=len(options.plan))
        ticker = asyncio.create_task(progress.ticker(progress_out)) if progress_out else None
        try:
            records, duration = await run_plan(
                session=session,
                url=url,
                plan=options.plan,
                payloads=payloads,
                concurrency=options.concurrency,
                progress=progress,
                closed=options.replay == "closed",
                trace_sampling=options.trace_sampling,
            )
        finally:
            if ticker is not None:
                ticker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ticker
        if progress_out is not None and progress_out.isatty():
            progress_out.write(f"\r{progress.line()}\n")
        after = await _scrape(session, options.metrics_url)
        groups_after = await _scrape_groups(session, options.group_metrics_urls)
    scraped = zip(groups_before, groups_after, strict=True)
    groups = prefix_cache_groups(dict(zip(options.group_metrics_urls, scraped, strict=True)))
    metrics = with_groups(delta(before, after), groups)
    records = mark_bursts(records, metrics.inter_token_latency_s, metrics.decode_tokens_per_s)
    info = ServerInfo(
        version=server or (after.info.get("vllm_version") if after else None),
        decode_backend=(after.info.get("decode_backend") if after else None),
        metrics_url=options.metrics_url,
    )
    warnings = _warnings(options, records, metrics, info)
    if info.decode_backend is None:
        info = info.model_copy(update={"decode_backend": options.decode_backend})
    plan = options.plan
    config = RunConfig(
        endpoint=options.endpoint.base,
        model=model,
        api=options.api,
        profile=options.profile,
        concurrency=options.concurrency,
        requests=len(plan),
        warmup=options.warmup,
        prompt_tokens=sum(r.prompt_tokens for r in plan) / len(plan),
        output_tokens=sum(r.output_tokens for r in plan) / len(plan),
        ignore_eos=options.ignore_eos,
        seed=options.seed,
        trace=options.trace,
        gpus=options.gpus,
        gpu_hour_price_usd=options.gpu_hour_price_usd,
        deployment=options.deployment,
        server=info,
        started_at=started_at,
        tool_version=tool_version(),
        replay=options.replay,
        trace_sampling=options.trace_sampling,
        trace_url=options.trace_url,
    )
    summary = summarize(
        records=records,
        duration_s=duration,
        gpus=options.gpus,
        gpu_hour_price_usd=options.gpu_hour_price_usd,
        server_metrics=metrics,
        warnings=warnings,
    )
    if options.replay is None or options.profile == "calibration":  # its phases are no tasks
        return Results(config=config, summary=summary, requests=records)
    tasks = task_records(plan, records)
    summary.tasks = summarize_tasks(
        tasks,
        records,
        duration_s=duration,
        gpus=options.gpus,
        gpu_hour_price_usd=options.gpu_hour_price_usd,
    )
    return Results(config=config, summary=summary, requests=records, tasks=tasks)
