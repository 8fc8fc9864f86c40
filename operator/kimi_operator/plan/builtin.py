"""Built-in GB300 calibrations for Kimi K3: the shape from AIConfigurator's measured GB300 data,
the level from the published batch-1 figures (docs/planning.md gives each number's source).

Published (vLLM's Kimi K3 latency-specialized decode announcement, TP16 on GB300, DSpark with 7
draft tokens at a fixed acceptance of 6, decode tok/s per request excluding prefill):
842 (latency_specialized) vs 488 (auto) at a 1-token prompt; 483 vs 276 at a 32K-token prompt
with decode context parallelism. A step then yields 1 + 6 = 7 tokens.

From the data (`gb300_data`: aiconfigurator-core's Kimi K3 model over its GB300 vLLM kernel
measurements), for each TP and number of drafts: decode steps on a grid of batches and contexts,
fitted to the plan's `fixed + per_sequence x (batch - 1) + per_context_token x context`, and lone
requests' TTFTs over prompt lengths and cache hits, fitted to the prefill terms. The data models
stock vLLM (`auto`), whose step at TP16, 7 drafts, batch 1 it puts at 23 ms where the published
488 tok/s make it 14.3 ms: decode costs are scaled by the published figure over the data's at
that point (7 / 488 s for the ordinary path, 7 / 842 s for the fast path), so the published
points are reproduced and every other point keeps the data's ratio to them (TP8 against TP16,
a batch against batch 1, a context against none, drafts against none). Prefill is the data's,
unscaled: no prefill figure is published. The published 32K figures ran decode context
parallelism, which neither the data nor the plan's configurations model: the report sets them
beside the built-in's 32K figure (`published_against_data`).

Where the data cannot answer (aiconfigurator-core missing, or no measurements for a shape), the
built-in falls back to the stated assumptions below (`_assumed`), and says so in one line.
"""

import re
from dataclasses import dataclass, replace
from functools import cache
from typing import Final

from kimi_operator.plan.calibration import Calibration, accepted_drafts
from kimi_operator.plan.costs import (
    FAST_PATH_MAX_TOKENS,
    DecodeCost,
    PrefillCost,
    StepCosts,
    attention_pairs,
    request_overhead_s,
    step_seconds,
)
from kimi_operator.plan.fit import fit
from kimi_operator.plan.gb300_data import DISTRIBUTION, MODEL_PATH, DataUnavailable, gb300_model

# Published.
FAST_TOK_S_SHORT: Final = 842.0
AUTO_TOK_S_SHORT: Final = 488.0
FAST_TOK_S_32K: Final = 483.0
AUTO_TOK_S_32K: Final = 276.0
LONG_CONTEXT: Final = 32768
PUBLISHED_GPUS: Final = 16
PUBLISHED_DRAFTS: Final = 7
PUBLISHED_ACCEPTANCE: Final = 6.0
GPUS: Final = (8, 16)
NAME: Final = re.compile(
    r"^gb300-tp(?P<gpus>8|16)-(?P<backend>latency_specialized|auto)-"
    r"(?:dspark(?P<drafts>[1-7])|nodraft)$"
)
# Where the data is read: batches up to 16 whose steps verify at most 64 tokens (vLLM's largest
# prepared batch, the fast path's; with 7 drafts, batches 1-8: a line through 1-16 misses the
# data's batch-1 step by 17-24%, through 1-8 by 7-10%) and contexts up to 128K a sequence; lone
# prompts up to 64K, and turns of 1K-4K new tokens after 8K-32K cached.
BATCHES: Final = (1, 2, 4, 8, 16)
CONTEXTS: Final = (1, 8192, 32768, 65536, 131072)
PROMPTS: Final = (
    *((prompt, 0) for prompt in (512, 2048, 8192, 16384, 32768, 65536)),
    *((new + cached, cached) for new in (1024, 4096) for cached in (8192, 32768)),
)
# The fit's columns in these units (tokens would leave it ill-conditioned).
MEGA: Final = 1e6
GIGA: Final = 1e9
# The API server runs on the host's own CPUs (72 Grace cores a tray), beside no engine thread: a
# running stream costs it a few tens of microseconds a step (detokenize one token, write one event),
# so a new request's way in grows by this much per running request, against 10-25 ms a stream on
# the 2-CPU test server where the engine takes the same CPUs. Assumed: not in the data.
PER_STREAM_S: Final = 0.0002
MAX_NUM_SEQS: Final = 8
# Assumed, only where the data cannot answer (the earlier built-ins; docs/planning.md).
ASSUMED_PER_SEQUENCE_SHARE: Final = 0.10  # each further sequence adds this share of a step
ASSUMED_NO_DRAFT_SHARE: Final = 0.75  # a step without drafts vs one verifying 7
ASSUMED_TP8_DECODE_FACTOR: Final = 1.5
ASSUMED_TP16_PREFILL_TOK_S: Final = 25_000.0
ASSUMED_TP8_PREFILL_FACTOR: Final = 2.0
ASSUMED_PREFILL_FIXED_S: Final = 0.030


