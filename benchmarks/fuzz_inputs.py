"""Hostile input through the validator and the CLI: random specs, random YAML, oversized documents.

`run_fuzz(cases, seed)` draws `cases` inputs from the strategies of tests/fuzz (Hypothesis, seeded:
the same seed gives the same inputs), runs each through `kimi-operator validate -` (and `render -`
when valid) in this process or through `check_document`, and counts verdicts and failures.
`main()` prints a table and writes benchmarks/results/fuzz.json. benchmarks/reliability.py imports
`run_fuzz`.
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: tests/ holds the strategies
    sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from tests.fuzz.harness import Outcome, check  # noqa: E402
from tests.fuzz.strategies import INPUTS  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "fuzz.json"


def run_fuzz(cases: int = 1000, seed: int = 0) -> dict[str, int | float]:
    """Counts over `cases` random inputs: cases, accepted, rejected, crashes, tracebacks, bad
    (rejections naming no field, unsafe rendered pods), max_seconds (slowest single input)."""
    outcomes: list[Outcome] = []

    @hypothesis_seed(seed)
    @settings(
        max_examples=cases,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=INPUTS)
    def one(case: tuple[str, object]) -> None:
        outcomes.append(check(case))

    one()
    return {
        "cases": len(outcomes),
        "accepted": sum(o.verdict == "accepted" for o in outcomes),
        "rejected": sum(o.verdict == "rejected" for o in outcomes),
        "crashes": sum(o.verdict == "crash" for o in outcomes),
        "tracebacks": sum(o.traceback for o in outcomes),
        "bad": sum(bool(o.bad) for o in outcomes),
        "max_seconds": round(max((o.seconds for o in outcomes), default=0.0), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    figures = run_fuzz(args.cases, args.seed)
    print(f"{'figure':<12} {'value':>10}")
    for key, value in figures.items():
        print(f"{key:<12} {value:>10}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"seed": args.seed, **figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
