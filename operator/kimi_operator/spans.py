"""The operator's own reconciles as OpenTelemetry spans (docs/observability.md, "The operator's
own spans"), so that "why did the rollout wait" has a trace as a slow turn has.

Off unless `kimi-operator run --operator-traces-endpoint` (or OTEL_EXPORTER_OTLP_*, its default)
asks for them. Off, no `Tracing` is made, nothing imports OpenTelemetry, and `root`, `span` and
`current` hand out one shared no-op, so a reconcile costs and does what it did without them. On,
the controller opens a reconcile's root span with its tracer, which the steps below it
(reconcile/: observe, decide, act) find in a context variable: each controller traces with its
own, two operators in one process (the tests) never share one, and nothing global is set
(OpenTelemetry's global tracer provider is left alone). Spans leave in batches, from the SDK's
thread, over OTLP/HTTP (protobuf).
"""

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

# What a span's attribute may hold (OpenTelemetry's primitive values and their lists).
AttributeValue = str | bool | int | float | Sequence[str] | Sequence[int] | Sequence[float]
Attributes = Mapping[str, AttributeValue]
SERVICE_NAME = "kimi-operator"  # the resource's service.name, unless OTEL_SERVICE_NAME says
INSTRUMENTATION = "kimi_operator"


class Span(Protocol):
    """What the operator does with a span: OpenTelemetry's, or the no-op."""

    def set_attribute(self, key: str, value: AttributeValue) -> None: ...

    def set_attributes(self, attributes: Attributes) -> None: ...


class _NoSpan:
    def set_attribute(self, key: str, value: AttributeValue) -> None:
        pass

    def set_attributes(self, attributes: Attributes) -> None:
        pass


_NO_SPAN = _NoSpan()
_OFF: AbstractContextManager[Span] = nullcontext(_NO_SPAN)  # reusable: it holds no state
_TRACER: ContextVar["Tracer | None"] = ContextVar("kimi_operator_tracer", default=None)


class Tracing:
    """Spans exported to an OTLP/HTTP `endpoint` (the whole URL, `.../v1/traces`) in batches;
    `shutdown` sends what is queued. The sampler is the SDK's, from OTEL_TRACES_SAMPLER and
    OTEL_TRACES_SAMPLER_ARG (parent-based, always on, by default); resource attributes are
    OTEL_RESOURCE_ATTRIBUTES' plus the service's name and version."""

    def __init__(self, endpoint: str) -> None:
        import os  # noqa: PLC0415
        from importlib.metadata import version  # noqa: PLC0415

        # Imported here: with tracing off they never load (tests/kimi_operator/test_spans.py).
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter,
        )
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

        operator_version = version("kimi-operator")
        resource = Resource.create(
            {
                "service.name": os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME,
                "service.version": operator_version,
            }
        )
        self.provider: TracerProvider = TracerProvider(resource=resource)
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        self.tracer: Tracer = self.provider.get_tracer(INSTRUMENTATION, operator_version)

    def shutdown(self) -> None:
        """Export what is queued (the SDK bounds the wait), then nothing more."""
        self.provider.shutdown()


def root(
    tracing: Tracing | None, name: str, attributes: Attributes
) -> AbstractContextManager[Span]:
    """A reconcile's span, the parent of every `span` opened inside it on this thread; the no-op
    without `tracing`."""
    return _OFF if tracing is None else _rooted(tracing.tracer, name, attributes)


@contextmanager
def _rooted(tracer: "Tracer", name: str, attributes: Attributes) -> Iterator[Span]:
    token = _TRACER.set(tracer)
    try:
        with tracer.start_as_current_span(name, attributes=attributes) as opened:
            yield opened
    finally:
        _TRACER.reset(token)


def span(name: str, attributes: Attributes | None = None) -> AbstractContextManager[Span]:
    """A step of the reconcile in progress (a child of its `root`); the no-op outside one or
    with tracing off. An exception leaving it is recorded on it, and it ends as an error."""
    tracer = _TRACER.get()
    return _OFF if tracer is None else tracer.start_as_current_span(name, attributes=attributes)


def current() -> Span:
    """The span open on this thread (the reconcile's, outside its steps); the no-op when off."""
    if _TRACER.get() is None:
        return _NO_SPAN
    from opentelemetry.trace import get_current_span  # noqa: PLC0415 (loaded when tracing is on)

    return get_current_span()