@dataclass(frozen=True)
class DataFit:
    """One (TP, drafts) group's costs as the data gives them, before any anchoring, and the
    largest gap between a fitted and a queried point."""

    decode: DecodeCost
    prefill: PrefillCost
    decode_error: float
    prefill_error: float
    version: str
    largest_batch: int  # of those fitted


def lone_ttft_s(costs: StepCosts, computed: int, cached: int = 0) -> float:
    """The plan's TTFT of a request alone: its way in, and a step computing its prompt."""
    return request_overhead_s(costs) + step_seconds(
        costs, prefill_tokens=computed, cached_tokens=cached,
        prefill_pairs=attention_pairs(cached, computed), batch=0, context=0, draft_tokens=0,
    )  # fmt: skip


def _worst(pairs: list[tuple[float, float]]) -> float:
    return max(abs(fitted / queried - 1) for fitted, queried in pairs)


@cache
def data_fit(gpus: int, drafts: int) -> DataFit:
    """The data's decode and prefill costs of TP `gpus` with `drafts` (raises DataUnavailable)."""
    model = gb300_model(gpus, drafts)
    batches = [b for b in BATCHES if b * (1 + drafts) <= FAST_PATH_MAX_TOKENS]
    decode = [(b, b * c, model.decode_step_s(b, c)) for b in batches for c in CONTEXTS]
    fixed, (per_sequence, per_mega) = fit(
        [(b - 1, k / MEGA) for b, k, _ in decode], [s for *_, s in decode]
    )
    step = DecodeCost(fixed, per_sequence, per_mega / MEGA)
    lone = [(p - c, c, model.estimate(1, p, 2, cached=c).ttft_s) for p, c in PROMPTS]
    start, (per_token, per_cached, per_giga) = fit(
        [(new, cached, attention_pairs(cached, new) / GIGA) for new, cached, _ in lone],
        [ttft for *_, ttft in lone],
    )
    prefill = PrefillCost(start, per_token, per_cached, per_giga / GIGA)
    priced = StepCosts(ordinary=DecodeCost(0.0, 0.0, 0.0), prefill=prefill)

    return DataFit(
        decode=step,
        prefill=prefill,
        decode_error=_worst([(step.step_s(b, k), s) for b, k, s in decode]),
        prefill_error=_worst([(lone_ttft_s(priced, n, c), t) for n, c, t in lone]),
        version=model.version,
        largest_batch=batches[-1],
    )


def _scaled(cost: DecodeCost, factor: float) -> DecodeCost:
    return DecodeCost(
        cost.fixed_s * factor, cost.per_sequence_s * factor, cost.per_context_token_s * factor
    )


def published_step_s(tok_s: float) -> float:
    """A published figure's step: tokens a step at the published acceptance over its rate."""
    return (1 + PUBLISHED_ACCEPTANCE) / tok_s


def published_against_data(calibration: Calibration) -> list[str]:
    """Where the published figures and the data meet (TP16, 7 drafts, batch 1; 1 and 32K tokens
    of context), both numbers: the data's step (stock vLLM, no context parallelism) as tok/s
    at the published acceptance, the published figure and, at 32K, the built-in's own."""
    if calibration.gpus != PUBLISHED_GPUS or calibration.draft_tokens != PUBLISHED_DRAFTS:
        return []
    try:
        model = gb300_model(PUBLISHED_GPUS, PUBLISHED_DRAFTS)
        short, long = model.decode_step_s(1, 1), model.decode_step_s(1, LONG_CONTEXT)
    except DataUnavailable:
        return []
    tokens = 1 + PUBLISHED_ACCEPTANCE
    ordinary = calibration.costs.ordinary.step_s(1, LONG_CONTEXT)
    fast = calibration.costs.fast
    lines = [
        f"batch 1, 1-token prompt: published {AUTO_TOK_S_SHORT:.0f} tok/s (auto; "
        f"{FAST_TOK_S_SHORT:.0f} latency_specialized), AIConfigurator {tokens / short:.0f} "
        f"tok/s (stock vLLM: a {short * 1e3:.2f} ms step against the published "
        f"{published_step_s(AUTO_TOK_S_SHORT) * 1e3:.2f} ms)",
        f"batch 1, 32K-token prompt: published {AUTO_TOK_S_32K:.0f} tok/s auto and "
        f"{FAST_TOK_S_32K:.0f} latency_specialized with decode context parallelism, "
        f"AIConfigurator {tokens / long:.0f} tok/s without it; this built-in "
        f"{tokens / ordinary:.0f} auto"
        + (f" and {tokens / fast.step_s(1, LONG_CONTEXT):.0f} latency_specialized" if fast else "")
        + " (the data's context cost, scaled; no context parallelism)",
    ]
    return [f"GB300 built-ins, published against data: {line}" for line in lines]


