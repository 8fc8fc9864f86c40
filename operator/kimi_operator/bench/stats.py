"""Distributions of per-request and per-token measurements."""

import itertools
from collections.abc import Iterable

from kimi_operator.bench.results import Distribution, RequestRecord, ServerMetrics, Summary


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
    return Summary(
        requests_ok=len(ok),
        requests_failed=len(records) - len(ok),
        output_tokens_total=output_total,
        prompt_tokens=distribution(r.prompt_tokens for r in ok if r.prompt_tokens is not None),
        duration_s=duration_s,
        output_tokens_per_s=output_total / duration_s if duration_s > 0 else 0.0,
        ttft_s=distribution(r.ttft_s for r in ok if r.ttft_s is not None),
        decode_tokens_per_s=distribution(
            r.decode_tokens_per_s for r in ok if r.decode_tokens_per_s is not None
        ),
        itl_s=distribution(
            itl for r in ok for itl in token_itls(r.chunk_times_s, r.chunk_tokens, r.output_tokens)
        ),
        itl_chunk_s=distribution(gap for r in ok for gap in chunk_gaps(r.chunk_times_s)),
        e2e_s=distribution(r.e2e_s for r in ok if r.e2e_s is not None),
        tokens_per_chunk=output_total / chunks_total if chunks_total else None,
        cost_per_million_output_tokens_usd=cost_per_million,
        cost_per_request_usd=cost_per_request,
        server_metrics=server_metrics,
        errors=errors,
        warnings=warnings,
    )
