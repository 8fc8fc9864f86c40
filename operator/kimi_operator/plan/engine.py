"""One serving group, scheduled as vLLM's v1 scheduler does, one step at a time.

Each step first serves the running requests in the order they were admitted (a request still
prefilling takes as many prompt tokens as the budget leaves, a decoding one takes 1 + draft
tokens), then admits waiting requests while fewer than `max_num_seqs` run and budget is left,
each starting its prompt after the tokens the prefix cache holds (whole blocks, never the last
prompt token). A request's first token comes at the end of the step that computes its last
prompt token; each decode step then adds 1 + the mean accepted drafts (fractions carry over).
The prefix cache keeps every group's longest computed shared prefix (no eviction). A step
whose token count (prompt tokens and decoding rows) is not among the last `SHAPES_KEPT` the group
ran costs `new_shape_s` more (costs.py) when it computes prompt tokens; a decode step's count
is its batch, which a group that has served has run before.

A decode group of a disaggregated deployment also takes requests whose prompt a prefill group
computed: their KV arrives whole (the group then holds it, as its prefix cache does), their first
row computes the last prompt token itself (vLLM's hybrid models take N - 1 tokens' state) and
yields the first token, without drafts; each row after that yields 1 + the accepted drafts.
"""

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Literal

from kimi_operator.bench.profiles import PlannedRequest
from kimi_operator.plan.costs import (
    SHAPES_KEPT,
    StepCosts,
    attention_pairs,
    on_fast_path,
    step_seconds,
)

Role = Literal["both", "prefill", "decode"]  # disaggregated groups do one part only
# vLLM's prefix cache keeps whole blocks; a server that does not report its block size is taken
# to have vLLM's default on GPUs (the CPU build keeps 128: its `vllm:cache_config_info`).
DEFAULT_BLOCK_TOKENS = 16


@dataclass(frozen=True)
class EngineSpec:
    costs: StepCosts
    max_num_seqs: int
    max_batched_tokens: int = 8192
    draft_tokens: int = 0
    acceptance: float = 0.0  # mean drafts accepted per decode step
    prefix_caching: bool = True
    block_tokens: int = DEFAULT_BLOCK_TOKENS  # a hit is whole blocks
    role: Role = "both"


@dataclass(eq=False)  # identity: two requests may look alike
class Live:
    """A request in a group: how far its prompt and output have come, and when tokens came."""

    request: PlannedRequest
    sent_s: float
    prefilled: int = 0
    cached: int = 0  # prompt tokens its group's prefix cache held when it was admitted
    emitted: float = 0.0  # output tokens so far; fractional with drafts
    token_times: list[float] = field(default_factory=list)
    token_counts: list[int] = field(default_factory=list)
    finished_s: float | None = None

    @property
    def prefill_done(self) -> bool:
        return self.prefilled >= self.request.prompt_tokens

    def emit(self, now: float, tokens: float) -> None:
        total = min(float(self.request.output_tokens), self.emitted + tokens)
        count = math.floor(total) - math.floor(self.emitted)
        self.emitted = total
        if count:
            self.token_times.append(now)
            self.token_counts.append(count)
        if math.floor(total) >= self.request.output_tokens:
            self.finished_s = now


@dataclass
class Step:
    prefill: list[tuple[Live, int]]
    decode: list[Live]
    seconds: float
    fast: bool


@dataclass
class Engine:
    spec: EngineSpec
    waiting: deque[Live] = field(default_factory=deque)
    running: list[Live] = field(default_factory=list)
    cached: dict[str, int] = field(default_factory=dict)  # prefix group -> tokens cached
    arriving: int = 0  # routed here, still on their way in
    decode_steps: int = 0
    fast_steps: int = 0
    shapes: OrderedDict[int, None] = field(default_factory=OrderedDict)  # token counts, LRU

    @property
    def load(self) -> int:
        return self.arriving + len(self.waiting) + len(self.running)

    def cache_hit(self, request: PlannedRequest) -> int:
        if not self.spec.prefix_caching or request.group is None:
            return 0
        hit = min(self.cached.get(request.group, 0), request.shared_prefix_tokens)
        hit = min(hit, request.prompt_tokens - 1)
        return hit - hit % self.spec.block_tokens

    def _remember(self, request: PlannedRequest, computed: int) -> None:
        if request.group is not None and self.spec.prefix_caching:
            shared = min(computed, request.shared_prefix_tokens)
            self.cached[request.group] = max(self.cached.get(request.group, 0), shared)

    def _new_shape(self, tokens: int) -> bool:
        """Whether a step of `tokens` is a count not among the last `SHAPES_KEPT` run."""
        new = tokens not in self.shapes
        self.shapes[tokens] = None
        self.shapes.move_to_end(tokens)
        if len(self.shapes) > SHAPES_KEPT:
            self.shapes.popitem(last=False)
        return new

    def schedule(self) -> Step | None:
        """The next step's work, or None when there is none."""
        spec = self.spec
        budget = spec.max_batched_tokens
        per_decode = 1 + spec.draft_tokens
        prefill: list[tuple[Live, int]] = []
        decode: list[Live] = []
        cached = 0
        for live in self.running:
            if live.prefill_done:
                if budget >= per_decode:
                    decode.append(live)
                    budget -= per_decode
            elif budget > 0:
                tokens = min(live.request.prompt_tokens - live.prefilled, budget)
                prefill.append((live, tokens))
                budget -= tokens
        while self.waiting and len(self.running) < spec.max_num_seqs and budget > 0:
            live = self.waiting[0]
            if live.prefill_done:  # handed over by a prefill group
                if budget < per_decode:
                    break
                decode.append(live)
                budget -= per_decode
                self._remember(live.request, live.request.prompt_tokens)
            else:
                live.prefilled = live.cached = self.cache_hit(live.request)
                cached += live.prefilled
                tokens = min(live.request.prompt_tokens - live.prefilled, budget)
                prefill.append((live, tokens))
                budget -= tokens
            self.running.append(self.waiting.popleft())
        if not prefill and not decode:
            return None
        prompt = sum(tokens for _, tokens in prefill)
        pairs = sum(attention_pairs(live.prefilled, tokens) for live, tokens in prefill)
        context = sum(live.prefilled + math.floor(live.emitted) for live in decode)
        new_shape = self._new_shape(prompt + len(decode) * per_decode) and prompt > 0
        return Step(
            prefill=prefill,
            decode=decode,
            seconds=step_seconds(
                spec.costs,
                prefill_tokens=prompt,
                cached_tokens=cached,
                prefill_pairs=pairs,
                batch=len(decode),
                context=context,
                draft_tokens=spec.draft_tokens,
            )
            + spec.costs.new_shape_s * new_shape,
            fast=on_fast_path(spec.costs, prompt, len(decode), spec.draft_tokens),
        )

    def finish(self, step: Step, now: float) -> list[Live]:
        """Apply a step that ended at `now`; returns the requests that leave the group."""
        leaving: list[Live] = []
        if step.decode:
            self.decode_steps += 1
            self.fast_steps += step.fast
        for live, tokens in step.prefill:
            live.prefilled += tokens
            self._remember(live.request, live.prefilled)
            if live.prefill_done:
                if self.spec.role == "prefill":
                    leaving.append(live)  # its first token comes from the decode group
                else:
                    live.emit(now, 1.0)
        for live in step.decode:  # a handed-over request's first row: its first token
            live.emit(now, 1.0 + self.spec.acceptance if live.emitted else 1.0)
        leaving += [live for live in self.running if live.finished_s is not None]
        self.running = [live for live in self.running if live not in leaving]
        return leaving
