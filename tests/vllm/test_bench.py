"""`kimi-operator bench --endpoint` against the real server: its decode rate agrees with the
server's own, it records the server's version and backend, and a proxy that buffers the stream
(as some ingresses do) is caught rather than measured."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kimi_operator.bench.stub import serve_app_in_thread
from kimi_operator.cli import main
from kimi_operator.dev.cpu_vllm import journey
from tests.vllm.conftest import Served, client_apart

AGREEMENT = 0.10


def bench(served: Served, output: Path, *extra: str, endpoint: str | None = None) -> Any:
    argv = [
        "bench", "--endpoint", endpoint or f"{served.root}/v1", "--metrics-url",
        f"{served.root}/metrics", "--output-tokens", "64", "--prompt-tokens", "16",
        "--output", str(output), "--no-progress", *extra,
    ]  # fmt: skip
    with client_apart(served.server):
        assert main(argv) == 0
    return json.loads((output / "results.json").read_text())


@pytest.mark.parametrize(
    ("api", "concurrency", "requests"),
    [("completions", 1, 4), ("chat", 1, 4), ("completions", 8, 16), ("chat", 8, 16)],
)
def test_bench_agrees_with_the_server(
    served: Served, tmp_path: Path, api: str, concurrency: int, requests: int
) -> None:
    out = bench(
        served, tmp_path, "--api", api, "--concurrency", str(concurrency),
        "--requests", str(requests),
    )  # fmt: skip
    summary, server = out["summary"], out["config"]["server"]
    assert server["version"] == "0.32.0"
    assert server["decode_backend"] == "auto"
    assert summary["requests_ok"] == requests
    assert summary["output_tokens_total"] == requests * 64
    metrics = summary["server_metrics"]
    assert metrics["decode_rate_metric"] == "kimi_request_decode_tokens_per_second"
    assert summary["decode_tokens_per_s"] is not None, summary["warnings"]
    client = summary["decode_tokens_per_s"]["mean"]
    assert client == pytest.approx(metrics["decode_tokens_per_s"], rel=AGREEMENT)
    # On a busy shared machine a stream can stall and then arrive in one read (seen here: 1.35 s,
    # then 50 chunks together), or the server's frontend can fall behind and merge a stream's
    # tokens into a few chunks (seen in CI: about 7 of 16 requests got their first token 6 ms
    # before their last): such requests are marked, warned about and left out; most are timed.
    bursts = sum(r["burst"] for r in out["requests"])
    assert bursts <= requests // 2
    warned = any(w.startswith("TIMING UNRELIABLE") for w in summary["warnings"])
    assert warned == (bursts > 0)


@pytest.fixture
def buffering_proxy(served: Served) -> Iterator[str]:
    """Forwards to the server, and holds each response until it is complete."""

    async def forward(request: web.Request) -> web.Response:
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method,
                f"{served.root}{request.path_qs}",
                data=await request.read(),
                headers={"Content-Type": request.headers.get("Content-Type", "")},
            ) as upstream,
        ):
            body = await upstream.read()
            return web.Response(
                body=body, status=upstream.status, content_type=upstream.content_type
            )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    with serve_app_in_thread(app) as root:
        yield f"{root}/v1"


def test_a_buffering_proxy_is_caught(served: Served, tmp_path: Path, buffering_proxy: str) -> None:
    out = bench(served, tmp_path, "--requests", "3", endpoint=buffering_proxy)
    summary = out["summary"]
    assert summary["requests_ok"] == 3
    assert all(r["burst"] for r in out["requests"])
    assert summary["decode_tokens_per_s"] is None
    assert summary["warnings"][0].startswith("TIMING UNRELIABLE: 3 of 3 requests")
    assert summary["server_metrics"]["decode_tokens_per_s"] > 0  # the server's own, beside


def test_the_demo_journey(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    """The end of `make demo`: bench the endpoint, then read the decode-rate metrics."""
    assert journey(served.server) == 0
    out = capsys.readouterr().out
    assert "decode tok/s per request, excl. prefill" in out
    assert 'kimi_build_info{cutlass_dsl_version="none",decode_backend="auto"' in out
    assert "kimi_request_decode_tokens_per_second_count" in out
    assert "kimi_decode_path_instrumented 0.0" in out
