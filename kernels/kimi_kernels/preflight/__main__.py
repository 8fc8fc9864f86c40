"""``python -m kimi_kernels.preflight [--expect-imex] [--no-kernels]``: JSON report on stdout,
one line per problem on stderr, exit status 1 when there is any problem."""

from __future__ import annotations

import argparse
import json
import os
import sys

from kimi_kernels.preflight.checks import evaluate, report
from kimi_kernels.preflight.probe import gather


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kimi_kernels.preflight")
    parser.add_argument(
        "--expect-imex",
        action="store_true",
        default=os.environ.get("KIMI_PREFLIGHT_EXPECT_IMEX") == "1",
        help="a ComputeDomain claim is mounted: require an IMEX channel device "
        "(default from KIMI_PREFLIGHT_EXPECT_IMEX=1)",
    )
    parser.add_argument(
        "--no-kernels",
        action="store_true",
        help="stock decode (decode.backend auto): skip what only vLLM's latency-specialized "
        "decode needs (its imports, the CuTe DSL, its MLA attention cores)",
    )
    args = parser.parse_args(argv)
    facts = gather(expect_imex=args.expect_imex, fast_path=not args.no_kernels)
    problems = evaluate(facts)
    print(json.dumps(report(facts, problems), indent=2, sort_keys=True))
    for line in problems:
        print(f"preflight: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
