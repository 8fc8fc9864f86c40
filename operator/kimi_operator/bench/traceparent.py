"""W3C trace context on every measured request (docs/bench.md#traces).

Each request carries a `traceparent` of its own, sampled for a share of them, so that a turn the
report lists as slow is one trace in the deployment's collector: every component samples
parent-based (spec.observability.tracing), so the flag sent here decides for the whole request.
The share is decided from the trace id as OpenTelemetry's TraceIdRatioBased sampler decides it
(its last 16 hex digits below ratio x 2^64), so it holds over a run.
"""

import secrets
from dataclasses import dataclass

from kimi_operator.api.constants import TRACE_ID_PLACEHOLDER

VERSION = "00"  # the W3C Trace Context version this writes


@dataclass(frozen=True)
class TraceParent:
    trace_id: str  # 32 lowercase hex digits, not all zero
    parent_id: str  # 16 lowercase hex digits, not all zero: the client's own (unexported) span
    sampled: bool

    @property
    def header(self) -> str:
        return f"{VERSION}-{self.trace_id}-{self.parent_id}-{'01' if self.sampled else '00'}"


def _hex_id(nbytes: int) -> str:
    while True:
        value = secrets.token_hex(nbytes)
        if int(value, 16):  # all zeros is the invalid id
            return value


def sampled(trace_id: str, ratio: float) -> bool:
    return int(trace_id[16:], 16) < round(ratio * 2**64)


def new_traceparent(ratio: float) -> TraceParent:
    trace_id = _hex_id(16)
    return TraceParent(trace_id, _hex_id(8), sampled(trace_id, ratio))


def trace_link(template: str, trace_id: str) -> str:
    """The trace UI's page of `trace_id`, from a template such as
    `https://grafana.example/explore?...{trace_id}` (checked to hold the placeholder)."""
    return template.replace(TRACE_ID_PLACEHOLDER, trace_id)
