"""Distributions of per-request and per-token measurements, and whether the timing can be trusted.

A stream whose chunks arrive together (a proxy or ingress that buffers SSE, or a client too busy
to read: tried here with a busy CPU, whole streams came in one read) gives a TTFT close to its E2E
and decode rates of tens of thousands of tok/s. Such requests are marked `burst` and left out of
the TTFT, ITL and decode-rate figures, with a warning; where the server's /metrics is reachable,
its own decode rate stands beside the client's.
"""

import itertools
from collections.abc import Iterable

from kimi_operator.bench.results import (
    Distribution,
    RequestRecord,
    ServerMetrics,
    Summary,
    ToolCallSummary,
)

# A request is a burst when most of its chunks came together with the one before (a client that
# merely lags now and then merges a few reads: its decode span, hence its rate, stays right), or
# when its chunks, or its tokens, span far less time than the server's own figures say they took.
# The tokens matter when the server's frontend merged them: vLLM's output collector folds the
# outputs a request's stream has not yet sent into one chunk (`RequestOutputCollector.put`), so a
# stream whose sender fell behind arrives as a few chunks of many tokens each. Seen in CI on a
# 2-CPU machine: about 7 of 16 requests got their first token 477 ms into a 484 ms request, 1.94
# tokens a chunk on average, client decode rates up to 6,300 tok/s against the server's 148.
BURST_SHARE = 0.75
BURST_ITL_FACTOR = 0.1  # a gap under this fraction of the server's mean ITL came together
SPAN_FLOOR = 0.5  # of (chunks - 1) x the server's mean ITL, or decoded tokens / its decode rate
AGREEMENT = 0.10  # warn when the client's and the server's decode rates differ by more


