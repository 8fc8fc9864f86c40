"""The real vLLM server on this machine: start time, memory, and decode tok/s three ways.

Starts vLLM's CPU build (0.32.0, not the 0.33.0 the operator targets) serving the tiny DeepseekV3
with every kimi_kernels plugin (`kimi_operator.dev.cpu_vllm`), measures the time to `/health` and
the RSS of its process tree, then runs `kimi-operator bench --endpoint` at batch 1 and 8 and sets
side by side the decode tok/s per request (prefill excluded) of the client, of the plugin
(`kimi_request_decode_tokens_per_second`, mean) and of vLLM itself (tokens after the first over
`vllm:request_decode_time_seconds`). Prints a table, writes benchmarks/results/vllm_cpu.json.

    .venv/bin/python benchmarks/vllm_cpu.py [--threads 2] [--requests 16] [--output-tokens 128]
"""

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from kimi_operator.bench.server_metrics import (
    DECODE_TIME,
    GENERATION_TOKENS,
    KIMI_DECODE_RATE,
    parse,
)
from kimi_operator.cli import main as cli
from kimi_operator.dev.cpu_vllm import CpuServer, missing

RESULTS = Path(__file__).resolve().parent / "results" / "vllm_cpu.json"


def scrape(server: CpuServer) -> dict[str, float]:
    import urllib.request  # noqa: PLC0415

    with urllib.request.urlopen(f"{server.root}/metrics", timeout=10) as response:
        return dict(parse(response.read().decode()).totals)


def measure(server: CpuServer, batch: int, requests: int, tokens: int) -> dict[str, Any]:
    before = scrape(server)
    with tempfile.TemporaryDirectory() as out:
        argv = [
            "bench", "--endpoint", f"{server.root}/v1", "--concurrency", str(batch),
            "--requests", str(requests), "--prompt-tokens", "16", "--output-tokens", str(tokens),
            "--output", out, "--no-progress",
        ]  # fmt: skip
        if cli(argv) != 0:
            raise SystemExit(f"bench failed at batch {batch}")
        results = json.loads((Path(out) / "results.json").read_text())
    after = scrape(server)

    def change(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    summary = results["summary"]
    decoded = change(f"{GENERATION_TOKENS}_sum") - change(f"{GENERATION_TOKENS}_count")
    return {
        "batch": batch,
        "requests": requests,
        "client_decode_tps_mean": summary["decode_tokens_per_s"]["mean"],
        "client_decode_tps_p50": summary["decode_tokens_per_s"]["p50"],
        "plugin_decode_tps_mean": change(f"{KIMI_DECODE_RATE}_sum")
        / change(f"{KIMI_DECODE_RATE}_count"),
        "vllm_decode_tps": decoded / change(f"{DECODE_TIME}_sum"),
        "client_ttft_p50_s": summary["ttft_s"]["p50"],
        "output_tps": summary["output_tokens_per_s"],
        "bursts": sum(r["burst"] for r in results["requests"]),
        "warnings": summary["warnings"],
    }


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process tree (vLLM's API server, engine and worker)."""
    import psutil  # noqa: PLC0415 (installed by make setup with vLLM's interfaces)

    top = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [top, *top.children(recursive=True)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    reason = missing()
    if reason is not None:
        raise SystemExit(reason)
    with (
        tempfile.TemporaryFile() as log,
        CpuServer(port=18100, metrics_port=18101, threads=args.threads, log=log) as server,
    ):
        assert server.process is not None
        rss = tree_rss_bytes(server.process.pid)
        runs = [measure(server, b, args.requests, args.output_tokens) for b in (1, 8)]
    figures = {
        "vllm": "0.32.0 (CPU build)",
        "omp_threads": args.threads,
        "start_to_health_s": server.start_s,
        "rss_mb": rss / 2**20,
        "runs": runs,
    }
    print(f"vLLM 0.32.0 CPU build, tiny DeepseekV3, OMP_NUM_THREADS={args.threads}")
    print(f"start to /health: {server.start_s:.1f} s   RSS (process tree): {rss / 2**20:.0f} MB")
    print(f"{'batch':>5} {'client mean':>12} {'client p50':>11} {'plugin mean':>12} {'vLLM':>8}")
    for r in runs:
        print(
            f"{r['batch']:>5} {r['client_decode_tps_mean']:>12.1f}"
            f" {r['client_decode_tps_p50']:>11.1f} {r['plugin_decode_tps_mean']:>12.1f}"
            f" {r['vllm_decode_tps']:>8.1f}"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
