"""Step costs from a `bench --profile calibration` run (bench/calibration.py says what it sends).

Decode: in each `decode:b{B}:c{C}` phase, the later half of every stream (by then all B requests
have prefilled) runs decode steps of B sequences: their time over their tokens is the time per
token (a mean, not a median: a task's time is the sum of its steps, stalls included), times the
tokens a step yields, 1 + the accepted drafts. Those come from the server's speculative-decoding
counters when its metrics were read (none: it does not speculate), else from the tokens per chunk:
a chunk is one step only while the API server keeps up with the engine, and on a busy machine it
falls behind and sends two steps' tokens in one chunk (seen on 2 CPUs: 1.09 tokens per chunk from
a server that does not speculate). Prefill: the TTFT of the `prefill:` requests and of the
`prefix:` requests (the first of a group fills the cache, the others hit it) against the prompt
tokens they had to compute, those they took from the cache and the attention pairs between them,
one point per (computed, cached) pair at the median of its requests' TTFTs (the sweep repeats
each: one hiccup no longer moves the fit), less the points a stall of the whole server delayed
(`fit_without_stalls`). With a `latency_specialized` deployment, the phases whose batch x (1 +
draft tokens) fits in 64 ran on the fast path and fit its costs; the others fit the ordinary
path's. Streams: the TTFT of each `streams:s{S}` probe beyond what the
fitted steps give it (half a step of the S streams to wait, then a step of theirs with its prefill)
grows by `per_stream_s` a stream: what they add to its way in (the median of each stream count's
probes). A sweep from before the repeats has one request a point: its median is that request.
New token counts: each `fresh:p{P}` count's first TTFT (a prefill of a count the server had not
run) over its second is what a new count costs; `new_shape_s` is the median over the lengths P
of each one's median (0 for a sweep without them). Taken as a difference it owes nothing to the
prefill fit's error at that count.

A sweep that read NixlConnector's metrics (a disaggregated deployment's decode leader) gives the
KV hand-over's time: the mean transfer over the tokens a request handed over on average (its
prompts' mean times the share of prompt tokens that came over the connector).

Several sweeps of one deployment fit as one (`from_runs`): each point's requests pooled, so its
median is over all their repeats. On a machine whose speed wanders over seconds, the median of
one fit per sweep still leans where a few sweeps' three repeats did; a pooled point does not.
"""

import re
import statistics
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TypeVar

from kimi_operator.bench.calibration import PREFIX_UNSHARED_TOKENS
from kimi_operator.bench.results import RequestRecord, Results, ServedConfig
from kimi_operator.bench.stats import chunk_gaps
from kimi_operator.plan import PlanError
from kimi_operator.plan.costs import (
    FAST_PATH_MAX_TOKENS,
    DecodeCost,
    KvTransfer,
    PrefillCost,
    StepCosts,
    attention_pairs,
    request_overhead_s,
    step_seconds,
)
from kimi_operator.plan.engine import DEFAULT_BLOCK_TOKENS
from kimi_operator.plan.fit import fit, fit_without_stalls

Key = TypeVar("Key", bound=Hashable)
PHASE = re.compile(r"^(?:decode:b(?P<batch>\d+):c(?P<context>\d+)|(?P<kind>prefill|prefix):p\d+)$")
PROBE = re.compile(r"^streams:s(?P<streams>\d+):probe$")
FRESH = re.compile(r"^fresh:p\d+$")


@dataclass(frozen=True)
class Calibration:
    name: str
    origin: str  # where its numbers come from: a run's path, or "published + assumed"
    gpus: int | None
    backend: str
    draft_tokens: int
    acceptance: float  # mean drafts accepted per step
    max_num_seqs: int
    costs: StepCosts
    model: str  # the served model name, so that `bench compare` sets a plan beside its runs
    notes: list[str] = field(default_factory=list)
    # The server's own settings where it reported them (bench reads them from its metrics).
    max_num_batched_tokens: int | None = None
    prefix_caching: bool | None = None
    kv_transfer: KvTransfer | None = None  # measured NIXL hand-overs, when the sweep read them
    block_tokens: int = DEFAULT_BLOCK_TOKENS  # the prefix cache's block, as the server reported it
    longest_prompt: int | None = None  # the longest prompt its prefill costs were fitted to


@dataclass(frozen=True)
class DecodePoint:
    batch: int
    context: float  # KV tokens over the batch, mid-way through the measured steps
    step_s: float
    tokens_per_step: float


