"""The streaming client: sends planned requests and times every SSE chunk as it arrives.

aiohttp, because the client's own cost per chunk is what distorts inter-token latency under load:
streaming 64 concurrent SSE responses here, aiohttp spent 37-45 µs of client CPU per chunk against
httpx's 76-79 µs (see `benchmarks/bench_client.py` for what the whole client sustains). Request
bodies are serialized before the run starts, so building a 32K-token prompt never stalls the event
loop while other streams are being timed.
"""

import asyncio
import functools
import json
import os
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, TextIO

import aiohttp
from aiohttp.client_proto import ResponseHandler

from kimi_operator.bench.profiles import PlannedRequest
from kimi_operator.bench.results import Api, RequestRecord, TokenCounts
from kimi_operator.bench.stats import decode_rate
from kimi_operator.bench.traceparent import TraceParent


class _StampedProtocol(ResponseHandler):
    """aiohttp's connection protocol, noting when bytes last came off the socket.

    The event loop calls `data_received` as soon as the socket is readable; the reading coroutine
    runs later, after the loop has served every other ready stream. At concurrency 64 a decode
    step's chunks arrive together, so stamping here rather than in the coroutine keeps the client's
    own queueing out of the inter-token latencies it reports.
    """

    arrived = 0.0

    def data_received(self, data: bytes) -> None:
        self.arrived = perf_counter()
        super().data_received(data)


def stamping_connector() -> aiohttp.TCPConnector:
    """A connector whose connections stamp arrivals (aiohttp 3.14's protocol factory hook)."""
    connector = aiohttp.TCPConnector(limit=0)  # the run's semaphore limits concurrency
    connector._factory = functools.partial(  # type: ignore[assignment]
        _StampedProtocol, loop=asyncio.get_running_loop()
    )
    return connector


ERROR_TEXT_LIMIT = 200
# The start of Kimi K3's tool-call channel: in an answer's text it means the server parsed no call.
TOOL_MARKUP = "<|open|>tools<|sep|>"


def request_body(
    api: Api,
    model: str,
    prompt: str,
    output_tokens: int,
    ignore_eos: bool,
    *,
    tools: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        if tools:  # an agent's turn: the model may answer with calls
            body |= {"tools": list(tools), "tool_choice": "auto"}
    else:
        body["prompt"] = prompt
    body |= {
        "max_tokens": output_tokens,
        "temperature": 0,
        "stream": True,
        # vLLM's continuous_usage_stats puts the running token count in every chunk: the only
        # way to know how many tokens a chunk carries when speculative decoding sends several.
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if ignore_eos:
        body["ignore_eos"] = True
    return body


@dataclass
class Progress:
    """Counters the client bumps as it goes; `ticker` draws them."""

    total: int
    done: int = 0
    failed: int = 0
    tokens: int = 0
    started: float = field(default_factory=perf_counter)

    def line(self) -> str:
        width = 30
        filled = width * self.done // self.total if self.total else width
        elapsed = perf_counter() - self.started
        return (
            f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} requests"
            f"  {self.failed} failed  {self.tokens} tokens  {elapsed:.0f}s"
        )

    async def ticker(self, stream: TextIO) -> None:
        """Redraw in place on a terminal (5 Hz); print a line every 10 s to a log."""
        tty = stream.isatty()
        while True:
            await asyncio.sleep(0.2 if tty else 10.0)
            stream.write(f"\r{self.line()}" if tty else f"{self.line()}\n")
            stream.flush()


@dataclass
class Outcome:
    sent: float
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int | None] = field(default_factory=list)
    final_tokens: int | None = None
    prompt_tokens: int | None = None
    request_id: str | None = None
    finished: float | None = None
    error: str | None = None
    tool_calls: set[int] = field(default_factory=set)  # indexes of the structured calls streamed
    text: list[str] = field(default_factory=list)  # answer text, kept for tool-using requests
    trace: TraceParent | None = None  # the traceparent it was sent with


def _carries_text(choices: list[dict[str, Any]]) -> bool:
    for choice in choices:
        if choice.get("text"):
            return True
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"):
            return True
        if delta.get("tool_calls"):
            return True
    return False


def _error_text(body: Any) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return str(message)[:ERROR_TEXT_LIMIT]
    return str(body)[:ERROR_TEXT_LIMIT]


def connect_reason(error: aiohttp.ClientConnectorError) -> str:
    """ "Connection refused" rather than aiohttp's "Connect call failed ('127.0.0.1', 8000)"."""
    number = error.os_error.errno
    return os.strerror(number) if number else str(error.os_error)


def _http_error(status: int, text: str) -> str:
    try:
        detail = _error_text(json.loads(text))
    except ValueError:
        detail = text.strip()[:ERROR_TEXT_LIMIT]
    return f"HTTP {status}: {detail}" if detail else f"HTTP {status}"


