#!/usr/bin/env python3
"""Render the Prometheus proof's data (tests/metrics/harness.py) for the main panels into a PNG.

    .venv/bin/python scripts/observability_picture.py [docs/observability.png]

Starts Debian's Prometheus on 127.0.0.1 with the same targets and rules as
tests/metrics/test_prometheus_e2e.py, asks it for the 12 minutes of history (a degraded phase, then
a steady one) with the panels' own PromQL, and plots them with matplotlib.
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator"), str(ROOT / "kernels")]
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tests.metrics.conftest import TENSOR_PARALLEL, tiny_vllm_config  # noqa: E402
from tests.metrics.harness import GPU_HOUR_PRICE, SNAPSHOTS, STEP, expected, proof  # noqa: E402
from tests.observability.catalog import recording_rules  # noqa: E402

RULES = recording_rules()
PER_USER = "kimi:decode_tokens_per_second_per_user:{}_5m"
TOKENS = f"({RULES['kimi:generation_tokens_per_second:rate_5m']})"
GPUS = f"({RULES['kimi:engine_gpus:sum']})"
PANELS = [
    (
        "Decode tok/s per user (prefill excluded)",
        [(RULES[PER_USER.format("p50")], "p50"), (RULES[PER_USER.format("p90")], "p90")],
    ),
    (
        "Fast-path fraction (pure decode steps)",
        [(RULES["kimi:decode_fast_path_fraction:ratio_5m"], "specialized / decode steps")],
    ),
    (
        "Generation tok/s",
        [(TOKENS, "per deployment"), (f"{TOKENS} / {GPUS}", "per GPU")],
    ),
    (
        f"Cost per 1M output tokens at {GPU_HOUR_PRICE:.2f}/GPU-hour",
        [(f"{GPUS} * {GPU_HOUR_PRICE} / ({TOKENS} * 3600) * 1e6", "cost")],
    ),
]


def main(out: Path) -> None:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        sys.exit("prometheus is not installed: apt-get install prometheus")
    with tempfile.TemporaryDirectory() as tmp, proof(prometheus, tiny_vllm_config(Path(tmp))) as p:
        end = p.end_ms / 1000
        start = end - (SNAPSHOTS - 1) * STEP
        figure, axes = plt.subplots(2, 2, figsize=(12, 7), constrained_layout=True)
        for axis, (title, queries) in zip(axes.flat, PANELS, strict=True):
            for expr, label in queries:
                for series in p.query_range(expr, start, end, STEP / 2):
                    times = [(float(t) - end) / 60 for t, _ in series["values"]]
                    axis.plot(times, [float(v) for _, v in series["values"]], label=label)
            axis.set_title(title)
            axis.set_xlabel("minutes")
            axis.grid(alpha=0.3)
            axis.legend(loc="lower right")
        figure.suptitle("Kimi K3 panels on a real Prometheus (data of the end-to-end test)")
        figure.savefig(out, dpi=110)
        print(f"wrote {out}")
        want = expected(TENSOR_PARALLEL)
        measured = {
            "decode_p50": PER_USER.format("p50"),
            "decode_p90": PER_USER.format("p90"),
            "decode_mean": PER_USER.format("mean"),
            "fast_path_fraction": "kimi:decode_fast_path_fraction:ratio_5m",
            "tokens_per_gpu_second": "kimi:generation_tokens_per_gpu_second:rate_5m",
            "cost_per_million": PANELS[3][1][0][0],
            "acceptance_length": "kimi:spec_decode_acceptance_length:ratio_5m",
        }
        for name, expr in measured.items():
            got = [float(s["value"][1]) for s in p.query(expr)]
            print(f"  {name}: fed {want[name]:.4g}, Prometheus says {got}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "observability.png")
