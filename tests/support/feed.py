"""Finished requests as vLLM 0.33.0 builds them (`IterationStats.update_from_finished_request`)."""

from typing import Any

from vllm.v1.engine import FinishReason
from vllm.v1.metrics.stats import IterationStats, RequestStateStats


def finished(requests: list[tuple[int, float, float]]) -> Any:
    """IterationStats whose finished requests have (output tokens, TTFT s, decode time s)."""
    stats = IterationStats()
    now = stats.iteration_timestamp
    for index, (tokens, ttft, decode) in enumerate(requests):
        state = RequestStateStats(
            num_generation_tokens=tokens,
            arrival_time=now - ttft - decode,
            queued_ts=100.0,
            scheduled_ts=100.0,
            first_token_ts=100.0 + ttft,
            last_token_ts=100.0 + ttft + decode,
        )
        stats.update_from_finished_request(FinishReason.LENGTH, f"r{index}", 100, tokens, state)
    return stats
