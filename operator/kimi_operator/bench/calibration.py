"""The calibration profile's sweep: decode steps across batch sizes and contexts, prefill across
prompt lengths, with and without a prefix-cache hit. `kimi-operator plan` fits its step costs to
what such a run measures.

The sweep runs in phases, one after the other (each phase's requests wait for the previous
phase's answers, as in a closed trace replay); every request carries its phase in `group`:

- `decode:b{B}:c{C}`: B requests at once, C-token prompts, `output_tokens` each: once all have
  prefilled, every step decodes B sequences, so the gaps between chunks late in their streams are
  decode step times at batch B;
- `prefill:p{P}`: one request alone with a P-token prompt and a 2-token answer: its TTFT is the
  prefill of P tokens;
- `prefix:p{P}`: two requests one after the other whose first P - 16 tokens are the same: the
  second's TTFT is a prefill after a prefix-cache hit.

Sizes come from the run's options: batches are the powers of two up to `--concurrency` (default
64) and `--concurrency` itself; prompts are `--prompt-tokens` (default 32768) and its half,
quarter and eighth; decode contexts the eighth and the half.
"""

from typing import Final

from kimi_operator.bench.profiles import PlannedRequest

PREFILL_OUTPUT_TOKENS: Final = 2
PREFIX_UNSHARED_TOKENS: Final = 16  # a whole block of the hit's prompt is its own


def batch_sizes(largest: int) -> list[int]:
    sizes = [1]
    while sizes[-1] * 2 < largest:
        sizes.append(sizes[-1] * 2)
    return sorted({*sizes, largest})


def prompt_lengths(longest: int) -> list[int]:
    return sorted({max(longest // share, 2 * PREFIX_UNSHARED_TOKENS) for share in (8, 4, 2, 1)})


def decode_contexts(longest: int) -> list[int]:
    return sorted({max(longest // 8, 1), max(longest // 2, 1)})


def calibration_plan(
    largest_batch: int, longest_prompt: int, output_tokens: int
) -> list[PlannedRequest]:
    plan: list[PlannedRequest] = []
    previous: tuple[int, ...] = ()

    def phase(label: str, prompt: int, output: int, count: int, shared: int = 0) -> None:
        nonlocal previous
        first = len(plan)
        for index in range(first, first + count):
            plan.append(
                PlannedRequest(
                    index=index,
                    start_s=0.0,
                    prompt_tokens=prompt,
                    output_tokens=output,
                    group=label,
                    shared_prefix_tokens=shared,
                    after=previous,
                )
            )
        previous = tuple(range(first, len(plan)))

    for context in decode_contexts(longest_prompt):
        for batch in batch_sizes(largest_batch):
            phase(f"decode:b{batch}:c{context}", context, output_tokens, batch)
    for prompt in prompt_lengths(longest_prompt):
        phase(f"prefill:p{prompt}", prompt, PREFILL_OUTPUT_TOKENS, 1)
    for prompt in prompt_lengths(longest_prompt):
        shared = prompt - PREFIX_UNSHARED_TOKENS
        for _ in range(2):  # the first fills the cache, the second hits it
            phase(f"prefix:p{prompt}", prompt, PREFILL_OUTPUT_TOKENS, 1, shared)
    return plan