def accepted_drafts(accepted: float, drafts: int, fewer_or_more: int) -> float:
    """Mean drafts accepted a step with `fewer_or_more` drafts, from `accepted` of `drafts`: each
    draft is taken for accepted with one probability, given the one before it was (speculative
    decoding's usual model), so k drafts accept a + a^2 + ... + a^k; a is solved from the
    measured pair. Not "all of them up to the measured mean": the later drafts are the ones
    rejected."""
    if fewer_or_more <= 0 or drafts <= 0 or accepted <= 0:
        return 0.0
    if accepted >= drafts:
        return float(fewer_or_more)

    def expected(rate: float, count: int) -> float:
        return sum(rate**position for position in range(1, count + 1))

    low, high = 0.0, 1.0
    for _ in range(60):  # bisection: `expected` rises with the rate
        middle = (low + high) / 2
        low, high = (middle, high) if expected(middle, drafts) < accepted else (low, middle)
    return expected((low + high) / 2, fewer_or_more)


def timed(record: RequestRecord) -> bool:
    """Whether a request's times measure the server: it succeeded, and its tokens did not come in
    bursts (`RequestRecord.burst`: a client too busy to read stamps a late first token and a
    stream's tail of many tokens at once; one such phase fitted a decode step of 0 ms)."""
    return record.error is None and record.ttft_s is not None and not record.burst


def _tail(record: RequestRecord) -> tuple[list[float], list[int]]:
    half = len(record.chunk_times_s) // 2
    gaps = chunk_gaps(record.chunk_times_s[half:])
    tokens = (record.chunk_tokens or [1] * len(record.chunk_times_s))[half + 1 :]
    return gaps, tokens


def decode_points(
    records: list[RequestRecord], tokens_per_step: float | None = None
) -> list[DecodePoint]:
    """The decode phases' step times; `tokens_per_step` as the server counted it (None: the
    tokens per chunk, each chunk taken for a step)."""
    phases: dict[tuple[int, int], list[RequestRecord]] = {}
    for record in records:
        found = PHASE.match(record.group or "")
        if found and found["batch"] and timed(record):
            phases.setdefault((int(found["batch"]), int(found["context"])), []).append(record)
    points = []
    for (batch, context), members in sorted(phases.items()):
        gaps = [gap for r in members for gap in _tail(r)[0]]
        tokens = [count for r in members for count in _tail(r)[1]]
        if not gaps:
            continue
        output = statistics.mean(r.output_tokens for r in members)
        step_tokens = statistics.mean(tokens) if tokens_per_step is None else tokens_per_step
        points.append(
            DecodePoint(
                batch=batch,
                context=batch * (context + 0.75 * output),
                step_s=sum(gaps) / sum(tokens) * step_tokens,
                tokens_per_step=step_tokens,
            )
        )
    return points


def _pooled(runs: Iterable[dict[Key, list[float]]]) -> dict[Key, list[float]]:
    pooled: dict[Key, list[float]] = {}
    for samples in runs:
        for key, values in samples.items():
            pooled.setdefault(key, []).extend(values)
    return pooled


def _prefill_samples(
    records: list[RequestRecord], block_tokens: int
) -> dict[tuple[int, int], list[float]]:
    """One sweep's TTFTs of its prefill requests and hits by (tokens computed, from the cache):
    a hit takes the shared prefix's whole blocks of the server's `block_tokens`."""
    samples: dict[tuple[int, int], list[float]] = {}
    seen_prefix: set[str] = set()
    for record in records:
        found = PHASE.match(record.group or "")
        if not found or found["kind"] is None or record.error or record.ttft_s is None:
            continue
        prompt = record.prompt_tokens or 0
        cached = 0
        if found["kind"] == "prefix" and record.group in seen_prefix:  # after the first: a hit
            shared = prompt - PREFIX_UNSHARED_TOKENS
            cached = shared - shared % block_tokens
        seen_prefix.add(record.group or "")  # a fill, timed or not: the next one hits it
        if timed(record):
            samples.setdefault((prompt - cached, cached), []).append(record.ttft_s)
    return samples


def prefill_points(
    runs: Sequence[list[RequestRecord]], block_tokens: int = DEFAULT_BLOCK_TOKENS
) -> list[tuple[int, int, float]]:
    """(prompt tokens computed, tokens from the cache, median TTFT) of the sweeps' prefill
    requests and hits, one point per (computed, cached) pair."""
    samples = _pooled(_prefill_samples(records, block_tokens) for records in runs)
    return [
        (computed, cached, statistics.median(ttfts))
        for (computed, cached), ttfts in samples.items()
    ]


