"""A scheduled OpenAI-compatible streaming server, for the tests and the client benchmark.

It answers `/v1/completions` and `/v1/chat/completions` on a fixed timetable: the first chunk
`ttft_s` after the request arrives, then one chunk every `step_s`, each carrying
`tokens_per_chunk` tokens (as vLLM does with speculative decoding), with deadlines taken from the
request's arrival so that lateness does not accumulate. It reports usage as vLLM does
(`stream_options.include_usage` / `continuous_usage_stats`), serves `/v1/models`, `/version` and
a `/metrics` page with vLLM's spec-decode counters and inter-token latency, the kimi_kernels
decode-path counters and per-request decode rate (all as its timetable says), vLLM's prefix-cache
counters (a prompt's whole blocks of PREFIX_BLOCK words whose prefix an earlier prompt had; with
`gpu_blocks` the cache holds that many, least recently used out first, and with `cpu_blocks` a CPU
tier as vLLM's offloading connector keeps one: every block stored there too, and the blocks after
the GPU cache's hits looked up in it, counted as vLLM's external prefix-cache counters), and
can fail every Nth request (HTTP 500) or break every Nth stream. With `burst` N it holds chunks
back and writes N at a time, as a proxy that buffers SSE (or a client too busy to read) delivers
them: the timetable still says when each chunk was ready. A chat request that offers `tools`
(and a `tool_choice` other than "none") gets its last chunk as one call of its first tool, with no
arguments: a structured `tool_calls` delta as vLLM streams it with `--tool-call-parser kimi_k3`, or
with `tool_parser` off Kimi K3's raw tool-call markup as text, as vLLM sends it without the parser.
It only listens on 127.0.0.1.
"""

import asyncio
import hashlib
import json
import multiprocessing
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from aiohttp import web

HOST = "127.0.0.1"
PREFIX_BLOCK = 16  # words per prefix-cache block (vLLM's default block of 16 tokens)
STUB_BYTES_PER_TOKEN = 1024  # what the stub says a token of KV takes, moving to or from CPU


@dataclass(frozen=True)
class Schedule:
    ttft_s: float = 0.15
    step_s: float = 0.005
    ttft_script: tuple[float, ...] = ()  # TTFT of the 1st, 2nd, ... request to arrive; then ttft_s
    tokens_per_chunk: int = 1
    fail_every: int = 0  # every Nth request gets HTTP 500 (0: never)
    break_every: int = 0  # every Nth stream sends an error event halfway (0: never)
    continuous_usage: bool = True  # honour stream_options.continuous_usage_stats
    usage: bool = True  # honour stream_options.include_usage
    model: str = "moonshotai/Kimi-K3"
    version: str = "0.33.0"
    decode_backend: str = "latency_specialized"
    record_sends: bool = False  # keep every chunk's send time, served at /stub/sends
    burst: int = 1  # write chunks N at a time (1: each as soon as it is due)
    tool_parser: bool = True  # tool calls as structured deltas; False: as K3 markup in the text
    # The settings it reports (kimi_scheduler_config_info, vllm:cache_config_info).
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 4096
    prefix_caching: bool = True
    max_model_len: int = 131072  # on its model card (/v1/models) too
    gpu_blocks: int = 0  # blocks the GPU prefix cache holds (0: every block)
    cpu_blocks: int = 0  # blocks of the CPU tier (0: no tier)


