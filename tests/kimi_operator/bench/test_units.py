"""The arithmetic and parsing under the measurements, checked on known values."""

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kimi_operator.bench.client import Progress
from kimi_operator.bench.server_metrics import delta, parse
from kimi_operator.bench.stats import decode_rate, distribution, percentile, token_itls
from tests.support.bench import Cli


def test_percentiles_interpolate_linearly() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 90) == pytest.approx(90.1)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([3.0], 99) == 3.0
    dist = distribution([4.0, 1.0, 3.0, 2.0])
    assert dist is not None
    assert (dist.p50, dist.mean) == (2.5, 2.5)
    assert distribution([]) is None


def test_itl_per_token_divides_each_gap_by_its_tokens() -> None:
    times = [0.100, 0.110, 0.130]
    assert token_itls(times, [1, 2, 4], 7) == pytest.approx(
        [0.005, 0.005, 0.005, 0.005, 0.005, 0.005]
    )
    # Only the total known: spread evenly (7 tokens over 3 chunks).
    assert token_itls(times, None, 6) == pytest.approx([0.005, 0.010])


def test_decode_rate_excludes_the_first_chunk() -> None:
    # 1 token at 100 ms (prefill), then 9 more over 90 ms: 100 tok/s, not 10/190 ms.
    times = [0.1 + 0.01 * i for i in range(10)]
    assert decode_rate(times, [1] * 10, 10) == pytest.approx(100)
    assert decode_rate([0.1, 0.2], [3, 3], 6) == pytest.approx(30)
    assert decode_rate([0.1], [5], 5) is None
    assert decode_rate([0.1, 0.1], [1, 1], 2) is None


METRICS = """
# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{{model_name="m",engine="0"}} {drafts}
vllm:spec_decode_num_drafts_total{{model_name="m",engine="1"}} {drafts}
vllm:spec_decode_num_draft_tokens_total{{model_name="m",engine="0"}} {draft_tokens}
vllm:spec_decode_num_accepted_tokens_total{{model_name="m",engine="0"}} {accepted}
kimi_decode_steps_total{{path="specialized",reason=""}} {fast}
kimi_decode_steps_total{{path="fallback",reason="batch too large"}} {large}
kimi_decode_steps_total{{path="fallback",reason="prefill"}} 7
kimi_build_info{{vllm_version="0.33.0",decode_backend="auto",gpu_name="GB300 \\"x\\""}} 1
garbage line
"""


def test_acceptance_length_and_fast_path_fraction_from_counter_deltas() -> None:
    before = parse(METRICS.format(drafts=100, draft_tokens=1400, accepted=500, fast=10, large=0))
    after = parse(METRICS.format(drafts=150, draft_tokens=2100, accepted=850, fast=40, large=10))
    metrics = delta(before, after)
    assert metrics.reachable
    assert metrics.spec_decode_acceptance_length == pytest.approx(1 + 350 / 100)  # 2 engines
    assert metrics.spec_decode_acceptance_rate == pytest.approx(350 / 700)
    assert metrics.fast_path_fraction == pytest.approx(30 / 40)
    assert metrics.fallback_reasons == {"batch too large": pytest.approx(0.25)}
    assert after.info["decode_backend"] == "auto"
    assert delta(before, None).reachable is False


def test_no_speculative_decoding_means_no_acceptance_figures() -> None:
    text = 'kimi_decode_steps_total{path="specialized",reason=""} 5\n'
    metrics = delta(parse(text), parse(text))
    assert metrics.spec_decode_acceptance_length is None
    assert metrics.fast_path_fraction is None
    assert metrics.served is None  # the server said nothing of its settings


def test_the_settings_the_server_runs_with_are_read_from_its_info_metrics() -> None:
    """What vLLM's CPU build runs an MLA model with on a machine without AMX, whatever the
    command line asked: the scheduler's settings from kimi_kernels' plugin, the cache's from
    vLLM's own vllm:cache_config_info."""
    text = (
        'kimi_scheduler_config_info{model_name="m",max_num_seqs="8",'
        'max_num_batched_tokens="2048",enable_chunked_prefill="False",max_model_len="2048"} 1\n'
        'vllm:cache_config_info{engine="0",block_size="16",enable_prefix_caching="False",'
        'num_cpu_blocks="None"} 1\n'
    )
    served = delta(parse(""), parse(text)).served
    assert served is not None
    assert served.model_dump() == {
        "max_num_seqs": 8,
        "max_num_batched_tokens": 2048,
        "enable_chunked_prefill": False,
        "max_model_len": 2048,
        "enable_prefix_caching": False,
        "block_size": 16,
    }


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line() -> None:
    progress = Progress(total=8, done=2, failed=1, tokens=1234)
    assert progress.line().startswith(
        "[#######.......................] 2/8 requests  1 failed  1234 tokens"
    )


