"""SSE as servers really send it: split across reads, CRLF, comments, role chunks, reasoning."""

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from kimi_operator.bench.stub import serve_app_in_thread
from tests.support.bench import Cli, bench_argv, results

PAUSE_S = 0.02


def event(choices: list[dict[str, Any]], completion: int | None = None) -> bytes:
    body: dict[str, Any] = {"id": "chatcmpl-1", "choices": choices}
    if completion is not None:
        body["usage"] = {"prompt_tokens": 7, "completion_tokens": completion}
    return b"data: " + json.dumps(body).encode()


class Scripted:
    """Answers every completion with the given byte pieces, pausing between them."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.content_type = "text/event-stream"
        self.hold_s = 0.0  # keep the stream open this long after the last piece
        self.app = web.Application()
        self.app.router.add_get("/v1/models", self._models)
        self.app.router.add_post("/v1/completions", self._stream)
        self.app.router.add_post("/v1/chat/completions", self._stream)

    async def _models(self, _: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": self.content_type})
        await response.prepare(request)
        for piece in self.pieces:
            await response.write(piece)
            await asyncio.sleep(PAUSE_S)
        await asyncio.sleep(self.hold_s)
        return response


@pytest.fixture
def scripted() -> Iterator[tuple[Scripted, str]]:
    server = Scripted()
    with serve_app_in_thread(server.app) as root:
        yield server, root + "/v1"


def bench(cli: Cli, url: str, tmp_path: Path, *extra: str) -> dict[str, Any]:
    run = cli(*bench_argv(url, tmp_path, "--no-progress", *extra, requests=1, output_tokens=5))
    assert run.code in {0, 1}, run.err
    record: dict[str, Any] = results(tmp_path)["requests"][0]
    return record


def test_events_split_across_reads_with_crlf_and_comments(
    cli: Cli, scripted: tuple[Scripted, str], tmp_path: Path
) -> None:
    server, url = scripted
    role = event([{"index": 0, "delta": {"role": "assistant", "content": ""}}], 0)
    think = event([{"index": 0, "delta": {"reasoning_content": "hmm hmm"}}], 2)
    answer = event([{"index": 0, "delta": {"content": " yes yes yes"}}], 5)
    final = event([], 5)
    server.pieces = [
        b": keep-alive comment\r\n\r\n",
        role + b"\r\n\r\n",
        think[:20],  # one event in two reads
        think[20:] + b"\r\n\r\n" + answer[:5],
        answer[5:] + b"\n\n" + final + b"\n\ndata: [DONE]\n\n",
    ]
    record = bench(cli, url, tmp_path, "--api", "chat")
    assert record["error"] is None
    assert record["chunk_tokens"] == [2, 3]  # the role chunk carries no token
    assert record["token_counts"] == "per_chunk_usage"
    assert record["prompt_tokens"] == 7
    assert record["request_id"] == "chatcmpl-1"
    gap = record["chunk_times_s"][1] - record["chunk_times_s"][0]
    assert gap >= PAUSE_S * 0.9  # stamped when the event completed, not when it began
    assert record["decode_tokens_per_s"] == pytest.approx(3 / gap, rel=1e-4)  # times kept to 0.1 µs


def test_multi_line_data_is_one_event(
    cli: Cli, scripted: tuple[Scripted, str], tmp_path: Path
) -> None:
    server, url = scripted
    server.pieces = [
        b'data: {"id": "x",\ndata: "choices": [{"index": 0, "text": "a b"}]}\n\n',
        b'data: {"id": "x", "choices": [{"index": 0, "text": " c"}]}\n\ndata: [DONE]\n\n',
    ]
    record = bench(cli, url, tmp_path)
    assert record["error"] is None
    assert record["token_counts"] == "chunks"
    assert record["output_tokens"] == 2


@pytest.mark.parametrize(
    ("pieces", "error"),
    [
        ([b"data: {broken\n\n"], "malformed stream: Expecting property name"),
        ([b"data: [1]\n\n"], "malformed stream: an event is not a JSON object"),
        ([b'data: {"choices": [{"index": 0, "text": "a"}]}\n\n'], "stream ended before [DONE]"),
        ([b"data: [DONE]\n\n"], "no tokens in the response"),
        ([b'data: {"error": {"message": "out of memory"}}\n\n'], "error in stream: out of memory"),
    ],
)
def test_broken_streams_are_failed_requests(
    cli: Cli, scripted: tuple[Scripted, str], tmp_path: Path, pieces: list[bytes], error: str
) -> None:
    server, url = scripted
    server.pieces = pieces
    record = bench(cli, url, tmp_path)
    assert record["error"].startswith(error)
    assert record["ttft_s"] is None


def test_an_answer_that_is_not_a_stream(
    cli: Cli, scripted: tuple[Scripted, str], tmp_path: Path
) -> None:
    server, url = scripted
    server.content_type = "application/json"
    server.pieces = [b'{"choices": [{"text": "all at once"}]}']
    record = bench(cli, url, tmp_path)
    assert record["error"] == "not an event stream: application/json"


def test_prompt_and_output_lengths_off_target_are_warned_about(
    cli: Cli, scripted: tuple[Scripted, str], tmp_path: Path
) -> None:
    server, url = scripted
    answer = event([{"index": 0, "text": " a b c d e"}], 5)  # usage: 7 prompt tokens, 5 out
    server.pieces = [answer + b"\n\ndata: [DONE]\n\n"]
    run = cli(*bench_argv(url, tmp_path, "--prompt-tokens", "100", requests=1, output_tokens=10))
    assert run.code == 0, run.err
    warnings = results(tmp_path)["summary"]["warnings"]
    assert "prompts came out at 0.07x the asked-for length in tokens " in warnings[0]
    assert warnings[1] == (
        "1 request(s) stopped before their output length: the server may not honour ignore_eos"
    )


def test_a_silent_server_times_out(
    cli: Cli, scripted: tuple[Scripted, str], tmp_path: Path
) -> None:
    server, url = scripted
    server.pieces = [b": waiting\n\n"]  # then nothing, the connection held open for a while
    server.hold_s = 2.0
    record = bench(cli, url, tmp_path, "--timeout", "0.3")
    assert record["error"] == "timed out waiting for the server"