def _stream_excess(
    records: list[RequestRecord], costs: StepCosts, draft_tokens: int
) -> dict[int, list[float]]:
    """One sweep's probes by the streams they arrived among: their TTFT beyond the modelled."""
    prompts = {r.group: r.prompt_tokens or 0 for r in records}  # a phase's streams: one length
    excess: dict[int, list[float]] = {}
    for record in records:
        found, ttft = PROBE.match(record.group or ""), record.ttft_s
        if not found or ttft is None or not timed(record):
            continue
        count = int(found["streams"])
        context = count * prompts.get(f"streams:s{count}", 0)
        step = partial(
            step_seconds, costs, cached_tokens=0, batch=count, context=context,
            draft_tokens=draft_tokens,
        )  # fmt: skip
        waiting = step(prefill_tokens=0, prefill_pairs=0) if count else 0.0
        prompt = record.prompt_tokens or 0
        modelled = (
            request_overhead_s(costs)
            + waiting / 2
            + step(prefill_tokens=prompt, prefill_pairs=attention_pairs(0, prompt))
        )
        excess.setdefault(count, []).append(ttft - modelled)
    return excess


def per_stream_s(runs: Sequence[list[RequestRecord]], costs: StepCosts, draft_tokens: int) -> float:
    """What each running stream adds to a new request's way in: the slope, against the streams,
    of the probes' TTFT beyond the modelled one, the median of each stream count's probes (0
    without probes: an older calibration)."""
    excess = _pooled(_stream_excess(records, costs, draft_tokens) for records in runs)
    if len(excess) < 2:
        return 0.0
    counts = sorted(excess)
    return fit([(float(c),) for c in counts], [statistics.median(excess[c]) for c in counts])[1][0]


def new_shape_s(runs: Sequence[list[RequestRecord]]) -> float:
    """What a step of a token count the server had not run adds: the median, over the sweep's
    prompt lengths (`fresh:p{P}`), of each length's median of its counts' first TTFT over their
    second (0 without them: an older calibration). By length first: the cost is charged to every
    new count whatever its size, and one length whose counts met a cost the others did not (a
    server started minutes before: 109-127 ms the first time at ~1,800 tokens, 2-15 ms below
    1,024) must not set it, as it did through the median of all pairs when two of the small
    ones were left out as bursts (62 ms)."""
    pairs: dict[tuple[int, str, int], list[float]] = {}
    for run, records in enumerate(runs):
        for record in records:
            group = record.group or ""
            if FRESH.match(group) and record.ttft_s is not None and timed(record):
                key = (run, group, record.prompt_tokens or 0)
                pairs.setdefault(key, []).append(record.ttft_s)
    by_length: dict[str, list[float]] = {}
    for (_, group, _), ttfts in pairs.items():
        if len(ttfts) == 2:
            by_length.setdefault(group, []).append(ttfts[0] - ttfts[1])
    if not by_length:
        return 0.0
    return max(statistics.median(statistics.median(e) for e in by_length.values()), 0.0)


def _decode_cost(points: list[DecodePoint]) -> DecodeCost:
    intercept, (per_sequence, per_context) = fit(
        [(p.batch - 1, p.context) for p in points], [p.step_s for p in points]
    )
    return DecodeCost(intercept, per_sequence, per_context)


def _one_deployment(runs: Sequence[tuple[str, Results]]) -> None:
    """Refuses a run of another profile, and sweeps of different deployments pooled."""
    first_label, first = runs[0]
    for label, results in runs:
        if results.config.profile != "calibration":
            raise PlanError(
                f"{label}: a {results.config.profile!r} run, not a calibration: run "
                "`kimi-operator bench --profile calibration` against the deployment"
            )
        for what, value, expected in (
            ("model", results.config.model, first.config.model),
            ("GPU count", results.config.gpus, first.config.gpus),
            (
                "decode backend",
                results.config.server.decode_backend,
                first.config.server.decode_backend,
            ),
        ):
            if value != expected:
                raise PlanError(
                    f"{label}: pooled with {first_label}, but its {what} is {value!r}, not "
                    f"{expected!r}: only sweeps of one deployment fit as one calibration"
                )


def measured_transfer(runs: Sequence[tuple[str, Results]]) -> KvTransfer | None:
    """NIXL's mean transfer time per token handed over (vllm:nixl_xfer_time_seconds, on the side
    that reads the KV), over the runs that read it; None when none did."""
    per_token: list[float] = []
    labels: list[str] = []
    for label, results in runs:
        metrics = results.summary.server_metrics
        prompts = [r.prompt_tokens for r in results.requests if r.error is None and r.prompt_tokens]
        if metrics.kv_transfer_time_s is None or not prompts:
            continue
        handed = statistics.mean(prompts) * (metrics.external_prompt_fraction or 1.0)
        per_token.append(metrics.kv_transfer_time_s / handed)
        labels.append(label)
    if not per_token:
        return None
    return KvTransfer(
        per_token_s=statistics.mean(per_token),
        source=f"measured: NIXL's mean transfer time in {', '.join(labels)}, per token handed over",
    )