def test_progress_redraws_in_place_on_a_terminal() -> None:
    import asyncio  # noqa: PLC0415

    terminal = Terminal()

    async def tick() -> None:
        task = asyncio.create_task(Progress(total=1).ticker(terminal))
        await asyncio.sleep(0.45)
        task.cancel()

    asyncio.run(tick())
    drawn = terminal.getvalue()
    assert drawn.startswith("\r[")
    assert drawn.count("\r[") in {1, 2}  # 5 Hz, however busy the machine
    assert "\n" not in drawn


def test_validate_does_not_load_the_bench_machinery(tmp_path: Path) -> None:
    spec = tmp_path / "missing.yaml"
    code = (
        "import sys\nfrom kimi_operator.cli import main\n"
        f"main(['validate', {str(spec)!r}])\n"
        "heavy = {'aiohttp', 'matplotlib', 'kubernetes', 'kimi_operator.bench.runner'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "[]", out.stderr


def test_report_has_plots_and_sections(cli: Cli, tmp_path: Path) -> None:
    from kimi_operator.bench.stub import Schedule, serve_in_thread  # noqa: PLC0415

    with serve_in_thread(Schedule(ttft_s=0.005, step_s=0.002, tokens_per_chunk=2)) as (url, _):
        run = cli(
            "bench",
            "--endpoint",
            url,
            "--requests",
            "3",
            "--output-tokens",
            "20",
            "--output",
            str(tmp_path),
            "--warmup",
            "0",
        )
    assert run.code == 0, run.err
    for plot in ("itl_cdf.png", "decode_rate.png"):
        assert (tmp_path / plot).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    report = (tmp_path / "report.md").read_text()
    for needle in (
        "# kimi-operator bench: headline on moonshotai/Kimi-K3",
        "| TTFT (ms) |",
        "| decode tok/s per request, excl. prefill |",
        "![ITL CDF](itl_cdf.png)",
        "| spec-decode acceptance length | 2.00 |",
    ):
        assert needle in report
    assert "requests ok / failed                       3 / 0" in run.out


def test_connections_stamp_arrivals_in_the_protocol() -> None:
    """Guards the aiohttp hook: an upgrade that ignores it would silently stamp at read time."""
    import asyncio  # noqa: PLC0415

    import aiohttp  # noqa: PLC0415

    from kimi_operator.bench.client import stamping_connector  # noqa: PLC0415
    from kimi_operator.bench.stub import Schedule, serve_in_thread  # noqa: PLC0415

    async def fetch(url: str) -> tuple[str, float]:
        async with (
            aiohttp.ClientSession(connector=stamping_connector()) as session,
            session.post(f"{url}/completions", json={"prompt": "a", "max_tokens": 3}) as response,
        ):
            assert response.connection is not None
            protocol = response.connection.protocol
            await response.read()
            return type(protocol).__name__, getattr(protocol, "arrived", 0.0)

    with serve_in_thread(Schedule(ttft_s=0.05, step_s=0.01)) as (url, _):  # still streaming
        before = time.perf_counter()
        name, arrived = asyncio.run(fetch(url))
    assert name == "_StampedProtocol"
    assert before < arrived < time.perf_counter()


def test_the_kv_handover_of_a_decode_group_from_its_counters() -> None:
    """On a decode group of spec.prefill: the share of prompt tokens a connector handed over,
    NIXL's mean transfer time and its failures, all over the run (vLLM 0.33.0's names)."""
    text = (
        'vllm:prompt_tokens_by_source_total{{engine="0",source="local_compute"}} {local}\n'
        'vllm:prompt_tokens_by_source_total{{engine="0",source="local_cache_hit"}} 0\n'
        'vllm:prompt_tokens_by_source_total{{engine="0",source="external_kv_transfer"}} {moved}\n'
        'vllm:nixl_xfer_time_seconds_sum{{engine="0"}} {time}\n'
        'vllm:nixl_xfer_time_seconds_count{{engine="0"}} {count}\n'
        'vllm:nixl_num_failed_transfers_total{{engine="0"}} {failed}\n'
    )
    before = parse(text.format(local=10, moved=0, time=0, count=0, failed=1))
    after = parse(text.format(local=40, moved=2970, time=1.5, count=3, failed=2))
    metrics = delta(before, after)
    assert metrics.external_prompt_fraction == pytest.approx(2970 / 3000)
    assert metrics.kv_transfer_time_s == pytest.approx(0.5)
    assert metrics.kv_transfer_failures == 1
    aggregated = delta(parse(""), parse('vllm:prompt_tokens_by_source_total{source="x"} 5\n'))
    assert aggregated.external_prompt_fraction == 0
    assert (aggregated.kv_transfer_time_s, aggregated.kv_transfer_failures) == (None, None)
