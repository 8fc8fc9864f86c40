"""Requests as vLLM 0.33.0's frontend records them: `IterationStats.update_from_output` for the
first and the last token, `update_from_finished_request` at the end, each at its iteration's
time."""

from typing import Any

from vllm.v1.engine import EngineCoreOutput, FinishReason
from vllm.v1.metrics.stats import IterationStats, LoRARequestStates, RequestStateStats

ENGINE_START = 100.0  # the engine core's monotonic clock when each request is scheduled


def served(requests: list[tuple[int, float, float]], late_last_token: float = 0.0) -> list[Any]:
    """Two IterationStats, the first tokens' and the finishes', for requests of (output tokens,
    TTFT s, engine-core decode time s). The frontend receives each last token `late_last_token` s
    later than the engine-core clocks alone say: outputs reach it after varying delays."""
    first, last = IterationStats(), IterationStats()
    lora = LoRARequestStates()
    start = first.iteration_timestamp
    for index, (tokens, ttft, decode) in enumerate(requests):
        request_id = f"r{index}"
        state = RequestStateStats(
            arrival_time=start - ttft, queued_ts=ENGINE_START, scheduled_ts=ENGINE_START
        )
        if tokens > 0:
            first.update_from_output(
                EngineCoreOutput(request_id, [1]), ENGINE_START + ttft, True, state, lora, None
            )
        last.iteration_timestamp = start + decode + late_last_token
        if tokens > 1:
            output = EngineCoreOutput(request_id, [1] * (tokens - 1))
            last.update_from_output(output, ENGINE_START + ttft + decode, False, state, lora, None)
        last.update_from_finished_request(FinishReason.LENGTH, request_id, 100, tokens, state)
    return [first, last]


def record(logger: Any, stats: list[Any]) -> None:
    """Each iteration to a stat logger in turn, as vLLM's frontend hands them over."""
    for iteration in stats:
        logger.record(None, iteration)
