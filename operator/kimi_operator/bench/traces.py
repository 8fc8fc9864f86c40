"""Agent traces: the JSONL format the agentic profile replays, and a synthetic generator.

One JSON object per line:

    {"start_s": 12.5, "prompt_tokens": 18000, "output_tokens": 350,
     "prefix_group": "session-3", "shared_prefix_tokens": 16000, "fanout": 1,
     "id": "s3-t2", "session": "session-3", "after": "s3-t1", "think_s": 2.0,
     "tools": [{"type": "function", "function": {"name": "read_file",
                "description": "Read a file", "parameters": {"type": "object", ...}}}]}

- `start_s`: when to send, in seconds from the start of the replay;
- `prompt_tokens`, `output_tokens`: lengths (the output is forced with `ignore_eos`);
- `prefix_group` / `shared_prefix_tokens` (optional): requests of one group share their first
  `shared_prefix_tokens` tokens — an agent's growing conversation, which a prefix cache reuses;
- `fanout` (optional, default 1): parallel sub-agents sent at the same moment with the same shape;
- `session` (optional): the task the request belongs to; a request without one is a task of its own;
- `id`, `after`, `think_s` (optional): `after` names the `id` of a request of the same session whose
  answer this one waits for (all of its sub-agents' answers when it fans out), `think_s` the agent's
  time between that answer and this request. A closed replay sends it at the later of `start_s` and
  that answer plus `think_s`; an open replay sends every request at its `start_s`;
- `tools` (optional): the tools the agent offers, as OpenAI chat tool definitions; the request is
  sent with them and `tool_choice: "auto"` (chat API only), and the results count the answers
  that came back with structured `tool_calls`.
"""

import hashlib
import heapq
import json
import random
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kimi_operator.bench import BenchError
from kimi_operator.bench.profiles import PlannedRequest

MAX_FANOUT = 256
MAX_TOOLS = 128  # OpenAI's limit on tools per request
Name = Annotated[str, Field(min_length=1)]


class ToolFunction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    strict: bool | None = None


