"""What one engine step costs: decode as a function of batch and context, prefill per token.

A decode step of `batch` sequences holding `context` tokens of KV cache between them takes
`fixed_s + per_sequence_s x (batch - 1) + per_context_token_s x context`: the weights are read
once a step, each further sequence adds its share of the MoE and projection work, and attention
reads every sequence's cache. Prefill costs `per_token_s` per prompt token computed, and
`per_cached_token_s` per token a request takes from the prefix cache (MLA decompresses the cached
latents), and `per_attention_pair_s` per pair of a computed token and a token it attends to (the
cached ones, the earlier ones of its prompt, itself): attention's share grows with the square of a
prompt, and a sweep's 16-token cache hits say little of a turn that computes thousands of tokens
after tens of thousands cached (without the term the CPU server's sweeps missed the fitted plane by
up to 17-31%, always at the same points; docs/planning.md).

`PrefillCost.fixed_s` is what a request alone waits before its first token beyond its prompt's
tokens (a calibration's TTFT intercept). Part of it is a step's own fixed cost (launch, sampling:
at most a decode step's), the rest is the request's way in and out of the server (HTTP,
tokenization, detokenization) that it pays however busy the engine is, also when its prefill
rides along with other requests' decode steps: that part delays its arrival at the scheduler.
`StepCosts.per_stream_s` lengthens that way in by each request the group is already running: the
API server streams their tokens with the same CPUs it takes a new request in with (on the CPU
server, the time outside the engine's own timestamps grew from 14-25 ms a request at 2 sessions to
23-36 ms at 6; docs/planning.md).

`StepCosts.new_shape_s` is what a step costs more when its token count is not among the last
`SHAPES_KEPT` counts the group ran: vLLM's CPU build makes a oneDNN matmul primitive for each
token count it meets and keeps the last 32 of each weight shape (`create_onednn_mm(weight, 32)`
in vllm/model_executor/layers/utils.py; csrc/cpu/dnnl_helper.cpp keys them by M). On the test
server a prefill of a new count took 1-9 ms longer than the same count again, and nearly every
turn of a replay is a new count where a calibration's repeats are not. A GPU server's kernels take
any count: 0 there.
"""

from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any, Final, TypeVar

# vLLM 0.33.0's fast path (models/kimi_k3/nvidia/specialized_decode/runtime/decode.py): a step
# runs it only when it has no prompt rows and its tokens, batch x (1 + draft tokens), are at most
# 64 (the largest prepared batch); every other step runs the ordinary forward.
FAST_PATH_MAX_TOKENS: Final = 64
# Token counts a group keeps ready (`new_shape_s`): vLLM's CPU build keeps 32 a weight shape.
SHAPES_KEPT: Final = 32


@dataclass(frozen=True)
class DecodeCost:
    fixed_s: float
    per_sequence_s: float
    per_context_token_s: float

    def step_s(self, batch: int, context: int) -> float:
        return self.fixed_s + self.per_sequence_s * (batch - 1) + self.per_context_token_s * context


@dataclass(frozen=True)
class PrefillCost:
    fixed_s: float  # TTFT of a request alone, less its prompt tokens' cost
    per_token_s: float
    per_cached_token_s: float = 0.0
    per_attention_pair_s: float = 0.0


@dataclass(frozen=True)
class StepCosts:
    ordinary: DecodeCost
    prefill: PrefillCost
    fast: DecodeCost | None = None  # None: no fast path (decode backend `auto`)
    per_stream_s: float = 0.0  # added to a request's way in by each request already running
    new_shape_s: float = 0.0  # added to a step of a token count not run lately (module docstring)


@dataclass(frozen=True)
class KvTransfer:
    """A disaggregated request's KV hand-over to its decode group: `fixed_s` each (its KDA state,
    whatever its length) and `per_token_s` each prompt token the decode group does not hold."""

    fixed_s: float = 0.0
    per_token_s: float = 0.0
    source: str = "given"

    def seconds(self, tokens: int) -> float:
        return self.fixed_s + self.per_token_s * tokens


def attention_pairs(start: int, tokens: int) -> int:
    """(token, token it attends to) pairs when `tokens` prompt tokens are computed after `start`
    (cached or computed by earlier steps): causal, so each attends to those before it and itself."""
    return tokens * start + tokens * (tokens + 1) // 2


def request_overhead_s(costs: StepCosts, running: int = 0) -> float:
    """The part of a request's TTFT that is no step's: its way into and out of the server, alone
    (a lone request's TTFT beyond its step) and per request the group is `running`."""
    return max(costs.prefill.fixed_s - costs.ordinary.fixed_s, 0.0) + costs.per_stream_s * running


def on_fast_path(costs: StepCosts, prefill_tokens: int, batch: int, draft_tokens: int) -> bool:
    """Whether vLLM runs this step on the fast path: pure decode that fits its largest batch."""
    return (
        costs.fast is not None
        and prefill_tokens == 0
        and 0 < batch * (1 + draft_tokens) <= FAST_PATH_MAX_TOKENS
    )


def step_seconds(
    costs: StepCosts,
    *,
    prefill_tokens: int,
    cached_tokens: int,
    prefill_pairs: int,
    batch: int,
    context: int,
    draft_tokens: int,
) -> float:
    """One step: `batch` decoding sequences with `context` KV tokens, and `prefill_tokens`
    computed after `cached_tokens` taken from the prefix cache (by requests starting theirs),
    with `prefill_pairs` attention pairs between them (`attention_pairs`)."""
    prefill = (
        costs.prefill.per_token_s * prefill_tokens
        + costs.prefill.per_cached_token_s * cached_tokens
        + costs.prefill.per_attention_pair_s * prefill_pairs
    )
    if batch == 0:
        return costs.prefill.fixed_s - request_overhead_s(costs) + prefill
    fast = on_fast_path(costs, prefill_tokens, batch, draft_tokens)
    decode = costs.fast if fast and costs.fast is not None else costs.ordinary
    return decode.step_s(batch, context) + prefill


Costs = TypeVar("Costs")


def scaled(costs: Costs, factor: float) -> Costs:
    """Step costs `factor` times as long: every time in them (a dataclass's floats, nested). A
    what-if of a slower or faster server (benchmarks/plan_prediction.py, autoscaling.py)."""
    assert is_dataclass(costs)
    assert not isinstance(costs, type)
    changed: dict[str, Any] = {}
    for field in fields(costs):
        value = getattr(costs, field.name)
        if isinstance(value, float):
            changed[field.name] = value * factor
        elif is_dataclass(value):
            changed[field.name] = scaled(value, factor)
    return replace(costs, **changed)
