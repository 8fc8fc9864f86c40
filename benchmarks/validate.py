"""How fast a spec is checked: in-process (target < 1 ms) and as a command (target < 0.5 s).

Prints a table and writes benchmarks/results/validate.json. Figures are medians of one run.
"""

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from kimi_operator.api.validation import check_document

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "crds" / "samples"
VALID = SAMPLES / "k3-tp8-dspark.yaml"
INVALID = SAMPLES / "rejected" / "k3-lora-tp12.yaml"
TARGET_IN_PROCESS_S = 1e-3
TARGET_COMMAND_S = 0.5


def in_process(path: Path, repeats: int = 2000) -> list[float]:
    doc = yaml.safe_load(path.read_text())
    check_document(doc)  # warm: the first call builds pydantic's validators' caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        check_document(doc)
        times.append(time.perf_counter() - start)
    return times


def command(path: Path, repeats: int = 15) -> list[float]:
    exe = Path(sys.executable).with_name("kimi-operator")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([str(exe), "validate", str(path)], capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    rows: list[dict[str, Any]] = []
    for label, path in (("valid", VALID), ("invalid (10 problems)", INVALID)):
        for mode, runner, target in (
            ("in-process", in_process, TARGET_IN_PROCESS_S),
            ("command", command, TARGET_COMMAND_S),
        ):
            times = runner(path)
            median = statistics.median(times)
            rows.append(
                {
                    "spec": label,
                    "mode": mode,
                    "runs": len(times),
                    "median_s": median,
                    "p90_s": statistics.quantiles(times, n=10)[-1],
                    "target_s": target,
                    "ratio_to_target": median / target,
                    "met": median < target,
                }
            )
    print(
        f"{'spec':<22} {'mode':<11} {'runs':>5} {'median':>10} {'p90':>10} {'target':>8} {'met':>4}"
    )
    for r in rows:
        met = "yes" if r["met"] else "NO"
        print(
            f"{r['spec']:<22} {r['mode']:<11} {r['runs']:>5} {r['median_s'] * 1e3:>8.3f}ms "
            f"{r['p90_s'] * 1e3:>8.3f}ms {r['target_s'] * 1e3:>6.0f}ms {met:>4}"
        )
    out = ROOT / "benchmarks" / "results" / "validate.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"python": sys.version.split()[0], "rows": rows}, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
