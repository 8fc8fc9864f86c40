"""The calibration profile's sweep: decode steps across batch sizes and contexts, prefill across
prompt lengths, with and without a prefix-cache hit. `kimi-operator plan` fits its step costs to
what such a run measures.

The sweep runs in phases, one after the other (each phase's requests wait for the previous
phase's answers, as in a closed trace replay), in `PASSES` passes that each take every
measurement once; every request carries its phase in `group`, the same in every pass:

- `decode:b{B}:c{C}`: B requests at once, C-token prompts, `output_tokens` each: once all have
  prefilled, every step decodes B sequences, so the gaps between chunks late in their streams are
  decode step times at batch B (the passes alternate between rising and falling batches);
- `prefill:p{P}`: one request alone with a P-token prompt and a 2-token answer: its TTFT is the
  prefill of P tokens;
- `prefix:p{P}`: a request whose first P - 16 tokens are the same in every pass: the first
  pass's first fills the prefix cache (it is sent twice in that pass), every later one's TTFT is a
  prefill after a hit (the sweep holds a few prefixes of at most `--prompt-tokens`, far less than
  a server's KV cache, so vLLM's least-recently-used eviction leaves them);
- `fresh:p{P}`: a token count the sweep runs nowhere else (drawn from the run's seed, between
  three quarters of P and P; one a pass), sent alone twice, one after the other: the first's TTFT
  over the second's is what a step of a count the server has not run lately costs. vLLM's CPU
  build makes a oneDNN matmul for each new count (1-9 ms more a step on the test server, where
  nearly every turn of a replay is a new count); a GPU server's kernels take any count;
- `streams:s{S}`: S requests stream long answers (`2 x output_tokens`) while a probe with the
  shortest prompt arrives among them (sent when a 2-token request sent with the streams has its
  answer, so they are decoding): the probe's TTFT against a lone request's is what S streams add
  to a new request's way in (the API server's work for them; the engine's share is modelled).

Why passes: the fit takes each measurement's median over its repeats (a decode point: the mean
of every pass's steps), and on a busy or shared machine a single request's TTFT moves by tens of
percent with a scheduling hiccup (two sweeps a minute apart gave TTFTs 15-30% apart), while the
machine's own speed wanders over seconds (a fixed loop 1.5x slower in some 5-second windows on
the 2-CPU test machine). Repeats taken one after the other land in one such window together;
taken a pass apart they land in different ones, and a decode phase measured once (a third of a
second on the CPU server) was as often a slow window's as not: 13 sweeps of one server measured
the same 4-sequence step 6.7-13.4 ms. A pass is every point once, so the repeats of each are
spread over the whole sweep.

Sizes come from the run's options: batches are the powers of two up to `--concurrency` (default
64) and `--concurrency` itself; prompts are `--prompt-tokens` (default 32768) and its half,
quarter and eighth; decode contexts the eighth and the half; streams 0 and every batch less 2
(room for the starter and the probe).
"""

import random
from dataclasses import dataclass
from typing import Final

from kimi_operator.bench import BenchError
from kimi_operator.bench.profiles import PROFILE_DEFAULTS, PlannedRequest

PREFILL_OUTPUT_TOKENS: Final = 2
PREFIX_UNSHARED_TOKENS: Final = 16  # a whole block of the hit's prompt is its own
STREAM_OUTPUT_FACTOR: Final = 2  # the streams' answers outlast the probe's way in and prefill
PASSES: Final = 3  # of the whole sweep: each measurement once a pass (module docstring)


def batch_sizes(largest: int) -> list[int]:
    sizes = [1]
    while sizes[-1] * 2 < largest:
        sizes.append(sizes[-1] * 2)
    return sorted({*sizes, largest})


