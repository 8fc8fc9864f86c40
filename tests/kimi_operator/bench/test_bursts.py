"""Streams whose chunks arrive together (a buffering proxy, a client too busy to read) are marked,
left out of the timing figures, and warned about; the server's own decode rate stands beside."""

from collections.abc import Callable
from pathlib import Path

import pytest

from kimi_operator.bench.results import Distribution, ServerMetrics
from kimi_operator.bench.stats import mark_bursts, timing_warnings, together
from tests.support.bench import Cli, bench_argv, record, results

STEP_S = 0.01
RATE = 1 / STEP_S  # the stub's timetable, as its /metrics reports it


def rate(mean: float) -> Distribution:
    return Distribution(p50=mean, p90=mean, p99=mean, mean=mean)


def test_same_read_or_far_inside_the_servers_itl_counts_as_together() -> None:
    times = [0.1, 0.1, 0.1, 0.2, 0.205, 0.3]
    assert together(times, None) == 2  # without the server's ITL: the same stamps only
    assert together(times, 0.1) == 3  # and a 5 ms gap against a 100 ms ITL
    assert together(times, 0.04) == 2  # 5 ms is not within 10% of 40 ms


def test_most_chunks_together_or_a_span_too_short_marks_the_request() -> None:
    steady = record([0.1, 0.2, 0.3, 0.4, 0.5])
    lagging = record([0.1, 0.2, 0.2, 0.3, 0.3, 0.4, 0.5])  # a busy client merged 2 of 6 reads
    buffered = record([0.1, 0.1, 0.1, 0.1, 0.5, 0.5, 0.5, 0.5])  # 4 at a time: 6 of 7 gaps
    whole = record([0.9, 0.9, 0.9])
    failed = record([0.1, 0.1], error="HTTP 500")
    marked = mark_bursts([steady, lagging, buffered, whole, failed], None)
    assert [r.burst for r in marked] == [False, False, True, True, False]
    # 4 gaps in 0.4 s where the server says each took 0.1 s: fine; each took 0.25 s: too short.
    assert not mark_bursts([steady], 0.1)[0].burst
    assert mark_bursts([steady], 0.25)[0].burst


def test_tokens_merged_by_the_server_frontend_mark_the_request() -> None:
    """A stream whose sender fell behind (vLLM's frontend merges what it has not sent): as CI saw
    it on a 2-CPU machine (first token 477 ms into a 484 ms request, against the server's 148 tok/s
    per request, 6.8 ms a step), here as 2 chunks 6 ms apart carrying 30 and 34 tokens. Neither
    its chunk count nor its gaps give it away; its tokens' rate, 38 times the server's, does."""
    merged = record([0.477, 0.483]).model_copy(
        update={"output_tokens": 64, "chunk_tokens": [30, 34], "decode_tokens_per_s": 34 / 0.006}
    )
    steady = record([0.03 + 0.0068 * step for step in range(64)]).model_copy(
        update={"decode_tokens_per_s": 1 / 0.0068}
    )
    quick = steady.model_copy(update={"decode_tokens_per_s": 1.9 * 148.0})  # within 2x: timed
    assert [r.burst for r in mark_bursts([merged, steady, quick], 0.0068, 148.0)] == [
        True,
        False,
        False,
    ]
    assert not mark_bursts([merged], 0.0068)[0].burst  # without the server's rate: not seen


def test_warnings_name_the_bursts_and_a_disagreeing_server() -> None:
    records = mark_bursts([record([0.1, 0.1, 0.1]), record([0.1, 0.2, 0.3])], 0.1)
    server = ServerMetrics(
        reachable=True,
        decode_tokens_per_s=100.0,
        decode_rate_metric="kimi_request_decode_tokens_per_second",
        inter_token_latency_s=0.1,
    )
    notes = timing_warnings(records, server, rate(85.0))
    assert notes[0].startswith("TIMING UNRELIABLE: 1 of 2 requests received their tokens in bursts")
    assert "the server's own 100.0 ms inter-token latency" in notes[0]
    assert "0.85x, more than 10% apart" in notes[1]
    assert "kimi_request_decode_tokens_per_second" in notes[1]
    assert timing_warnings(mark_bursts(records[1:], None), server, rate(109.0)) == []


@pytest.mark.parametrize("burst", [5, 10_000])
def test_bursty_streams_are_left_out_of_the_timing(
    cli: Cli, timed_stub: Callable[..., str], tmp_path: Path, burst: int
) -> None:
    """Chunks written five at a time, or the whole stream at once (TTFT = E2E)."""
    url = timed_stub(ttft_s=0.05, step_s=STEP_S, burst=burst)
    run = cli(*bench_argv(url, tmp_path, "--no-progress", requests=4, output_tokens=60))
    assert run.code == 0, run.err
    out = results(tmp_path)
    summary = out["summary"]
    assert summary["requests_ok"] == 4
    assert all(r["burst"] for r in out["requests"])
    assert summary["decode_tokens_per_s"] is None
    assert summary["ttft_s"] is None
    assert summary["itl_s"] is None
    assert summary["e2e_s"] is not None  # still true of a buffered stream
    assert summary["warnings"][0].startswith("TIMING UNRELIABLE: 4 of 4 requests")
    assert summary["server_metrics"]["decode_tokens_per_s"] == pytest.approx(RATE)
    assert "TIMING UNRELIABLE" in run.err + run.out


def test_steady_streams_agree_with_the_server(
    cli: Cli, timed_stub: Callable[..., str], tmp_path: Path
) -> None:
    url = timed_stub(ttft_s=0.05, step_s=STEP_S)
    run = cli(*bench_argv(url, tmp_path, "--no-progress", requests=4, output_tokens=60))
    assert run.code == 0, run.err
    summary = results(tmp_path)["summary"]
    assert not any(r["burst"] for r in results(tmp_path)["requests"])
    assert summary["warnings"] == []
    metrics = summary["server_metrics"]
    assert metrics["decode_rate_metric"] == "kimi_request_decode_tokens_per_second"
    assert metrics["inter_token_latency_s"] == pytest.approx(STEP_S)
    assert summary["decode_tokens_per_s"]["mean"] == pytest.approx(RATE, rel=0.1)