class _Stream:
    """SSE decoding and token accounting for one response; with `tools`, the structured tool
    calls and the answer's text too."""

    def __init__(self, outcome: Outcome, progress: Progress, tools: bool = False) -> None:
        self.outcome = outcome
        self.progress = progress
        self.tools = tools
        self.done = False
        self._data: list[bytes] = []
        self._buffer = b""
        self._last_usage = 0

    def feed(self, data: bytes, now: float) -> None:
        lines = (self._buffer + data).split(b"\n")
        self._buffer = lines.pop()
        for raw in lines:
            line = raw.rstrip(b"\r")
            if not line:
                if self._data:
                    payload = b"\n".join(self._data)
                    self._data = []
                    self._event(payload, now)
            elif line.startswith(b"data:"):
                self._data.append(line[5:].lstrip())

    def _event(self, payload: bytes, now: float) -> None:
        outcome = self.outcome
        if payload == b"[DONE]":
            self.done = True
            return
        if self.done or outcome.error is not None:
            return
        event = json.loads(payload.decode())  # str parses faster than bytes
        if not isinstance(event, dict):
            outcome.error = "malformed stream: an event is not a JSON object"
            return
        choices = event.get("choices") or []
        if "error" in event and not choices:
            outcome.error = f"error in stream: {_error_text(event)}"
            return
        outcome.request_id = outcome.request_id or event.get("id")
        usage = event.get("usage")
        completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if isinstance(usage, dict) and isinstance(completion, int):
            outcome.final_tokens = completion
            outcome.prompt_tokens = usage.get("prompt_tokens", outcome.prompt_tokens)
        if not choices:  # the usage-only chunk at the end
            return
        if self.tools:
            self._tool_calls(choices)
        tokens: int | None = None
        if isinstance(completion, int):
            tokens, self._last_usage = completion - self._last_usage, completion
        if tokens > 0 if tokens is not None else _carries_text(choices):
            outcome.chunk_times.append(now)
            outcome.chunk_tokens.append(tokens)
            self.progress.tokens += tokens or 1

    def _tool_calls(self, choices: list[dict[str, Any]]) -> None:
        for choice in choices:
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self.outcome.text.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict) and isinstance(call.get("index"), int):
                    self.outcome.tool_calls.add(call["index"])


async def stream_request(
    session: aiohttp.ClientSession,
    url: str,
    payload: bytes,
    progress: Progress,
    tools: bool = False,
    *,
    trace: TraceParent | None = None,
) -> Outcome:
    """Send one streaming request; never raises: failures end up in `Outcome.error`. `tools`: the
    request offers tools, so its tool calls are counted. `trace`: its W3C trace context."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if trace is not None:
        headers["traceparent"] = trace.header
    outcome = Outcome(sent=perf_counter(), trace=trace)
    stream = _Stream(outcome, progress, tools)
    try:
        async with session.post(url, data=payload, headers=headers) as response:
            if response.status != 200:
                outcome.error = _http_error(response.status, await response.text())
            elif response.content_type != "text/event-stream":
                outcome.error = f"not an event stream: {response.content_type}"
            else:
                protocol = response.connection.protocol if response.connection else None
                async for data in response.content.iter_any():
                    stream.feed(data, getattr(protocol, "arrived", 0.0) or perf_counter())
                stream.feed(b"\n\n", perf_counter())
                if outcome.error is None and not stream.done:
                    outcome.error = "stream ended before [DONE]"
    except TimeoutError:
        outcome.error = "timed out waiting for the server"
    except aiohttp.ClientConnectorError as error:
        outcome.error = f"cannot connect: {connect_reason(error)}"
    except aiohttp.ClientError as error:
        outcome.error = f"{type(error).__name__}: {error}"[:ERROR_TEXT_LIMIT]
    except ValueError as error:  # a data line that is not JSON
        outcome.error = f"malformed stream: {error}"[:ERROR_TEXT_LIMIT]
    outcome.finished = perf_counter()
    return outcome


def to_record(plan: PlannedRequest, outcome: Outcome, run_start: float) -> RequestRecord:
    times = [t - outcome.sent for t in outcome.chunk_times]
    exact = [count for count in outcome.chunk_tokens if count is not None]
    counts: TokenCounts
    if outcome.chunk_tokens and len(exact) == len(outcome.chunk_tokens):
        counts, per_chunk, output = "per_chunk_usage", exact, sum(exact)
    elif outcome.final_tokens is not None:
        counts, per_chunk, output = "final_usage", None, outcome.final_tokens
    else:
        counts, per_chunk, output = "chunks", None, len(times)
    if outcome.error is None and not times:
        outcome.error = "no tokens in the response"
    ok = outcome.error is None
    return RequestRecord(
        index=plan.index,
        group=plan.group,
        request_id=outcome.request_id,
        scheduled_start_s=plan.start_s,
        start_s=outcome.sent - run_start,
        prompt_tokens=outcome.prompt_tokens,
        output_tokens=output,
        ttft_s=times[0] if ok else None,
        e2e_s=(outcome.finished or outcome.sent) - outcome.sent if ok else None,
        decode_tokens_per_s=decode_rate(times, per_chunk, output) if ok else None,
        chunk_times_s=[round(t, 7) for t in times],
        chunk_tokens=per_chunk,
        token_counts=counts,
        error=outcome.error,
        tool_calls=len(outcome.tool_calls) if plan.tools else None,
        tool_markup=TOOL_MARKUP in "".join(outcome.text),
        trace_id=outcome.trace.trace_id if outcome.trace else None,
        trace_sampled=outcome.trace.sampled if outcome.trace else None,
    )
