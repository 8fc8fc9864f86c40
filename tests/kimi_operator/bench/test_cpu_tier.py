"""A session evicted from GPU memory comes back from the CPU tier (kvCache.cpuOffload): bench
reports the tier's hits from vLLM's external prefix-cache counters and the bytes it moved, and
TTFT of first turns apart from returning ones. The stub's GPU cache holds two blocks; its CPU tier
keeps every block (docs/kv-cache.md)."""

from collections.abc import Callable
from pathlib import Path

from kimi_operator.bench.results import TaskRecord
from kimi_operator.bench.stub import PREFIX_BLOCK, STUB_BYTES_PER_TOKEN, StubApp
from kimi_operator.bench.tasks import turn_ttfts
from tests.support.bench import Cli, record, results

# Session a's first turn (two blocks), then session b's, which pushes a's out of the GPU cache;
# then a's second turn: a's two blocks again and one of its own.
TRACE = (
    '{"start_s": 0.0, "prompt_tokens": 32, "output_tokens": 4, "prefix_group": "a",'
    ' "shared_prefix_tokens": 32, "id": "a1", "session": "a"}\n'
    '{"start_s": 0.2, "prompt_tokens": 32, "output_tokens": 4, "prefix_group": "b",'
    ' "shared_prefix_tokens": 32, "id": "b1", "session": "b"}\n'
    '{"start_s": 0.4, "prompt_tokens": 48, "output_tokens": 4, "prefix_group": "a",'
    ' "shared_prefix_tokens": 32, "id": "a2", "session": "a", "after": "a1"}\n'
)
# By hand: the GPU cache never hits (a's blocks are gone when a comes back); every word is looked
# up in the tier; a's second turn finds its two blocks there.
QUERIES, HITS = 32 + 32 + 48, 2 * PREFIX_BLOCK
STORED_BLOCKS = 2 + 2 + 3


def _replay(cli: Cli, url: str, trace: Path, out: Path) -> None:
    argv = ["bench", "--endpoint", url, "--profile", "agentic", "--trace", str(trace)]
    run = cli(*argv, "--warmup", "0", "--output", str(out))
    assert run.code == 0, run.err


def test_the_tiers_hits_and_bytes_and_ttft_by_turn(
    cli: Cli, stub: Callable[..., tuple[str, StubApp]], tmp_path: Path
) -> None:
    # The returning turn's TTFT is short (its prefix comes back), the first turns' long. Its
    # tokens 20 ms apart: 2 ms apart, a client on a loaded machine (CI's make test) read two of
    # its three gaps at once, bench rightly marked it a burst and left its TTFT out (None).
    url, app = stub(ttft_s=0.01, step_s=0.02, gpu_blocks=2, cpu_blocks=64, ttft_script=(0.3, 0.3))
    trace = tmp_path / "trace.jsonl"
    trace.write_text(TRACE)
    _replay(cli, url, trace, tmp_path / "out")
    assert (app.state.prefix_hits, app.state.external_hits) == (0, HITS)
    summary = results(tmp_path / "out")["summary"]
    metrics = summary["server_metrics"]
    assert metrics["prefix_cache_hit_rate"] == 0.0
    assert metrics["offload_hit_rate"] == HITS / QUERIES
    assert metrics["offload_hit_tokens"] == HITS
    assert metrics["offload_loaded_bytes"] == HITS * STUB_BYTES_PER_TOKEN
    assert metrics["offload_stored_bytes"] == STORED_BLOCKS * PREFIX_BLOCK * STUB_BYTES_PER_TOKEN
    first, returning = (
        summary["tasks"]["ttft_first_turn_s"],
        summary["tasks"]["ttft_returning_turn_s"],
    )
    assert first["p50"] >= 0.3
    assert returning["p50"] < 0.3
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"CPU-tier hit rate (of tokens not in GPU memory) | {HITS / QUERIES:.1%}" in report
    assert "TTFT of returning turns, p50 / p90 (ms)" in report


def test_without_the_tier_the_evicted_session_is_recomputed_and_no_tier_is_reported(
    cli: Cli, stub: Callable[..., tuple[str, StubApp]], tmp_path: Path
) -> None:
    url, app = stub(ttft_s=0.01, step_s=0.002, gpu_blocks=2)
    trace = tmp_path / "trace.jsonl"
    trace.write_text(TRACE)
    _replay(cli, url, trace, tmp_path / "out")
    assert (app.state.prefix_hits, app.state.external_queries) == (0, 0)
    metrics = results(tmp_path / "out")["summary"]["server_metrics"]
    assert metrics["offload_hit_rate"] is None
    assert metrics["offload_loaded_bytes"] is None
    assert "CPU-tier" not in (tmp_path / "out" / "report.md").read_text()


def test_compare_without_and_with_the_tier(
    cli: Cli, stub: Callable[..., tuple[str, StubApp]], tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(TRACE)
    for name, cpu_blocks in (("a", 0), ("b", 64)):
        url, _ = stub(ttft_s=0.01, step_s=0.002, gpu_blocks=2, cpu_blocks=cpu_blocks)
        _replay(cli, url, trace, tmp_path / name)
    run = cli("bench", "compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    (tier,) = [line.split() for line in lines if line.startswith("CPU-tier hit rate")]
    assert tier[-3:] == ["-", f"{HITS / QUERIES:.1%}", "-"]  # A has no tier: no ratio
    assert any(line.startswith("TTFT of returning turns (ms) p50") for line in lines)
    assert any(line.startswith("TTFT of first turns (ms) p50") for line in lines)


def _task(name: str, requests: list[int]) -> TaskRecord:
    return TaskRecord(
        task=name,
        requests=requests,
        requests_failed=0,
        requests_not_sent=0,
        completed=True,
        start_s=0.0,
        completion_s=1.0,
        prompt_tokens=1,
        output_tokens=1,
        ttft_sum_s=0.0,
    )


def test_a_tasks_first_planned_request_is_its_first_turn_whatever_the_others_did() -> None:
    records = [record([1.0]), record([0.1], index=1), record([2.0], index=2)]
    records.append(record([], index=3, error="x"))
    records.append(record([0.2], index=4).model_copy(update={"burst": True}))
    tasks = [_task("a", [0, 1, 4]), _task("b", [2, 3])]
    assert turn_ttfts(tasks, records) == ([1.0, 2.0], [0.1])
