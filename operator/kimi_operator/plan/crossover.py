"""Disaggregated against aggregated, over concurrency: from how many concurrent agent sessions a
disaggregated configuration beats its aggregated twin (the same groups, each serving both) on task
completion and on cost per completed task.

N concurrent sessions: the trace's sessions taken in turn until there are N (a session taken again
is a new one, with its own prefixes), all starting at once and replayed as the plan replays the
trace. Both configurations get the same GPUs, so cost per task differs only by how long the
sessions take.
"""

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, Final

from kimi_operator.bench.profiles import PlannedRequest
from kimi_operator.bench.results import Results

DEFAULT_CONCURRENCY: Final = (1, 2, 4, 8, 16, 32, 64)


def at_concurrency(plan: list[PlannedRequest], sessions: int) -> list[PlannedRequest]:
    """`sessions` of the plan's sessions (tasks), all starting at 0; indexes are positions."""
    tasks: dict[str, list[PlannedRequest]] = {}
    for request in plan:
        tasks.setdefault(request.task or f"request-{request.index}", []).append(request)
    sessions_in_plan = list(tasks.values())
    scaled: list[PlannedRequest] = []
    for copy in range(sessions):
        members = sessions_in_plan[copy % len(sessions_in_plan)]
        again = copy // len(sessions_in_plan)
        origin = min(r.start_s for r in members)
        index = {r.index: len(scaled) + position for position, r in enumerate(members)}
        scaled += [
            replace(
                r,
                index=index[r.index],
                start_s=r.start_s - origin,
                group=_renamed(r.group, again),
                task=_renamed(r.task, again),
                after=tuple(index[a] for a in r.after if a in index),
            )
            for r in members
        ]
    return scaled


def _renamed(name: str | None, again: int) -> str | None:
    return name if name is None or again == 0 else f"{name}~{again}"


@dataclass(frozen=True)
class Figures:
    task_completion_p50_s: float | None
    task_completion_p90_s: float | None
    cost_per_task_usd: float | None
    ttft_p50_s: float | None
    decode_tokens_per_s_p50: float | None
    fast_path_fraction: float | None

    @classmethod
    def of(cls, results: Results) -> "Figures":
        summary = results.summary
        tasks = summary.tasks
        completion = tasks.completion_s if tasks else None
        return cls(
            task_completion_p50_s=completion.p50 if completion else None,
            task_completion_p90_s=completion.p90 if completion else None,
            cost_per_task_usd=tasks.cost_per_task_usd if tasks else None,
            ttft_p50_s=summary.ttft_s.p50 if summary.ttft_s else None,
            decode_tokens_per_s_p50=summary.decode_tokens_per_s.p50
            if summary.decode_tokens_per_s
            else None,
            fast_path_fraction=summary.server_metrics.fast_path_fraction,
        )


def _less(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and a < b


@dataclass(frozen=True)
class Point:
    sessions: int
    disaggregated: Figures
    aggregated: Figures

    @property
    def faster(self) -> bool:
        """Task completion lower at p50 and at p90."""
        d, a = self.disaggregated, self.aggregated
        return _less(d.task_completion_p50_s, a.task_completion_p50_s) and _less(
            d.task_completion_p90_s, a.task_completion_p90_s
        )

    @property
    def cheaper(self) -> bool:
        return _less(self.disaggregated.cost_per_task_usd, self.aggregated.cost_per_task_usd)


@dataclass(frozen=True)
class Crossover:
    disaggregated: str
    aggregated: str
    gpus: int
    points: list[Point]

    def wins_from(self, wins: Callable[[Point], bool]) -> int | None:
        """The fewest sessions tried from which disaggregated wins at every count tried."""
        found = None
        for point in reversed(self.points):
            if not wins(point):
                break
            found = point.sessions
        return found

    def _when(self, wins: Callable[[Point], bool], what: str) -> str:
        start = self.wins_from(wins)
        if start is not None:
            return f"wins from {start} concurrent sessions on {what}"
        tried = f"{self.points[0].sessions}-{self.points[-1].sessions}"
        some = [str(p.sessions) for p in self.points if wins(p)]
        if some:
            return f"wins on {what} only at {', '.join(some)} of the {tried} sessions tried"
        return f"never wins on {what} in the range tried ({tried} sessions)"

    def line(self) -> str:
        """One sentence: "... wins from N concurrent sessions on task completion ...; wins from
        M ... on cost per task", or where it never does in the range tried."""
        return (
            f"Disaggregated {self.disaggregated} against aggregated {self.aggregated} "
            f"({self.gpus} GPUs each): "
            f"{self._when(lambda p: p.faster, 'task completion (p50 and p90)')}; "
            f"{self._when(lambda p: p.cheaper, 'cost per task')}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "disaggregated": self.disaggregated,
            "aggregated": self.aggregated,
            "gpus": self.gpus,
            "wins_from_sessions": {
                "task_completion": self.wins_from(lambda p: p.faster),
                "cost_per_task": self.wins_from(lambda p: p.cheaper),
            },
            "line": self.line(),
            "points": [
                {
                    "sessions": p.sessions,
                    "disaggregated": asdict(p.disaggregated),
                    "aggregated": asdict(p.aggregated),
                    "faster": p.faster,
                    "cheaper": p.cheaper,
                }
                for p in self.points
            ],
        }


def sweep(
    names: tuple[str, str],
    gpus: int,
    concurrency: list[int],
    predict_at: Callable[[bool, int], Results],
) -> Crossover:
    """`predict_at(disaggregated, sessions)` for each count; `names`: (disaggregated, twin)."""
    points = [
        Point(n, Figures.of(predict_at(True, n)), Figures.of(predict_at(False, n)))
        for n in sorted(set(concurrency))
    ]
    return Crossover(names[0], names[1], gpus, points)