def from_runs(
    runs: Sequence[tuple[str, Results]], name: str, draft_tokens: int | None
) -> Calibration:
    """The step costs one or more calibration runs (labelled) of one deployment measured, their
    requests pooled; `draft_tokens` as the deployment speculates."""
    _one_deployment(runs)
    first = runs[0][1]
    metrics = [results.summary.server_metrics for _, results in runs]
    counted = (
        statistics.mean(m.spec_decode_acceptance_length or 1.0 for m in metrics)
        if all(m.reachable for m in metrics)
        else None
    )
    if counted is None and draft_tokens == 0:
        counted = 1.0  # no drafts: a step yields one token, however the stream grouped them
    sweeps = [results.requests for _, results in runs]
    points = decode_points([record for records in sweeps for record in records], counted)
    served = metrics[0].served or ServedConfig()
    block_tokens = served.block_size or DEFAULT_BLOCK_TOKENS
    prefill = prefill_points(sweeps, block_tokens)
    if not points or len(prefill) < 2:
        raise PlanError(f"{name}: too few successful calibration requests to fit step costs")
    acceptance = max(statistics.mean(p.tokens_per_step for p in points) - 1, 0.0)
    if draft_tokens is None:
        if acceptance > 0.05 and counted is None:
            raise PlanError(
                f"{name}: the server's metrics were not read and its stream carried "
                f"{acceptance + 1:.2f} tokens a chunk: it speculated, or its API server sent "
                "several steps' tokens at once; give its draft tokens with "
                "--calibration-drafts N (0 when it does not speculate)"
            )
        if acceptance > 0.05:
            raise PlanError(
                f"{name}: the server speculated ({acceptance + 1:.2f} tokens per step): give "
                "its draft tokens with --calibration-drafts N"
            )
        draft_tokens = 0
    backend = first.config.server.decode_backend or "auto"
    notes: list[str] = []
    answered = [r for records in sweeps for r in records if r.error is None]
    bursts = sum(r.burst for r in answered)
    if bursts:
        notes.append(
            f"{name}: {bursts} of {len(answered)} requests left out of the fit: their tokens "
            "came in bursts (a client too busy to read, or a proxy buffering server-sent "
            "events); calibrate from a client with CPUs of its own"
        )
    fast_points = [p for p in points if p.batch * (1 + draft_tokens) <= FAST_PATH_MAX_TOKENS]
    ordinary_points = [p for p in points if p not in fast_points]
    fast: DecodeCost | None = None
    if backend == "latency_specialized":
        fast = _decode_cost(fast_points) if fast_points else None
        if not ordinary_points:
            ordinary_points = fast_points
            notes.append(
                f"{name}: no batch over the fast path measured: the ordinary path is assumed "
                "as fast as the fast path (calibrate with a larger --concurrency)"
            )
    else:
        ordinary_points = points
    intercept, (per_token, per_cached, per_pair) = fit_without_stalls(
        [(computed, cached, attention_pairs(cached, computed)) for computed, cached, _ in prefill],
        [t for _, _, t in prefill],
    )
    costs = StepCosts(
        ordinary=_decode_cost(ordinary_points),
        prefill=PrefillCost(intercept, per_token, per_cached, per_pair),
        fast=fast,
    )
    costs = replace(
        costs,
        per_stream_s=per_stream_s(sweeps, costs, draft_tokens),
        new_shape_s=new_shape_s(sweeps),
    )
    if served.enable_chunked_prefill is False:
        notes.append(
            f"{name}: the server does not chunk prefills; the model does (within "
            "maxNumBatchedTokens)"
        )
    return Calibration(
        name=name,
        origin="measured: " + ", ".join(label for label, _ in runs),
        gpus=first.config.gpus,
        backend=backend,
        draft_tokens=draft_tokens,
        acceptance=min(acceptance, float(draft_tokens)),
        # What the server admits; a sweep's largest batch where it did not say.
        max_num_seqs=served.max_num_seqs or max(p.batch for p in points),
        costs=costs,
        model=first.config.model,
        notes=notes,
        max_num_batched_tokens=served.max_num_batched_tokens,
        prefix_caching=served.enable_prefix_caching,
        block_tokens=block_tokens,
        longest_prompt=max(computed + cached for computed, cached, _ in prefill),
        kv_transfer=measured_transfer(runs),
    )
