"""Built-in GB300 calibrations for Kimi K3, from the published batch-1 figures and stated
assumptions for everything those figures do not cover (docs/planning.md gives each source).

Published (vLLM's Kimi K3 latency-specialized decode announcement, TP16 on GB300, DSpark with 7
draft tokens at a fixed acceptance of 6, decode tok/s per request excluding prefill):
842 (latency_specialized) vs 488 (auto) at a 1-token prompt; 483 vs 276 at a 32K-token prompt
with decode context parallelism. A step then yields 1 + 6 = 7 tokens.
"""

from typing import Final

from kimi_operator.plan.calibration import Calibration, accepted_drafts
from kimi_operator.plan.costs import DecodeCost, PrefillCost, StepCosts

# Published.
FAST_TOK_S_SHORT: Final = 842.0
AUTO_TOK_S_SHORT: Final = 488.0
FAST_TOK_S_32K: Final = 483.0
AUTO_TOK_S_32K: Final = 276.0
LONG_CONTEXT: Final = 32768
PUBLISHED_DRAFTS: Final = 7
PUBLISHED_ACCEPTANCE: Final = 6.0
# Assumed (not published; docs/planning.md says how wrong each could be).
PER_SEQUENCE_SHARE: Final = 0.10  # each further sequence adds this share of the batch-1 step
NO_DRAFT_SHARE: Final = 0.75  # a step without drafts vs one verifying 7 (and running the drafter)
# Half the GPUs: each reads twice the weights a step (2x, were a step only weight reads) while
# its all-reduces span half as many GPUs and attention is a share that does not double: between.
TP8_DECODE_FACTOR: Final = 1.5
TP16_PREFILL_TOK_S: Final = 25_000.0  # prompt tokens per second of one TP16 group
TP8_PREFILL_FACTOR: Final = 2.0
PREFILL_FIXED_S: Final = 0.030
# The API server runs on the host's own CPUs (72 Grace cores a tray), beside no engine thread: a
# running stream costs it a few tens of microseconds a step (detokenize one token, write one event),
# so a new request's way in grows by this much per running request, against 10-25 ms a stream on
# the 2-CPU test server where the engine takes the same CPUs.
PER_STREAM_S: Final = 0.0002
MAX_NUM_SEQS: Final = 8
# Prefill attention, from FLOPs (vLLM's MLA prefill decompresses the latent into per-head keys and
# values and runs attention over them): a (token, earlier token) pair costs 2 x 96 heads x (192 key
# + 128 value widths) multiply-adds in each of the 24 MLA layers (the KDA layers are linear: no
# pairs); a cached token costs its decompression, 2 x 512 x 96 x 256 in each. The key and value
# widths are DeepSeek V3's (K3's are not in the wheel); BF16 at 2.25 PFLOP/s dense a GB300 GPU and
# 50% of it: assumed.
MLA_PAIR_FLOPS: Final = 2 * 96 * (192 + 128) * 24
MLA_CACHED_TOKEN_FLOPS: Final = 2 * 512 * 96 * 256 * 24
ATTENTION_FLOPS_PER_GPU: Final = 2.25e15 * 0.5
MODEL: Final = "moonshotai/Kimi-K3"


def _decode(short_tok_s: float, long_tok_s: float, factor: float) -> DecodeCost:
    tokens = 1 + PUBLISHED_ACCEPTANCE
    short, long = tokens / short_tok_s * factor, tokens / long_tok_s * factor
    return DecodeCost(
        fixed_s=short,
        per_sequence_s=PER_SEQUENCE_SHARE * short,
        per_context_token_s=(long - short) / LONG_CONTEXT,
    )


def builtin_calibration(gpus: int, backend: str, draft_tokens: int) -> Calibration:
    """GB300, Kimi K3, TP `gpus`, the decode backend, DSpark with `draft_tokens` (0: none)."""
    factor = (TP8_DECODE_FACTOR if gpus == 8 else 1.0) * (1.0 if draft_tokens else NO_DRAFT_SHARE)
    ordinary = _decode(AUTO_TOK_S_SHORT, AUTO_TOK_S_32K, factor)
    fast = _decode(FAST_TOK_S_SHORT, FAST_TOK_S_32K, factor)
    prefill_factor = TP8_PREFILL_FACTOR if gpus == 8 else 1.0
    drafts = f"dspark{draft_tokens}" if draft_tokens else "nodraft"
    measured = gpus == 16 and draft_tokens == PUBLISHED_DRAFTS
    return Calibration(
        name=f"gb300-tp{gpus}-{backend}-{drafts}",
        origin="published (batch 1, TP16, 7 drafts)" + ("" if measured else " + assumed scaling"),
        gpus=gpus,
        backend=backend,
        draft_tokens=draft_tokens,
        acceptance=accepted_drafts(PUBLISHED_ACCEPTANCE, PUBLISHED_DRAFTS, draft_tokens),
        max_num_seqs=MAX_NUM_SEQS,
        costs=StepCosts(
            ordinary=ordinary,
            prefill=PrefillCost(
                PREFILL_FIXED_S,
                prefill_factor / TP16_PREFILL_TOK_S,
                per_cached_token_s=MLA_CACHED_TOKEN_FLOPS / (gpus * ATTENTION_FLOPS_PER_GPU),
                per_attention_pair_s=MLA_PAIR_FLOPS / (gpus * ATTENTION_FLOPS_PER_GPU),
            ),
            fast=fast if backend == "latency_specialized" else None,
            per_stream_s=PER_STREAM_S,
        ),
        model=MODEL,
    )
