"""`--target METRIC=SECONDS`: the fewest serving groups whose modelled METRIC is at most SECONDS.

More groups never slow a request down in the model, so the search (`fewest`, which the SLO
autoscaler's capacity model shares) doubles the groups until the target is met and then bisects.
Disaggregated configurations scale their decode groups.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass

from kimi_operator.bench.results import Distribution, Results
from kimi_operator.plan import PlanError
from kimi_operator.plan.configs import MAX_GROUPS, Configuration

METRICS = ("task_completion", "ttft")
TARGET = re.compile(r"^(?P<metric>task_completion|ttft)_(?P<key>p50|p90|p99)=(?P<value>[0-9.]+)$")


@dataclass(frozen=True)
class Target:
    metric: str
    key: str
    seconds: float

    def __str__(self) -> str:
        return f"{self.metric}_{self.key} <= {self.seconds:g} s"

    def met(self, results: Results) -> bool:
        summary = results.summary
        dist: Distribution | None = summary.ttft_s
        if self.metric == "task_completion":
            dist = summary.tasks.completion_s if summary.tasks else None
        if dist is None or (summary.tasks is not None and summary.tasks.failed):
            return False
        value: float = getattr(dist, self.key)
        return value <= self.seconds


def parse_target(text: str) -> Target:
    found = TARGET.match(text.strip())
    if found is None:
        raise PlanError(
            f"--target: {text!r}: expected METRIC_PERCENTILE=SECONDS with METRIC one of "
            f"{', '.join(METRICS)} and PERCENTILE p50, p90 or p99, e.g. task_completion_p90=600"
        )
    try:
        seconds = float(found["value"])
    except ValueError:
        raise PlanError(f"--target: {found['value']!r} is not a number of seconds") from None
    if seconds <= 0:
        raise PlanError("--target: the seconds must be positive")
    return Target(found["metric"], found["key"], seconds)


def fewest(meets: Callable[[int], bool], most: int, start: int = 1) -> int | None:
    """The fewest groups (1..`most`) that `meets`, or None when even `most` do not. More groups
    never slow a request down in the model: from `start` (a guess: the count now), steps
    doubling each time go down while met or up until met, then a bisection between the last
    miss and the first met; from 1 it doubles 1, 2, 4, ... as a plan's search does."""
    start = min(max(start, 1), most)
    step = 1
    if meets(start):
        high = start
        low = max(high - step, 0)
        while low and meets(low):
            high, step = low, step * 2
            low = max(high - step, 0)
    else:
        low = start
        while True:
            if low >= most:
                return None
            high = min(low + step, most)
            if meets(high):
                break
            low, step = high, step * 2
    while high - low > 1:  # low misses (or is 0), high meets
        middle = (low + high) // 2
        if meets(middle):
            high = middle
        else:
            low = middle
    return high


def fewest_groups(
    config: Configuration, target: Target, predict: Callable[[Configuration], Results]
) -> int | None:
    """The fewest groups (1..MAX_GROUPS) meeting the target, or None when even the most miss."""
    return fewest(
        lambda groups: target.met(predict(config.model_copy(update={"replicas": groups}))),
        MAX_GROUPS,
    )