class _Tier:
    """Blocks by their prefix's hash, least recently used first; `capacity` 0: unbounded."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.blocks: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self.blocks

    def put(self, key: str) -> None:
        self.blocks[key] = None
        self.blocks.move_to_end(key)
        while self.capacity and len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)


@dataclass
class _State:
    requests: int = 0
    chunks: int = 0
    tokens: int = 0
    finished: int = 0  # streams sent to the end
    gaps: int = 0  # chunk gaps of those streams
    bodies: list[dict[str, Any]] = field(default_factory=list)
    sends: dict[str, list[float]] = field(default_factory=dict)
    traceparents: dict[str, str | None] = field(default_factory=dict)  # request id -> its header
    prefix_queries: int = 0  # prompt words looked up in the prefix cache
    prefix_hits: int = 0  # of those, found there
    external_queries: int = 0  # words looked up in the CPU tier (after the GPU cache's hits)
    external_hits: int = 0  # of those, found there
    stored_blocks: int = 0  # blocks written to the CPU tier
    gpu: _Tier = field(default_factory=lambda: _Tier(0))
    cpu: _Tier | None = None

    def look_up(self, words: list[str]) -> None:
        """The prompt through the prefix cache: its leading blocks already cached are hits, as
        in vLLM (by the hash of the whole prefix up to each block); with a CPU tier, the blocks
        after those are looked up there. Then all of it is cached, in both."""
        self.prefix_queries += len(words)
        digest, gpu_hit, cpu_hit = hashlib.sha256(), True, True
        whole = len(words) - len(words) % PREFIX_BLOCK
        for start in range(0, whole, PREFIX_BLOCK):
            digest.update(" ".join(words[start : start + PREFIX_BLOCK]).encode() + b"\0")
            key = digest.hexdigest()
            gpu_hit = gpu_hit and key in self.gpu
            self.prefix_hits += PREFIX_BLOCK if gpu_hit else 0
            if self.cpu is not None and not gpu_hit:
                cpu_hit = cpu_hit and key in self.cpu
                self.external_queries += PREFIX_BLOCK
                self.external_hits += PREFIX_BLOCK if cpu_hit else 0
            self.gpu.put(key)
            if self.cpu is not None:
                self.cpu.put(key)
                self.stored_blocks += 1
        if self.cpu is not None:
            self.external_queries += len(words) - whole


def _sse(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


def _chunk(
    request_id: str,
    chat: bool,
    count: int,
    usage: dict[str, int] | None,
    delta: dict[str, Any] | None = None,
) -> bytes:
    """One SSE chunk of `count` tokens, as vLLM streams completions or chat; `delta`: what a chat
    chunk carries instead of text."""
    text = " tok" * count
    choice: dict[str, Any] = (
        {"index": 0, "delta": delta or {"content": text}} if chat else {"index": 0, "text": text}
    )
    event: dict[str, Any] = {"id": request_id, "choices": [choice]}
    if usage is not None:
        event["usage"] = usage
    return _sse(event)


def _tool_call(body: dict[str, Any], request_id: str, parsed: bool) -> dict[str, Any] | None:
    """The last chunk's delta for a chat request that offers tools: one call of its first tool."""
    tools = body.get("tools") or []
    if not tools or body.get("tool_choice", "auto") == "none":
        return None
    name = tools[0]["function"]["name"]
    if not parsed:
        markup = f'<|open|>call tool="{name}" index="1"<|sep|><|close|>call<|sep|>'
        return {"content": f"<|open|>tools<|sep|>{markup}<|close|>tools<|sep|>"}
    call = {"name": name, "arguments": "{}"}
    return {
        "tool_calls": [
            {"index": 0, "id": f"call-{request_id}", "type": "function", "function": call}
        ]
    }


