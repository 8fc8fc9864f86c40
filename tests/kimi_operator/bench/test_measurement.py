"""Against a server with a known timetable, the benchmark measures that timetable."""

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.bench import Cli, bench_argv, results

# The timetable's deadlines are kept from each request's arrival: a busy machine can only make a
# chunk late (a wake-up, loopback HTTP, the client's own turn), never early. What is measured then
# lies between the timetable and the timetable plus the lateness of one or two instants; LATE_S is
# that lateness, a bound a saturated 2-core machine meets (its wake-ups take tens of milliseconds).
# It is absolute, not relative (0.1 s is 40% of the 250 ms TTFT): a TTFT measured from the send
# is still held to within EARLY_S below the timetable, and to 0.1 s above it.
TTFT_S, STEP_S = 0.250, 0.005
LATE_S = 0.1
EARLY_S = 0.001  # the two processes' clocks read apart, and the stub's timer resolution
REQUESTS = 5  # medians over five requests: one unlucky wake-up on a busy machine does not decide


def span_within(measured: float, expected: float) -> bool:
    """A span between two instants: the later one late by up to LATE_S, the earlier one too."""
    return expected - LATE_S <= measured <= expected + LATE_S


def from_send_within(measured: float, expected: float) -> bool:
    """A span from the client's send (on time) to a later instant: never short of the timetable."""
    return expected - EARLY_S <= measured <= expected + LATE_S


@pytest.mark.parametrize(("tokens_per_chunk", "api"), [(1, "completions"), (3, "chat")])
def test_ttft_and_decode_rate_match_the_schedule(
    cli: Cli, timed_stub: Callable[..., str], tmp_path: Path, tokens_per_chunk: int, api: str
) -> None:
    url = timed_stub(ttft_s=TTFT_S, step_s=STEP_S, tokens_per_chunk=tokens_per_chunk)
    output_tokens = 150 * tokens_per_chunk
    run = cli(
        "bench",
        "--endpoint",
        url,
        "--api",
        api,
        "--requests",
        str(REQUESTS),
        "--output-tokens",
        str(output_tokens),
        "--output",
        str(tmp_path),
        "--no-progress",
    )
    assert run.code == 0, run.err
    summary = results(tmp_path)["summary"]
    assert summary["requests_ok"] == REQUESTS
    assert summary["requests_failed"] == 0
    assert summary["output_tokens_total"] == REQUESTS * output_tokens
    assert from_send_within(summary["ttft_s"]["p50"], TTFT_S), summary["ttft_s"]
    chunks = output_tokens // tokens_per_chunk
    decode_s = (chunks - 1) * STEP_S  # from the first chunk to the last
    rate = summary["decode_tokens_per_s"]["p50"]
    assert span_within((output_tokens - tokens_per_chunk) / rate, decode_s), summary
    # Means, not medians: the stub's own wake-ups jitter around its deadlines (which it keeps),
    # so the mean gap is the decode span over the gaps.
    gaps = chunks - 1
    assert span_within(summary["itl_chunk_s"]["mean"] * gaps, decode_s), summary["itl_chunk_s"]
    itl_tokens = output_tokens - tokens_per_chunk
    assert span_within(summary["itl_s"]["mean"] * itl_tokens, decode_s), summary["itl_s"]
    assert summary["tokens_per_chunk"] == pytest.approx(tokens_per_chunk)
    assert from_send_within(summary["e2e_s"]["p50"], TTFT_S + decode_s)
    metrics = summary["server_metrics"]
    assert metrics["spec_decode_acceptance_length"] == pytest.approx(tokens_per_chunk)
    assert 0.9 < metrics["fast_path_fraction"] < 1
    assert summary["warnings"] == []


def test_tokens_per_chunk_come_from_usage_not_chunk_counts(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.01, step_s=0.002, tokens_per_chunk=4)
    run = cli(*bench_argv(url, tmp_path, requests=2, output_tokens=22))
    assert run.code == 0, run.err
    record = results(tmp_path)["requests"][0]
    assert record["token_counts"] == "per_chunk_usage"
    assert record["chunk_tokens"] == [4, 4, 4, 4, 4, 2]
    assert record["output_tokens"] == 22


def test_usage_only_at_the_end_spreads_tokens_and_says_so(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.01, step_s=0.004, tokens_per_chunk=2, continuous_usage=False)
    run = cli(*bench_argv(url, tmp_path, requests=2, output_tokens=40))
    assert run.code == 0, run.err
    data = results(tmp_path)
    record = data["requests"][0]
    assert record["token_counts"] == "final_usage"
    assert record["chunk_tokens"] is None
    assert record["output_tokens"] == 40
    assert data["summary"]["tokens_per_chunk"] == pytest.approx(2)
    # 2 tokens every 4 ms, the first chunk's share taken as the average: 500 tok/s (the thread
    # stub's wake-ups jitter, so 10% here; the 3% check runs against the process stub above).
    assert data["summary"]["decode_tokens_per_s"]["p50"] == pytest.approx(500, rel=0.1)
    assert any("only at the end" in w for w in data["summary"]["warnings"])


def test_no_usage_counts_chunks_and_warns(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.01, step_s=0.002, tokens_per_chunk=2, usage=False)
    run = cli(*bench_argv(url, tmp_path, requests=1, output_tokens=20))
    assert run.code == 0, run.err
    data = results(tmp_path)
    assert data["requests"][0]["token_counts"] == "chunks"
    assert data["requests"][0]["output_tokens"] == 10  # 10 chunks of 2: an undercount, flagged
    assert any("no usage" in w for w in data["summary"]["warnings"])
    assert "warning: the server reported no usage" in run.out


