"""Agent traces: the JSONL format the agentic profile replays, and a synthetic generator.

One JSON object per line:

    {"start_s": 12.5, "prompt_tokens": 18000, "output_tokens": 350,
     "prefix_group": "session-3", "shared_prefix_tokens": 16000, "fanout": 1}

- `start_s`: when to send, in seconds from the start of the replay (open loop: the replay does not
  wait for earlier requests, as an agent fleet would not);
- `prompt_tokens`, `output_tokens`: lengths (the output is forced with `ignore_eos`);
- `prefix_group` / `shared_prefix_tokens` (optional): requests of one group share their first
  `shared_prefix_tokens` tokens — an agent's growing conversation, which a prefix cache reuses;
- `fanout` (optional, default 1): parallel sub-agents sent at the same moment with the same shape.
"""

import hashlib
import json
import random
from pathlib import Path
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kimi_operator.bench import BenchError
from kimi_operator.bench.profiles import PlannedRequest

MAX_FANOUT = 256


class TraceEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    start_s: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    prompt_tokens: Annotated[int, Field(ge=1, strict=True)]
    output_tokens: Annotated[int, Field(ge=1, strict=True)]
    prefix_group: str | None = None
    shared_prefix_tokens: Annotated[int, Field(ge=0, strict=True)] = 0
    fanout: Annotated[int, Field(ge=1, le=MAX_FANOUT, strict=True)] = 1

    @model_validator(mode="after")
    def _prefix(self) -> Self:
        if self.shared_prefix_tokens > self.prompt_tokens:
            raise ValueError("shared_prefix_tokens exceeds prompt_tokens")
        if self.shared_prefix_tokens and self.prefix_group is None:
            raise ValueError("shared_prefix_tokens needs a prefix_group")
        return self


def _first_problem(error: ValidationError) -> str:
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    message = problem["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def parse_trace(text: str, label: str) -> list[TraceEntry]:
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            body = json.loads(line)
        except json.JSONDecodeError as error:
            raise BenchError(f"{label} line {number}: not JSON: {error.msg}") from None
        if not isinstance(body, dict):
            raise BenchError(f"{label} line {number}: expected a JSON object")
        try:
            entries.append(TraceEntry.model_validate(body))
        except ValidationError as error:
            raise BenchError(f"{label} line {number}: {_first_problem(error)}") from None
    if not entries:
        raise BenchError(f"{label}: the trace has no entries")
    return entries


def load_trace(path: str) -> list[TraceEntry]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise BenchError(f"{path}: cannot read the trace: {reason}") from None
    return parse_trace(text, path)


def dump_trace(entries: list[TraceEntry]) -> str:
    """Canonical JSONL: one entry a line, defaults left out."""
    return "".join(entry.model_dump_json(exclude_defaults=True) + "\n" for entry in entries)


def trace_digest(entries: list[TraceEntry]) -> str:
    return hashlib.sha256(dump_trace(entries).encode()).hexdigest()


def plan_trace(entries: list[TraceEntry], limit: int | None) -> list[PlannedRequest]:
    """Expand fan-out into requests, ordered by start time; keep the first `limit`.

    Start times count from the trace's first request: a replay does not begin by idling.
    """
    ordered = sorted(entries, key=lambda entry: entry.start_s)
    origin = ordered[0].start_s if ordered else 0.0
    plan: list[PlannedRequest] = []
    for entry in ordered:
        for _ in range(entry.fanout):
            if limit is not None and len(plan) >= limit:
                return plan
            plan.append(
                PlannedRequest(
                    index=len(plan),
                    start_s=entry.start_s - origin,
                    prompt_tokens=entry.prompt_tokens,
                    output_tokens=entry.output_tokens,
                    group=entry.prefix_group,
                    shared_prefix_tokens=entry.shared_prefix_tokens,
                )
            )
    return plan


def generate_trace(
    *,
    seed: int = 0,
    sessions: int = 8,
    turns: int = 6,
    system_tokens: int = 6000,
    duration_s: float = 60.0,
    assumed_decode_tokens_per_s: float = 100.0,
) -> list[TraceEntry]:
    """Coding-agent-like sessions: a shared system prompt and a growing history per session.

    Each turn sends the whole conversation so far (its earlier part shared with the previous turn),
    waits for a tool call's worth of time and goes on; one turn in four fans out to 2-6 parallel
    sub-agents that start from the session's context. Sessions start spread over the first half of
    `duration_s`; turn spacing assumes `assumed_decode_tokens_per_s` so that the trace's own
    arrivals do not depend on the server replaying it.
    """
    rng = random.Random(seed)
    entries: list[TraceEntry] = []
    for session in range(sessions):
        group = f"session-{session}"
        start = rng.uniform(0, duration_s / 2)
        context = system_tokens + rng.randint(200, 2000)  # system prompt + the user's task
        for _ in range(turns):
            fanout = rng.randint(2, 6) if rng.random() < 0.25 else 1
            output = rng.randint(200, 800) if fanout > 1 else rng.randint(60, 600)
            prompt = context + (rng.randint(100, 400) if fanout > 1 else 0)
            entries.append(
                TraceEntry(
                    start_s=round(start, 3),
                    prompt_tokens=prompt,
                    output_tokens=output,
                    prefix_group=group,
                    shared_prefix_tokens=context,
                    fanout=fanout,
                )
            )
            tool_result = rng.randint(50, 3000)
            context += output + tool_result
            start += output / assumed_decode_tokens_per_s + rng.uniform(0.5, 5.0)
    entries.sort(key=lambda entry: entry.start_s)
    return entries