def builtin_calibration(gpus: int, backend: str, draft_tokens: int) -> Calibration:
    """GB300, Kimi K3, TP `gpus`, the decode backend, DSpark with `draft_tokens` (0: none)."""
    drafts = f"dspark{draft_tokens}" if draft_tokens else "nodraft"
    base = Calibration(
        name=f"gb300-tp{gpus}-{backend}-{drafts}",
        origin="",
        gpus=gpus,
        backend=backend,
        draft_tokens=draft_tokens,
        acceptance=accepted_drafts(PUBLISHED_ACCEPTANCE, PUBLISHED_DRAFTS, draft_tokens),
        max_num_seqs=MAX_NUM_SEQS,
        costs=StepCosts(
            ordinary=DecodeCost(0.0, 0.0, 0.0),
            prefill=PrefillCost(0.0, 0.0),
            per_stream_s=PER_STREAM_S,
        ),
        model=MODEL_PATH,  # the served model name: `bench compare` sets a plan beside its runs
    )
    try:
        data, anchor = data_fit(gpus, draft_tokens), data_fit(PUBLISHED_GPUS, PUBLISHED_DRAFTS)
    except DataUnavailable as error:
        return _assumed(base, str(error))
    ordinary_scale = published_step_s(AUTO_TOK_S_SHORT) / anchor.decode.fixed_s
    fast_scale = published_step_s(FAST_TOK_S_SHORT) / anchor.decode.fixed_s
    ordinary = _scaled(data.decode, ordinary_scale)
    fast = _scaled(data.decode, fast_scale) if backend == "latency_specialized" else None
    source = f"AIConfigurator's GB300 vLLM {data.version} data ({DISTRIBUTION} 0.12.0)"
    calibration = replace(
        base,
        origin=f"{source}, decode scaled to the published batch-1 figures (TP16, 7 drafts)",
        costs=replace(
            base.costs,
            ordinary=ordinary,
            prefill=replace(data.prefill, fixed_s=max(data.prefill.fixed_s, ordinary.fixed_s)),
            fast=fast,
        ),
        notes=[
            f"{base.name}: decode steps from {source} (fitted within "
            f"{data.decode_error:.0%} over batches 1-{data.largest_batch} and contexts up to "
            f"128K), times "
            f"{ordinary_scale:.3f} (auto) or {fast_scale:.3f} (latency_specialized), the "
            "published batch-1 TP16 step over the data's; prefill from the data (fitted within "
            f"{data.prefill_error:.0%}), unscaled"
        ],
    )
    return replace(calibration, notes=calibration.notes + published_against_data(calibration))


def _assumed(base: Calibration, why: str) -> Calibration:
    """The built-in without the data: the published figures and assumed scaling."""
    gpus, draft_tokens = base.gpus or PUBLISHED_GPUS, base.draft_tokens
    factor = (ASSUMED_TP8_DECODE_FACTOR if gpus == 8 else 1.0) * (
        1.0 if draft_tokens else ASSUMED_NO_DRAFT_SHARE
    )

    def decode(short_tok_s: float, long_tok_s: float) -> DecodeCost:
        short, long = published_step_s(short_tok_s) * factor, published_step_s(long_tok_s) * factor
        return DecodeCost(short, ASSUMED_PER_SEQUENCE_SHARE * short, (long - short) / LONG_CONTEXT)

    prefill_factor = ASSUMED_TP8_PREFILL_FACTOR if gpus == 8 else 1.0
    return replace(
        base,
        origin="published (batch 1, TP16, 7 drafts) + assumed scaling",
        costs=replace(
            base.costs,
            ordinary=decode(AUTO_TOK_S_SHORT, AUTO_TOK_S_32K),
            prefill=PrefillCost(
                ASSUMED_PREFILL_FIXED_S, prefill_factor / ASSUMED_TP16_PREFILL_TOK_S
            ),
            fast=decode(FAST_TOK_S_SHORT, FAST_TOK_S_32K)
            if base.backend == "latency_specialized"
            else None,
        ),
        notes=[
            f"{base.name}: no measured GB300 data ({why}): the published figures with assumed "
            "scaling (docs/planning.md, built-ins without the data)"
        ],
    )


def named_builtin(name: str) -> Calibration | None:
    """The built-in of that name (gb300-tp<8|16>-<backend>-<dspark<N>|nodraft>), if it is one."""
    found = NAME.match(name)
    if found is None:
        return None
    drafts = int(found["drafts"]) if found["drafts"] else 0
    return builtin_calibration(int(found["gpus"]), found["backend"], drafts)
