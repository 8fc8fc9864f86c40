"""Every measured request carries a W3C traceparent of its own (warm-up ones none), its trace id
kept in results.json, and report.md lists the slowest turns with their trace ids and links: sent to
the stub server on 127.0.0.1, which records each request's header."""

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimi_operator.bench.traceparent import new_traceparent, sampled
from kimi_operator.cli import main
from tests.support.bench import Cli, bench_argv, results

# W3C Trace Context, version 00: version-traceid-parentid-flags, lowercase hex.
TRACEPARENT = re.compile(r"^00-(?!0{32})([0-9a-f]{32})-(?!0{16})[0-9a-f]{16}-0[01]$")
TEMPLATE = "https://grafana.example/explore?traceId={trace_id}"
SLOW_S = 0.4  # the TTFT of the turns the stub makes slow; the others take a few ms


@pytest.mark.parametrize("ratio", [0.0, 0.25, 0.5, 1.0])
def test_the_sampled_share_holds_and_ids_are_fresh(ratio: float) -> None:
    parents = [new_traceparent(ratio) for _ in range(4000)]
    assert all(TRACEPARENT.match(p.header) for p in parents)
    assert len({p.trace_id for p in parents}) == len(parents)
    share = sum(p.sampled for p in parents) / len(parents)
    assert abs(share - ratio) < 0.03
    assert all(p.header.endswith("-01" if p.sampled else "-00") for p in parents)


def test_the_decision_is_the_trace_id_ratio_samplers() -> None:
    """The last 16 hex digits below ratio x 2^64, as OpenTelemetry's TraceIdRatioBased decides."""
    low, high = "f" * 16 + "0" * 15 + "1", "0" * 16 + "f" * 16
    assert sampled(low, 0.01)
    assert not sampled(high, 0.99)
    assert sampled(high, 1.0)
    assert not sampled(low, 0.0)


def _run(cli: Cli, url: str, out: Path, *extra: str) -> dict[str, Any]:
    argv = bench_argv(url, out, *extra, requests=6, output_tokens=4)
    run = cli(*argv, "--concurrency", "1", "--no-progress")
    assert run.code == 0, run.err + run.out
    return results(out)


def test_every_request_carries_its_trace_and_the_report_links_the_slowest(
    cli: Cli, stub: Callable[..., tuple[str, Any]], tmp_path: Path
) -> None:
    # One at a time: the stub's 2nd and 5th arrivals (after the warm-up) are the slow turns.
    url, app = stub(
        ttft_s=0.005, step_s=0.002, ttft_script=(0.005, 0.005, SLOW_S, 0.005, 0.005, SLOW_S)
    )
    out = tmp_path / "out"
    data = _run(cli, url, out, "--warmup", "1", "--trace-url", TEMPLATE)
    sent = app.state.traceparents
    assert sent.pop("cmpl-1") is None  # the warm-up request: not measured, not traced
    records = data["requests"]
    assert len(records) == 6
    for record in records:
        match = TRACEPARENT.match(sent[record["request_id"]] or "")
        assert match is not None, sent[record["request_id"]]
        assert match.group(1) == record["trace_id"]
        assert record["trace_sampled"] is True
    assert data["config"]["trace_sampling"] == 1.0
    assert data["config"]["trace_url"] == TEMPLATE
    slow = [r for r in records if r["request_id"] in ("cmpl-3", "cmpl-6")]
    assert all(r["e2e_s"] >= SLOW_S for r in slow)
    report = (out / "report.md").read_text()
    section = report.split("## Slowest turns", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == len(records)  # fewer answered turns than the list holds
    slowest_first = sorted(records, key=lambda r: -r["e2e_s"])
    for row, record in zip(rows, slowest_first, strict=True):
        link = TEMPLATE.replace("{trace_id}", record["trace_id"])
        assert row.startswith(f"| {record['index']} |")
        assert f"[`{record['trace_id']}`]({link})" in row
    assert {rows[0].split(" | ")[0], rows[1].split(" | ")[0]} == {f"| {r['index']}" for r in slow}


def test_unsampled_traceparents_are_sent_and_said_so(
    cli: Cli, stub: Callable[..., tuple[str, Any]], tmp_path: Path
) -> None:
    url, app = stub(ttft_s=0.005, step_s=0.002)
    out = tmp_path / "out"
    data = _run(cli, url, out, "--traceparent-sampling", "0")
    headers = list(app.state.traceparents.values())
    assert len(headers) == 6
    assert all(h is not None and TRACEPARENT.match(h) and h.endswith("-00") for h in headers)
    assert {r["trace_sampled"] for r in data["requests"]} == {False}
    report = (out / "report.md").read_text()
    assert report.count("(not sampled)") == 6
    assert "](https://" not in report.split("## Slowest turns", 1)[1]


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--traceparent-sampling", "1.5", "must be 0 to 1"),
        ("--traceparent-sampling", "half", "not a number"),
        ("--trace-url", "https://tempo.example/trace/", "{trace_id} where the trace id goes"),
        ("--trace-url", "tempo/{trace_id}", "an http(s) URL"),
    ],
)
def test_bad_trace_options_are_refused_naming_the_flag(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    flag: str,
    value: str,
    words: str,
) -> None:
    argv = bench_argv(
        "http://127.0.0.1:9", tmp_path / "out", flag, value, requests=1, output_tokens=1
    )
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err
    assert words in err