def prompt_lengths(longest: int) -> list[int]:
    return sorted({max(longest // share, 2 * PREFIX_UNSHARED_TOKENS) for share in (8, 4, 2, 1)})


def decode_contexts(longest: int) -> list[int]:
    return sorted({max(longest // 8, 1), max(longest // 2, 1)})


def fresh_lengths(longest_prompt: int, seed: int) -> dict[int, list[int]]:
    """`PASSES` token counts for each prompt length P, distinct, odd, between 3P/4 and P - 2:
    with even prompt lengths (the default's powers of two) every other step of the sweep runs an
    even count, so these are new to the server unless it ran them before the sweep."""
    rng = random.Random(seed)
    return {
        prompt: rng.sample(range(prompt * 3 // 4 | 1, prompt - 1, 2), PASSES)
        for prompt in prompt_lengths(longest_prompt)
    }


def calibration_plan(
    largest_batch: int, longest_prompt: int, output_tokens: int, seed: int = 0
) -> list[PlannedRequest]:
    """The sweep: `PASSES` passes, each taking every measurement once (module docstring)."""
    plan: list[PlannedRequest] = []
    previous: tuple[int, ...] = ()

    def add(label: str, prompt: int, output: int, count: int, shared: int = 0) -> None:
        for _ in range(count):
            plan.append(
                PlannedRequest(
                    index=len(plan),
                    start_s=0.0,
                    prompt_tokens=prompt,
                    output_tokens=output,
                    group=label,
                    shared_prefix_tokens=shared,
                    after=previous,
                )
            )

    def phase(label: str, prompt: int, output: int, count: int, shared: int = 0) -> None:
        nonlocal previous
        first = len(plan)
        add(label, prompt, output, count, shared)
        previous = tuple(range(first, len(plan)))

    fresh = fresh_lengths(longest_prompt, seed)
    context = decode_contexts(longest_prompt)[0]
    probe = prompt_lengths(longest_prompt)[0]
    for turn in range(PASSES):
        batches = batch_sizes(largest_batch)
        for decode_context in decode_contexts(longest_prompt):
            for batch in batches if turn % 2 == 0 else batches[::-1]:  # drifts even out
                phase(f"decode:b{batch}:c{decode_context}", decode_context, output_tokens, batch)
        for prompt in prompt_lengths(longest_prompt):
            phase(f"prefill:p{prompt}", prompt, PREFILL_OUTPUT_TOKENS, 1)
        for prompt in prompt_lengths(longest_prompt):
            shared = prompt - PREFIX_UNSHARED_TOKENS
            for _ in range(2 if turn == 0 else 1):  # the first pass's first fills the cache
                phase(f"prefix:p{prompt}", prompt, PREFILL_OUTPUT_TOKENS, 1, shared)
        for prompt, counts in fresh.items():
            for _ in range(2):  # new to the server, then run before
                phase(f"fresh:p{prompt}", counts[turn], PREFILL_OUTPUT_TOKENS, 1)
        for streams in stream_counts(largest_batch):
            label = f"streams:s{streams}"
            first = len(plan)
            add(label, context, STREAM_OUTPUT_FACTOR * output_tokens, streams)
            add(f"{label}:starter", context, PREFILL_OUTPUT_TOKENS, 1)
            previous = (len(plan) - 1,)  # the probe waits for the starter's answer only
            add(f"{label}:probe", probe, PREFILL_OUTPUT_TOKENS, 1)
            previous = tuple(range(first, len(plan)))
    return plan


def stream_counts(largest_batch: int) -> list[int]:
    """Streams decoding while a probe arrives: none, and each batch size that leaves room for
    the starter and the probe."""
    return sorted({0, *(b - 2 for b in batch_sizes(largest_batch) if b > 2)})


@dataclass(frozen=True)
class ServerLimits:
    """What the server can take, as it says (None: it does not say)."""

    max_model_len: int | None  # its model card on /v1/models
    max_num_seqs: int | None  # kimi_scheduler_config_info on its /metrics


def longest_request(longest_prompt: int, output_tokens: int) -> int:
    """The most tokens (prompt and answer) one request of the sweep holds."""
    return max(
        *(prompt + PREFILL_OUTPUT_TOKENS for prompt in prompt_lengths(longest_prompt)),
        *(context + output_tokens for context in decode_contexts(longest_prompt)),
        decode_contexts(longest_prompt)[0] + STREAM_OUTPUT_FACTOR * output_tokens,
    )


def sized_to_server(
    prompt_tokens: int | None, concurrency: int | None, output_tokens: int, limits: ServerLimits
) -> tuple[int, int]:
    """The sweep's longest prompt and largest batch: the flags where given (refused, naming the
    flag, when the server cannot take them); else the defaults, halved until every request fits
    the server's context, and no larger a batch than it runs at once."""
    defaults = PROFILE_DEFAULTS["calibration"]
    context = limits.max_model_len
    prompt = prompt_tokens or defaults.prompt_tokens
    if prompt_tokens is None and context is not None:
        shortest = 2 * PREFIX_UNSHARED_TOKENS
        while prompt > shortest and longest_request(prompt, output_tokens) > context:
            prompt //= 2
    if context is not None and longest_request(prompt, output_tokens) > context:
        flag = f"--prompt-tokens {prompt}" if prompt_tokens else f"--output-tokens {output_tokens}"
        raise BenchError(
            f"{flag}: the sweep's longest request would hold "
            f"{longest_request(prompt, output_tokens)} tokens, over the server's max_model_len "
            f"{context} (/v1/models): give a smaller --prompt-tokens or --output-tokens"
        )
    largest, default = limits.max_num_seqs, defaults.concurrency or 1
    batch = concurrency or min(default, largest or default)
    if concurrency is not None and largest is not None and concurrency > largest:
        raise BenchError(
            f"--concurrency {concurrency}: the server runs at most {largest} sequences at once "
            "(its max_num_seqs, kimi_scheduler_config_info): a larger batch would measure "
            f"queueing, not a decode step; give at most {largest}"
        )
    return prompt, batch