class StubApp:
    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.state = _State(
            gpu=_Tier(schedule.gpu_blocks),
            cpu=_Tier(schedule.cpu_blocks) if schedule.cpu_blocks else None,
        )
        self.app = web.Application()
        self.app.router.add_post("/v1/completions", self._completions)
        self.app.router.add_post("/v1/chat/completions", self._completions)
        self.app.router.add_get("/v1/models", self._models)
        self.app.router.add_get("/version", self._version)
        self.app.router.add_get("/metrics", self._metrics)
        self.app.router.add_get("/stub/sends", self._sends)

    async def _models(self, _: web.Request) -> web.Response:
        card = {"id": self.schedule.model, "max_model_len": self.schedule.max_model_len}
        return web.json_response({"object": "list", "data": [card]})

    async def _version(self, _: web.Request) -> web.Response:
        return web.json_response({"version": self.schedule.version})

    async def _sends(self, _: web.Request) -> web.Response:
        return web.json_response(self.state.sends)

    async def _metrics(self, _: web.Request) -> web.Response:
        s, state = self.schedule, self.state
        labels = f'model_name="{s.model}",engine="0"'
        accepted = state.tokens - state.chunks
        rate = s.tokens_per_chunk / s.step_s
        text = (
            f"vllm:spec_decode_num_drafts_total{{{labels}}} {state.chunks}\n"
            f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} "
            f"{state.chunks * (s.tokens_per_chunk - 1)}\n"
            f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}\n"
            f'kimi_decode_steps_total{{{labels},path="specialized",reason=""}} {state.chunks}\n'
            f'kimi_decode_steps_total{{{labels},path="fallback",reason="prefill"}} '
            f"{state.requests}\n"
            f'kimi_build_info{{vllm_version="{s.version}",decode_backend="{s.decode_backend}"}} 1\n'
            f"kimi_request_decode_tokens_per_second_sum{{{labels}}} {state.finished * rate}\n"
            f"kimi_request_decode_tokens_per_second_count{{{labels}}} {state.finished}\n"
            f"vllm:inter_token_latency_seconds_sum{{{labels}}} {state.gaps * s.step_s}\n"
            f"vllm:inter_token_latency_seconds_count{{{labels}}} {state.gaps}\n"
            f"vllm:prefix_cache_queries_total{{{labels}}} {state.prefix_queries}\n"
            f"vllm:prefix_cache_hits_total{{{labels}}} {state.prefix_hits}\n"
            f'kimi_scheduler_config_info{{model_name="{s.model}",max_num_seqs="{s.max_num_seqs}",'
            f'max_num_batched_tokens="{s.max_num_batched_tokens}",enable_chunked_prefill="True",'
            f'max_model_len="{s.max_model_len}"}} 1\n'
            f'vllm:cache_config_info{{engine="0",block_size="64",'
            f'enable_prefix_caching="{s.prefix_caching}"}} 1\n'
        )
        if state.cpu is not None:
            text += (
                f"vllm:external_prefix_cache_queries_total{{{labels}}} {state.external_queries}\n"
                f"vllm:external_prefix_cache_hits_total{{{labels}}} {state.external_hits}\n"
                f"vllm:kv_offload_load_bytes_total{{{labels}}} "
                f"{state.external_hits * STUB_BYTES_PER_TOKEN}\n"
                f"vllm:kv_offload_store_bytes_total{{{labels}}} "
                f"{state.stored_blocks * PREFIX_BLOCK * STUB_BYTES_PER_TOKEN}\n"
            )
        return web.Response(text=text, content_type="text/plain")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        arrived = asyncio.get_running_loop().time()
        s, state = self.schedule, self.state
        state.requests += 1
        number = state.requests
        body = await request.json()
        state.bodies.append(body)
        if s.fail_every and number % s.fail_every == 0:
            return web.json_response({"error": {"message": "injected failure"}}, status=500)
        chat = request.path.endswith("/chat/completions")
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        prompt_tokens = len(prompt.split())
        if prompt_tokens + int(body["max_tokens"]) > s.max_model_len:  # as vLLM refuses it
            message = (
                f"This model's maximum context length is {s.max_model_len} tokens. However, you "
                f"requested {prompt_tokens + int(body['max_tokens'])} tokens."
            )
            return web.json_response({"error": {"message": message}}, status=400)
        state.look_up(prompt.split())
        options = body.get("stream_options") or {}
        usage = s.usage and bool(options.get("include_usage"))
        continuous = usage and s.continuous_usage and bool(options.get("continuous_usage_stats"))
        state.traceparents[request_id := f"cmpl-{number}"] = request.headers.get("traceparent")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        sends = state.sends.setdefault(request_id, []) if s.record_sends else None
        total, sent, step = int(body["max_tokens"]), 0, 0
        loop = asyncio.get_running_loop()
        held: list[bytes] = []
        ttft = s.ttft_script[number - 1] if number <= len(s.ttft_script) else s.ttft_s
        tool_call = _tool_call(body, request_id, s.tool_parser) if chat else None
        while sent < total:
            delay = arrived + ttft + step * s.step_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if s.break_every and number % s.break_every == 0 and sent >= total // 2:
                await response.write(_sse({"error": {"message": "injected stream error"}}))
                return response
            count = min(s.tokens_per_chunk, total - sent)
            sent += count
            step += 1
            state.chunks += 1
            state.tokens += count
            so_far = {"prompt_tokens": prompt_tokens, "completion_tokens": sent}
            delta = tool_call if sent >= total else None
            held.append(_chunk(request_id, chat, count, so_far if continuous else None, delta))
            if len(held) >= s.burst or sent >= total:
                await response.write(b"".join(held))
                held.clear()
            if sends is not None:
                sends.append(perf_counter())
        state.finished += 1
        state.gaps += step - 1
        if usage:
            final = {"prompt_tokens": prompt_tokens, "completion_tokens": sent}
            await response.write(_sse({"id": request_id, "choices": [], "usage": final}))
        await response.write(b"data: [DONE]\n\n")
        return response


async def _listen(app: web.Application, port: int = 0) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, HOST, port).start()
    bound: int = runner.addresses[0][1]
    return runner, bound


@contextmanager
def serve_app_in_thread(app: web.Application) -> Iterator[str]:
    """Run any aiohttp app on 127.0.0.1 on its own event loop in a thread; yields its root URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner, port = asyncio.run_coroutine_threadsafe(_listen(app), loop).result(10)
    try:
        yield f"http://{HOST}:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@contextmanager
def serve_in_thread(schedule: Schedule) -> Iterator[tuple[str, StubApp]]:
    """The stub in this process (its state can be inspected); yields (URL ending in /v1, app)."""
    stub = StubApp(schedule)
    with serve_app_in_thread(stub.app) as root:
        yield f"{root}/v1", stub


def _serve_forever(schedule: Schedule, ports: Any) -> None:
    async def main() -> None:
        _, port = await _listen(StubApp(schedule).app)
        ports.put(port)
        await asyncio.Event().wait()

    asyncio.run(main())


@contextmanager
def serve_in_process(schedule: Schedule) -> Iterator[str]:
    """Run the stub in its own process, so that its timing does not share a GIL with the client.

    Yields the base URL (ending in /v1).
    """
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    process = context.Process(target=_serve_forever, args=(schedule, ports), daemon=True)
    process.start()
    try:
        port = ports.get(timeout=60)
        yield f"http://{HOST}:{port}/v1"
    finally:
        process.terminate()
        process.join(10)
