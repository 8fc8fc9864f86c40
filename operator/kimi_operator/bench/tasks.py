"""Tasks: an agent session's requests (or a trace request of its own) and what they add up to.

A task completes when every request of it was sent and answered; its completion time runs from
its first send to the last token of its last request. One failed request fails its task, however
many of its requests failed or were never sent because of it.
"""

from kimi_operator.bench.profiles import PlannedRequest
from kimi_operator.bench.results import RequestRecord, TaskRecord, TaskSummary
from kimi_operator.bench.stats import distribution, run_cost_usd


def task_records(plan: list[PlannedRequest], records: list[RequestRecord]) -> list[TaskRecord]:
    """One record per task, in the order of their first planned request."""
    sent = {record.index: record for record in records}
    members: dict[str, list[int]] = {}
    for request in plan:
        members.setdefault(request.task or f"request-{request.index}", []).append(request.index)
    tasks = []
    for task, indexes in members.items():
        mine = [sent[i] for i in indexes if i in sent]
        ok = [r for r in mine if r.error is None]
        completed = len(ok) == len(indexes)
        start = min((r.start_s for r in mine), default=None)
        end = max((r.start_s + r.chunk_times_s[-1] for r in ok), default=None)
        tasks.append(
            TaskRecord(
                task=task,
                requests=indexes,
                requests_failed=len(mine) - len(ok),
                requests_not_sent=len(indexes) - len(mine),
                completed=completed,
                start_s=start,
                completion_s=end - start
                if completed and start is not None and end is not None
                else None,
                prompt_tokens=sum(r.prompt_tokens or 0 for r in ok),
                output_tokens=sum(r.output_tokens for r in ok),
                ttft_sum_s=sum(r.ttft_s or 0.0 for r in ok),
            )
        )
    return tasks


def turn_ttfts(
    tasks: list[TaskRecord], records: list[RequestRecord]
) -> tuple[list[float], list[float]]:
    """TTFTs of the tasks' first requests and of their later ones (answered and timed: a burst
    record's TTFT is left out, as in the summary)."""
    timed = {r.index: r.ttft_s for r in records if r.error is None and not r.burst}
    first: list[float] = []
    returning: list[float] = []
    for task in tasks:
        for position, index in enumerate(task.requests):
            ttft = timed.get(index)
            if ttft is not None:
                (returning if position else first).append(ttft)
    return first, returning


def summarize_tasks(
    tasks: list[TaskRecord],
    records: list[RequestRecord],
    *,
    duration_s: float,
    gpus: int | None,
    gpu_hour_price_usd: float | None,
) -> TaskSummary:
    done = [task for task in tasks if task.completed]
    run_cost = run_cost_usd(gpus, gpu_hour_price_usd, duration_s)
    first, returning = turn_ttfts(tasks, records)
    return TaskSummary(
        ttft_first_turn_s=distribution(first),
        ttft_returning_turn_s=distribution(returning),
        completed=len(done),
        failed=len(tasks) - len(done),
        requests_not_sent=sum(task.requests_not_sent for task in tasks),
        completion_s=distribution(t.completion_s for t in done if t.completion_s is not None),
        ttft_sum_s=distribution(task.ttft_sum_s for task in done),
        output_tokens=distribution(float(task.output_tokens) for task in done),
        tasks_per_hour=len(done) / duration_s * 3600 if duration_s > 0 else 0.0,
        cost_per_task_usd=run_cost / len(done) if run_cost is not None and done else None,
    )