class ToolDefinition(BaseModel):
    """One tool an agent offers, as the OpenAI chat API takes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["function"]
    function: ToolFunction


# A coding agent's tools, offered by every turn of a synthetic trace generated with tools.
CODING_AGENT_TOOLS: tuple[ToolDefinition, ...] = tuple(
    ToolDefinition(
        type="function",
        function=ToolFunction(
            name=name,
            description=description,
            parameters={
                "type": "object",
                "properties": {key: {"type": "string"} for key in keys},
                "required": list(keys),
            },
        ),
    )
    for name, description, keys in (
        ("read_file", "Read a file of the repository.", ("path",)),
        ("run_shell", "Run a shell command in the repository and return its output.", ("command",)),
        ("edit_file", "Replace text in a file.", ("path", "old", "new")),
    )
)


class TraceEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    start_s: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    prompt_tokens: Annotated[int, Field(ge=1, strict=True)]
    output_tokens: Annotated[int, Field(ge=1, strict=True)]
    prefix_group: str | None = None
    shared_prefix_tokens: Annotated[int, Field(ge=0, strict=True)] = 0
    fanout: Annotated[int, Field(ge=1, le=MAX_FANOUT, strict=True)] = 1
    id: Name | None = None
    session: Name | None = None
    after: Name | None = None
    think_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    tools: Annotated[tuple[ToolDefinition, ...], Field(max_length=MAX_TOOLS)] = ()

    @model_validator(mode="after")
    def _prefix(self) -> Self:
        if self.shared_prefix_tokens > self.prompt_tokens:
            raise ValueError("shared_prefix_tokens exceeds prompt_tokens")
        if self.shared_prefix_tokens and self.prefix_group is None:
            raise ValueError("shared_prefix_tokens needs a prefix_group")
        if self.after is not None and self.session is None:
            raise ValueError("after needs a session (a request without one is a task of its own)")
        if self.think_s and self.after is None:
            raise ValueError("think_s needs an after (the answer the agent thinks about)")
        names = [tool.function.name for tool in self.tools]
        if len(set(names)) < len(names):
            raise ValueError("tools: each function name once")
        return self


def _first_problem(error: ValidationError) -> str:
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    message = problem["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def _check_dependencies(numbered: list[tuple[int, TraceEntry]], label: str) -> None:
    """Unique ids; every `after` names an id of its own session; no request waits on itself."""
    by_id: dict[str, tuple[int, TraceEntry]] = {}
    for number, entry in numbered:
        if entry.id is not None:
            if entry.id in by_id:
                raise BenchError(
                    f"{label} line {number}: id: {entry.id!r} is already the id of line "
                    f"{by_id[entry.id][0]}"
                )
            by_id[entry.id] = (number, entry)
    for number, entry in numbered:
        if entry.after is None:
            continue
        if entry.after not in by_id:
            raise BenchError(f"{label} line {number}: after: no request has id {entry.after!r}")
        line, parent = by_id[entry.after]
        if parent.session != entry.session:
            raise BenchError(
                f"{label} line {number}: after: {entry.after!r} (line {line}) is in session "
                f"{parent.session!r}, not {entry.session!r}: a request waits only within its task"
            )
    settled: set[str] = set()  # ids whose chain of `after`s is known to end
    for number, entry in numbered:
        chain: list[str] = []
        current = entry
        while current.id is not None and current.id not in settled:
            if current.id in chain:
                cycle = [*chain[chain.index(current.id) :], current.id]
                raise BenchError(
                    f"{label} line {number}: after: the requests wait for each other in a cycle: "
                    + " -> ".join(f"{name!r} (line {by_id[name][0]})" for name in cycle)
                )
            chain.append(current.id)
            if current.after is None:
                break
            current = by_id[current.after][1]
        settled.update(chain)


def parse_trace(text: str, label: str) -> list[TraceEntry]:
    numbered = []
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
            numbered.append((number, TraceEntry.model_validate(body)))
        except ValidationError as error:
            raise BenchError(f"{label} line {number}: {_first_problem(error)}") from None
    if not numbered:
        raise BenchError(f"{label}: the trace has no entries")
    _check_dependencies(numbered, label)
    return [entry for _, entry in numbered]


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


def has_dependencies(entries: list[TraceEntry]) -> bool:
    return any(entry.after is not None for entry in entries)


def plan_trace(entries: list[TraceEntry], limit: int | None) -> list[PlannedRequest]:
    """Expand fan-out into requests, ordered by start time; keep the first `limit`.

    A request comes after every request it waits for, whatever their start times, so a plan cut
    short by `limit` never waits for a request it left out. Start times count from the trace's
    first request: a replay does not begin by idling.
    """
    origin = min(entry.start_s for entry in entries)
    waiting: dict[str, list[int]] = {}  # id -> positions of the entries after it
    ready: list[tuple[float, int]] = []  # (start_s, position): a heap
    for position, entry in enumerate(entries):
        if entry.after is None:
            ready.append((entry.start_s, position))
        else:
            waiting.setdefault(entry.after, []).append(position)
    heapq.heapify(ready)
    planned: dict[str, tuple[int, ...]] = {}  # id -> its requests' indexes
    plan: list[PlannedRequest] = []
    while ready:
        _, position = heapq.heappop(ready)
        entry = entries[position]
        task = entry.session or f"request-{len(plan)}"
        after = planned[entry.after] if entry.after is not None else ()
        first = len(plan)
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
                    task=task,
                    after=after,
                    think_s=entry.think_s,
                    # As the trace has them: no defaults added to what goes to the server.
                    tools=tuple(tool.model_dump(exclude_unset=True) for tool in entry.tools),
                )
            )
        if entry.id is not None:
            planned[entry.id] = tuple(range(first, len(plan)))
            for child in waiting.get(entry.id, ()):
                heapq.heappush(ready, (entries[child].start_s, child))
    return plan


def generate_trace(
    *,
    seed: int = 0,
    sessions: int = 8,
    turns: int = 6,
    system_tokens: int = 6000,
    duration_s: float = 60.0,
    tools: bool = False,
) -> list[TraceEntry]:
    """Coding-agent-like sessions: a shared system prompt and a growing history per session.

    Each turn sends the whole conversation so far (its earlier part shared with the previous turn)
    after the previous turn's answer and a tool call's worth of thinking; one turn in four fans out
    to 2-6 parallel sub-agents that start from the session's context, and the next turn waits for
    all of them. Sessions start spread over the first half of `duration_s`. A turn's `start_s` is
    the earliest it could be sent (as if every answer came at once), so a closed replay is paced
    by the server alone and an open one sends each turn without waiting for its answer. With
    `tools`, every turn offers CODING_AGENT_TOOLS.
    """
    rng = random.Random(seed)
    entries: list[TraceEntry] = []
    for session in range(sessions):
        name = f"session-{session}"
        start = rng.uniform(0, duration_s / 2)
        context = system_tokens + rng.randint(200, 2000)  # system prompt + the user's task
        previous: str | None = None
        for turn in range(turns):
            fanout = rng.randint(2, 6) if rng.random() < 0.25 else 1
            output = rng.randint(200, 800) if fanout > 1 else rng.randint(60, 600)
            prompt = context + (rng.randint(100, 400) if fanout > 1 else 0)
            think = round(rng.uniform(0.5, 5.0), 3) if previous is not None else 0.0
            start += think
            entries.append(
                TraceEntry(
                    start_s=round(start, 3),
                    prompt_tokens=prompt,
                    output_tokens=output,
                    prefix_group=name,
                    shared_prefix_tokens=context,
                    fanout=fanout,
                    id=f"{name}-turn-{turn}",
                    session=name,
                    after=previous,
                    think_s=think,
                    tools=CODING_AGENT_TOOLS if tools else (),
                )
            )
            previous = f"{name}-turn-{turn}"
            context += output + rng.randint(50, 3000)  # the answer and a tool's result
    entries.sort(key=lambda entry: entry.start_s)
    return entries
