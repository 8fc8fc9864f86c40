"""What one engine step costs: decode as a function of batch and context, prefill per token.

A decode step of `batch` sequences holding `context` tokens of KV cache between them takes
`fixed_s + per_sequence_s × (batch - 1) + per_context_token_s × context`: the weights are read
once a step, each further sequence adds its share of the MoE and projection work, and attention
reads every sequence's cache. Prefill costs `per_token_s` per prompt token computed; a step that
carries prefill and no decode costs `fixed_s` on top.
"""

from dataclasses import dataclass
from typing import Final

# vLLM 0.33.0's fast path (models/kimi_k3/nvidia/specialized_decode/runtime/decode.py): a step
# runs it only when it has no prompt rows and its tokens, batch × (1 + draft tokens), are at most
# 64 (the largest prepared batch); every other step runs the ordinary forward.
FAST_PATH_MAX_TOKENS: Final = 64


@dataclass(frozen=True)
class DecodeCost:
    fixed_s: float
    per_sequence_s: float
    per_context_token_s: float

    def step_s(self, batch: int, context: int) -> float:
        return self.fixed_s + self.per_sequence_s * (batch - 1) + self.per_context_token_s * context


@dataclass(frozen=True)
class PrefillCost:
    fixed_s: float  # a step of prefill alone: launch and sampling
    per_token_s: float


@dataclass(frozen=True)
class StepCosts:
    ordinary: DecodeCost
    prefill: PrefillCost
    fast: DecodeCost | None = None  # None: no fast path (decode backend `auto`)


def on_fast_path(costs: StepCosts, prefill_tokens: int, batch: int, draft_tokens: int) -> bool:
    """Whether vLLM runs this step on the fast path: pure decode that fits its largest batch."""
    return (
        costs.fast is not None
        and prefill_tokens == 0
        and 0 < batch * (1 + draft_tokens) <= FAST_PATH_MAX_TOKENS
    )


def step_seconds(
    costs: StepCosts, prefill_tokens: int, batch: int, context: int, draft_tokens: int
) -> float:
    """One step: `batch` decoding sequences with `context` KV tokens, and `prefill_tokens`."""
    prefill = costs.prefill.per_token_s * prefill_tokens
    if batch == 0:
        return costs.prefill.fixed_s + prefill
    fast = on_fast_path(costs, prefill_tokens, batch, draft_tokens)
    decode = costs.fast if fast and costs.fast is not None else costs.ordinary
    return decode.step_s(batch, context) + prefill
