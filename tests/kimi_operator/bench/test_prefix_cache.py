"""The prefix-cache hit rate of a replay, per TP group (each group's leader's /metrics read before
and after) and over all of them; reported, and compared beside TTFT and task completion."""

from collections.abc import Callable
from pathlib import Path

from kimi_operator.bench.stub import StubApp
from tests.support.bench import Cli, results

# Two sub-agent turns after a first one of the same session, plus an unrelated request.
SHARED = (
    '{"start_s": 0.0, "prompt_tokens": 40, "output_tokens": 4, "prefix_group": "s1",'
    ' "shared_prefix_tokens": 30}\n'
    '{"start_s": 0.3, "prompt_tokens": 50, "output_tokens": 4, "prefix_group": "s1",'
    ' "shared_prefix_tokens": 45, "fanout": 3}\n'
    '{"start_s": 0.1, "prompt_tokens": 20, "output_tokens": 6}\n'
)
# By hand, in blocks of 16 words: the first turn and the unrelated request find nothing; the
# first fanned-out turn finds its first block (30 words shared with the first turn: one whole
# block); the two others find two (45 words shared among the three: two whole blocks).
HITS, QUERIES = 16 + 32 + 32, 40 + 20 + 3 * 50
UNSHARED = '{"start_s": 0.0, "prompt_tokens": 40, "output_tokens": 4}\n'


def _replay(cli: Cli, url: str, trace: Path, out: Path, *groups: str) -> None:
    argv = ["bench", "--endpoint", url, "--profile", "agentic", "--trace", str(trace)]
    argv += ["--warmup", "0", "--output", str(out)]
    for group in groups:
        argv += ["--group-metrics-url", group]
    run = cli(*argv)
    assert run.code == 0, run.err


def test_hit_rate_per_group_and_overall(
    cli: Cli, stub: Callable[..., tuple[str, StubApp]], tmp_path: Path
) -> None:
    serving, app = stub(ttft_s=0.01, step_s=0.002)
    idle, _ = stub(ttft_s=0.01, step_s=0.002)
    trace = tmp_path / "trace.jsonl"
    trace.write_text(SHARED)
    groups = [f"{u.removesuffix('/v1')}/metrics" for u in (serving, idle)]
    _replay(cli, serving, trace, tmp_path / "out", *groups)
    assert (app.state.prefix_hits, app.state.prefix_queries) == (HITS, QUERIES)
    metrics = results(tmp_path / "out")["summary"]["server_metrics"]
    assert metrics["prefix_cache_groups"] == [
        {"metrics_url": groups[0], "queries": QUERIES, "hits": HITS, "hit_rate": HITS / QUERIES},
        {"metrics_url": groups[1], "queries": 0.0, "hits": 0.0, "hit_rate": None},
    ]
    assert metrics["prefix_cache_hit_rate"] == HITS / QUERIES
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"prefix-cache hit rate | {HITS / QUERIES:.1%}" in report
    assert f"prefix-cache hit rate, {groups[1]} | -" in report


def test_without_groups_the_endpoint_s_server_counts_and_an_unread_group_blanks_it(
    cli: Cli, stub: Callable[..., tuple[str, StubApp]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.01, step_s=0.002)
    trace = tmp_path / "trace.jsonl"
    trace.write_text(SHARED)
    _replay(cli, url, trace, tmp_path / "one")
    metrics = results(tmp_path / "one")["summary"]["server_metrics"]
    assert metrics["prefix_cache_hit_rate"] == HITS / QUERIES
    assert metrics["prefix_cache_groups"] == []
    # A group whose /metrics cannot be read: no overall rate rather than a wrong one.
    gone = url.removesuffix("/v1") + "/nothing-here"
    _replay(cli, url, trace, tmp_path / "two", url.removesuffix("/v1") + "/metrics", gone)
    metrics = results(tmp_path / "two")["summary"]["server_metrics"]
    assert metrics["prefix_cache_hit_rate"] is None
    assert metrics["prefix_cache_groups"][1] == {
        "metrics_url": gone,
        "queries": None,
        "hits": None,
        "hit_rate": None,
    }


def test_compare_shows_the_hit_rate_beside_ttft(
    cli: Cli, stub: Callable[..., tuple[str, StubApp]], tmp_path: Path
) -> None:
    for name, text in (("a", UNSHARED), ("b", SHARED)):
        url, _ = stub(ttft_s=0.01, step_s=0.002)
        trace = tmp_path / f"{name}.jsonl"
        trace.write_text(text)
        _replay(cli, url, trace, tmp_path / name)
    run = cli("bench", "compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("prefix-cache hit rate"))
    assert lines[row].split()[-2:] == [f"{HITS / QUERIES:.1%}", "-"]  # A hit nothing: no ratio
    assert lines[row].split()[-3] == "0.0%"
    assert lines[row - 1].startswith("TTFT (ms) mean")
    assert any(line.startswith("task completion (s) p50") for line in lines[row:])
