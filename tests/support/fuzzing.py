"""How many examples a long Hypothesis run draws: a fifth of them in `make test` (a feedback loop
in minutes), every one under KIMI_FUZZ=full (`make test-fuzz`, which .ci/run runs)."""

import os

FULL = os.environ.get("KIMI_FUZZ") == "full"


def examples(full: int) -> int:
    """`full` under KIMI_FUZZ=full, else a fifth of it."""
    return full if FULL else max(1, full // 5)