def test_errors_are_counted_and_the_run_completes(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.01, step_s=0.001, fail_every=3, break_every=4)
    run = cli(*bench_argv(url, tmp_path, "--concurrency", "3", requests=12, output_tokens=10))
    assert run.code == 0, run.err
    data = results(tmp_path)
    summary = data["summary"]
    # Requests 3, 6, 9, 12 fail with HTTP 500; 4 and 8 break mid-stream.
    assert summary["requests_failed"] == 6
    assert summary["requests_ok"] == 6
    assert summary["errors"] == {
        "HTTP 500: injected failure": 4,
        "error in stream: injected stream error": 2,
    }
    failed = [r for r in data["requests"] if r["error"]]
    assert all(r["ttft_s"] is None and r["decode_tokens_per_s"] is None for r in failed)
    assert summary["output_tokens_total"] == 60
    assert "## Errors" in (tmp_path / "report.md").read_text()


def test_every_request_failing_exits_1_with_one_line(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(fail_every=1)
    run = cli(*bench_argv(url, tmp_path, requests=2, output_tokens=5))
    assert run.code == 1
    assert run.err.strip() == "error: all 2 requests failed: HTTP 500: injected failure"
    assert results(tmp_path)["summary"]["requests_ok"] == 0


def test_requests_ask_for_streamed_usage_and_forced_lengths(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, app = stub(ttft_s=0.001, step_s=0.001)
    run = cli(
        "bench",
        "--endpoint",
        url,
        "--profile",
        "long-context",
        "--prompt-tokens",
        "500",
        "--requests",
        "2",
        "--output-tokens",
        "3",
        "--output",
        str(tmp_path),
    )
    assert run.code == 0, run.err
    bodies = app.state.bodies  # type: ignore[attr-defined]
    assert len(bodies) == 3  # one warm-up
    measured = bodies[1:]
    assert all(b["stream"] and b["ignore_eos"] and b["max_tokens"] == 3 for b in measured)
    assert all(
        b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
        for b in measured
    )
    assert all(len(b["prompt"].split()) == 500 for b in measured)
    # Different requests differ from their first words: no prefix cache hit between them.
    assert measured[0]["prompt"].split()[:8] != measured[1]["prompt"].split()[:8]
    config = results(tmp_path)["config"]
    assert config["profile"] == "long-context"
    assert config["prompt_tokens"] == 500
    assert config["server"] == {
        "version": "0.33.0",
        "decode_backend": "latency_specialized",
        "metrics_url": url.removesuffix("/v1") + "/metrics",
    }


def test_same_seed_same_prompts_across_runs(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, app = stub(ttft_s=0.001, step_s=0.001)
    for run_dir in ("a", "b"):
        run = cli(
            "bench",
            "--endpoint",
            url,
            "--prompt-tokens",
            "50",
            "--requests",
            "2",
            "--output-tokens",
            "2",
            "--warmup",
            "0",
            "--output",
            str(tmp_path / run_dir),
        )
        assert run.code == 0, run.err
    prompts = [b["prompt"] for b in app.state.bodies]  # type: ignore[attr-defined]
    assert prompts[:2] == prompts[2:]


def test_no_ignore_eos_is_passed_through_and_short_outputs_are_flagged(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, app = stub(ttft_s=0.001, step_s=0.001, usage=False)
    run = cli(*bench_argv(url, tmp_path, "--no-ignore-eos", requests=1, output_tokens=4))
    assert run.code == 0, run.err
    assert "ignore_eos" not in app.state.bodies[0]  # type: ignore[attr-defined]
    assert results(tmp_path)["config"]["ignore_eos"] is False


def test_metrics_unreachable_is_a_warning_not_a_failure(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.001, step_s=0.001)
    run = cli(
        *bench_argv(
            url,
            tmp_path,
            "--metrics-url",
            url.removesuffix("/v1") + "/nothing-here",
            requests=1,
            output_tokens=3,
        )
    )
    assert run.code == 0, run.err
    summary = results(tmp_path)["summary"]
    assert summary["server_metrics"] == {
        "reachable": False,
        "served": None,
        "spec_decode_acceptance_length": None,
        "spec_decode_acceptance_rate": None,
        "fast_path_fraction": None,
        "fallback_reasons": {},
        "decode_tokens_per_s": None,
        "decode_rate_metric": None,
        "inter_token_latency_s": None,
        "prefix_cache_hit_rate": None,
        "prefix_cache_groups": [],
        "external_prompt_fraction": None,
        "kv_transfer_time_s": None,
        "kv_transfer_failures": None,
        "offload_hit_rate": None,
        "offload_hit_tokens": None,
        "offload_loaded_bytes": None,
        "offload_stored_bytes": None,
    }
    assert any("no /metrics" in w for w in summary["warnings"])


def test_cost_from_gpus_and_price(
    cli: Cli, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.001, step_s=0.002)
    run = cli(
        "bench",
        "--endpoint",
        url,
        "--requests",
        "2",
        "--output-tokens",
        "20",
        "--gpus",
        "16",
        "--gpu-hour-price",
        "4.5",
        "--output",
        str(tmp_path),
    )
    assert run.code == 0, run.err
    summary = results(tmp_path)["summary"]
    run_cost = 16 * 4.5 * summary["duration_s"] / 3600
    assert summary["cost_per_million_output_tokens_usd"] == pytest.approx(run_cost / 40 * 1e6)
    assert summary["cost_per_request_usd"] == pytest.approx(run_cost / 2)
