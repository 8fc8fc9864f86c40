"""The weights downloader on loopback: fetch rate by parallelism, check rate, what a resume moves.

Against the fake hub on 127.0.0.1 (no network in the figures: they bound the downloader's own
cost, hashing and writing, not a real hub's bandwidth). Prints a table and writes
benchmarks/results/weights_download.json. Figures are medians of `--repeats` runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

from kimi_kernels.weights.download import Progress, Request, run
from kimi_kernels.weights.fetch import Hub
from kimi_kernels.weights.layout import DEFAULT_EXCLUDE, DEFAULT_INCLUDE, PARTIAL
from kimi_operator.embedded.hub import FakeHub

OUT = Path(__file__).resolve().parent / "results" / "weights_download.json"
REPO = "bench/weights"


def shards(count: int, mib: int) -> dict[str, bytes]:
    block = hashlib.sha256(b"bench").digest() * (1 << 15)  # 1 MiB
    return {
        f"model-{i + 1:05d}-of-{count:05d}.safetensors": bytes([i]) + block * mib
        for i in range(count)
    } | {"config.json": b"{}"}


def timed(hub: Hub, request: Request) -> float:
    start = time.perf_counter()
    run(hub, request, Progress(None))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mib", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    files = shards(args.shards, args.shard_mib)
    total = sum(len(d) for d in files.values())
    hub = FakeHub()
    hub.push(REPO, files)
    big = next(iter(files))
    rows: dict[str, list[float]] = {}
    with hub.running(), tempfile.TemporaryDirectory() as tmp:
        endpoint = Hub(hub.url, None, retries=3, retry_wait_s=0.1)

        def request(dest: Path, jobs: int) -> Request:
            return Request(REPO, "main", dest, DEFAULT_INCLUDE, DEFAULT_EXCLUDE, jobs)

        for repeat in range(args.repeats):
            for jobs in (1, 4):
                dest = Path(tmp) / f"cold-{jobs}-{repeat}"
                seconds = timed(endpoint, request(dest, jobs))
                rows.setdefault(f"fetch, {jobs} at a time (MB/s)", []).append(total / seconds / 1e6)
            seconds = timed(endpoint, request(dest, 4))
            rows.setdefault("check a complete cache (MB/s)", []).append(total / seconds / 1e6)
            # A kill halfway through the first shard: the next run moves only the rest of it.
            (dest / big).unlink()
            part = dest / PARTIAL / f"{big}.part"
            part.write_bytes(files[big][: len(files[big]) // 2])
            hub.served.clear()
            run(endpoint, request(dest, 4), Progress(None))
            moved = sum(len(files[big]) - s.range_start for s in hub.gets(big))
            rows.setdefault("resume after half a shard: bytes moved / shard", []).append(
                moved / len(files[big])
            )
    result = {name: statistics.median(values) for name, values in rows.items()}
    print(f"{args.shards} shards x {args.shard_mib} MiB + config ({total / 1e6:.1f} MB), loopback")
    print(f"{'figure':52} {'median':>10}")
    for name, value in result.items():
        print(f"{name:52} {value:10.2f}")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(
        json.dumps({"bytes": total, "repeats": args.repeats, "medians": result}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
