"""Sending a plan: open (each request at its start time) or closed (each waits for its answers).

In a closed replay a request that waits for others is sent at the later of its start time and
their last answer plus its think time, as an agent sends its next turn: a faster server finishes
the task sooner. When a request it waits for fails, it is never sent (the agent could not go on).
"""

import asyncio
import dataclasses
from time import perf_counter

import aiohttp

from kimi_operator.bench.client import Progress, stream_request, to_record
from kimi_operator.bench.profiles import PlannedRequest
from kimi_operator.bench.results import RequestRecord
from kimi_operator.bench.traceparent import new_traceparent


async def run_plan(
    *,
    session: aiohttp.ClientSession,
    url: str,
    plan: list[PlannedRequest],
    payloads: list[bytes],
    concurrency: int | None,
    progress: Progress,
    closed: bool = False,
    trace_sampling: float | None = None,
) -> tuple[list[RequestRecord], float]:
    """Send the planned requests, at most `concurrency` in flight; with `trace_sampling`, each
    with a traceparent of its own, that share of them sampled.

    Returns the records of the requests sent (in plan order; a record's `scheduled_start_s` is
    when it became due) and the run's duration: first send to last completion. Plan indexes are
    positions in `plan`.
    """
    limit = asyncio.Semaphore(concurrency) if concurrency else None
    loop = asyncio.get_running_loop()
    # When each request's answer ended (perf_counter), or None when it failed or was not sent.
    answered: list[asyncio.Future[float | None]] = [loop.create_future() for _ in plan]
    run_start = perf_counter()

    async def one(request: PlannedRequest, payload: bytes) -> RequestRecord | None:
        due = request.start_s  # from run start
        if closed and request.after:
            answers = [await answered[i] for i in request.after]
            if None in answers:
                answered[request.index].set_result(None)
                progress.done += 1
                progress.failed += 1
                return None
            last = max(a for a in answers if a is not None)
            due = max(due, last - run_start + request.think_s)
        delay = run_start + due - perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tools = bool(request.tools)
        trace = None if trace_sampling is None else new_traceparent(trace_sampling)
        if limit is None:
            outcome = await stream_request(session, url, payload, progress, tools, trace=trace)
        else:
            async with limit:
                outcome = await stream_request(session, url, payload, progress, tools, trace=trace)
        record = to_record(dataclasses.replace(request, start_s=due), outcome, run_start)
        answered[request.index].set_result(outcome.finished if record.error is None else None)
        progress.done += 1
        progress.failed += record.error is not None
        return record

    records = await asyncio.gather(*map(one, plan, payloads))
    return [r for r in records if r is not None], perf_counter() - run_start