def percentile(ordered: list[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, interpolating linearly between ranks."""
    if not ordered:
        raise ValueError("percentile of no values")
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(values: Iterable[float]) -> Distribution | None:
    """p50/p90/p99/mean of the values, or None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    return Distribution(
        p50=percentile(ordered, 50),
        p90=percentile(ordered, 90),
        p99=percentile(ordered, 99),
        mean=sum(ordered) / len(ordered),
    )


def chunk_gaps(times: list[float]) -> list[float]:
    """Inter-token latency per chunk: the time between consecutive token-carrying chunks."""
    return [later - earlier for earlier, later in itertools.pairwise(times)]


def token_itls(times: list[float], tokens: list[int] | None, output_tokens: int) -> list[float]:
    """Inter-token latency per token: a chunk of k tokens after a gap g gives k samples of g/k.

    Without per-chunk counts the output is spread evenly over the chunks (one sample per chunk).
    """
    gaps = chunk_gaps(times)
    if tokens is not None:
        pairs = zip(gaps, tokens[1:], strict=True)
        return [gap / count for gap, count in pairs for _ in range(count)]
    if not times:
        return []
    per_chunk = output_tokens / len(times)
    return [gap / per_chunk for gap in gaps]


def decode_rate(times: list[float], tokens: list[int] | None, output_tokens: int) -> float | None:
    """Output tokens after the first chunk ÷ time after the first chunk (prefill excluded)."""
    if len(times) < 2:
        return None
    first = tokens[0] if tokens is not None else output_tokens / len(times)
    elapsed = times[-1] - times[0]
    decoded = output_tokens - first
    if elapsed <= 0 or decoded <= 0:
        return None
    return decoded / elapsed


def together(times: list[float], server_itl_s: float | None) -> int:
    """Chunks that arrived together with the one before: in the same read (the client stamps a
    read's chunks alike), or far sooner than the server's own inter-token latency allows."""
    floor = server_itl_s * BURST_ITL_FACTOR if server_itl_s else 0.0
    return sum(gap <= floor for gap in chunk_gaps(times))


def mark_bursts(
    records: list[RequestRecord], server_itl_s: float | None, server_rate: float | None = None
) -> list[RequestRecord]:
    """The records, each marked `burst` when its chunks came together too often to be timed.
    `server_rate`: the server's own mean decode rate per request (tok/s)."""

    def burst(record: RequestRecord) -> bool:
        times = record.chunk_times_s
        gaps = len(times) - 1
        if gaps <= 0:
            return False
        short = server_itl_s is not None and times[-1] - times[0] < SPAN_FLOOR * gaps * server_itl_s
        rate = record.decode_tokens_per_s
        merged = server_rate is not None and rate is not None and rate * SPAN_FLOOR > server_rate
        return short or merged or together(times, server_itl_s) >= BURST_SHARE * gaps

    return [r.model_copy(update={"burst": r.error is None and burst(r)}) for r in records]


def timing_warnings(
    records: list[RequestRecord], server: ServerMetrics, client_rate: Distribution | None
) -> list[str]:
    """Bursts, and a client decode rate that the server's own does not confirm."""
    notes: list[str] = []
    ok = [r for r in records if r.error is None]
    bursts = sum(r.burst for r in ok)
    if bursts:
        itl = server.inter_token_latency_s
        near = (
            f", or far inside the server's own {itl * 1e3:.1f} ms inter-token latency"
            if itl
            else ""
        )
        notes.append(
            f"TIMING UNRELIABLE: {bursts} of {len(ok)} requests received their tokens in bursts "
            f"(most chunks in one read with the previous one{near}): "
            "left out of TTFT, ITL and decode-rate figures. A proxy or ingress that buffers "
            "server-sent events, or a client machine too busy to read, does this"
        )
    server_rate = server.decode_tokens_per_s
    if server_rate and client_rate is not None:
        ratio = client_rate.mean / server_rate
        if abs(ratio - 1) > AGREEMENT:
            notes.append(
                f"the client measured {client_rate.mean:.1f} decode tok/s per request, the server "
                f"{server_rate:.1f} ({server.decode_rate_metric}): {ratio:.2f}x, more than "
                f"{AGREEMENT:.0%} apart; trust the server's figure for what the engine does"
            )
    return notes


def run_cost_usd(
    gpus: int | None, gpu_hour_price_usd: float | None, duration_s: float
) -> float | None:
    """GPUs x price per GPU-hour x the run's duration; None without a GPU count and price."""
    if gpus is None or gpu_hour_price_usd is None:
        return None
    return gpus * gpu_hour_price_usd * duration_s / 3600


def summarize(
    *,
    records: list[RequestRecord],
    duration_s: float,
    gpus: int | None,
    gpu_hour_price_usd: float | None,
    server_metrics: ServerMetrics,
    warnings: list[str],
) -> Summary:
    ok = [r for r in records if r.error is None]
    timed = [r for r in ok if not r.burst]
    output_total = sum(r.output_tokens for r in ok)
    chunks_total = sum(len(r.chunk_times_s) for r in ok)
    errors: dict[str, int] = {}
    for record in records:
        if record.error is not None:
            errors[record.error] = errors.get(record.error, 0) + 1
    cost_per_million = cost_per_request = None
    run_cost = run_cost_usd(gpus, gpu_hour_price_usd, duration_s)
    if run_cost is not None:
        if output_total:
            cost_per_million = run_cost / output_total * 1e6
        if ok:
            cost_per_request = run_cost / len(ok)
    decode = distribution(r.decode_tokens_per_s for r in timed if r.decode_tokens_per_s is not None)
    return Summary(
        requests_ok=len(ok),
        requests_failed=len(records) - len(ok),
        output_tokens_total=output_total,
        prompt_tokens=distribution(r.prompt_tokens for r in ok if r.prompt_tokens is not None),
        duration_s=duration_s,
        output_tokens_per_s=output_total / duration_s if duration_s > 0 else 0.0,
        ttft_s=distribution(r.ttft_s for r in timed if r.ttft_s is not None),
        decode_tokens_per_s=decode,
        itl_s=distribution(
            itl
            for r in timed
            for itl in token_itls(r.chunk_times_s, r.chunk_tokens, r.output_tokens)
        ),
        itl_chunk_s=distribution(gap for r in timed for gap in chunk_gaps(r.chunk_times_s)),
        e2e_s=distribution(r.e2e_s for r in ok if r.e2e_s is not None),
        tokens_per_chunk=output_total / chunks_total if chunks_total else None,
        cost_per_million_output_tokens_usd=cost_per_million,
        cost_per_request_usd=cost_per_request,
        server_metrics=server_metrics,
        errors=errors,
        warnings=[*timing_warnings(records, server_metrics, decode), *warnings],
        tool_calls=tool_call_summary(ok),
    )


def tool_call_summary(ok: list[RequestRecord]) -> ToolCallSummary | None:
    """How the completed requests that offered tools came back; None when none offered any."""
    offered = [r for r in ok if r.tool_calls is not None]
    if not offered:
        return None
    return ToolCallSummary(
        requests=len(offered),
        with_tool_calls=sum(1 for r in offered if r.tool_calls),
        markup_in_text=sum(r.tool_markup for r in offered),
    )
