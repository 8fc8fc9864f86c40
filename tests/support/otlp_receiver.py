"""An OTLP/HTTP trace receiver on 127.0.0.1, in the test's process: what vLLM's CPU server
(tests/vllm/test_tracing.py) and the operator (tests/integration/test_operator_spans.py) export
to. It decodes each request with opentelemetry-proto (the operator's OTLP exporter requires it) and
keeps every span as a dict: its trace id, span id and parent span id (hex; "" for a root), name,
start (ns since the epoch), attributes, and its resource's attributes.
"""

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

Span = dict[str, Any]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _attributes(attributes: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in attributes}


def spans_of(body: bytes) -> list[Span]:
    """The spans of one export request."""
    request = ExportTraceServiceRequest.FromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    {
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "start": span.start_time_unix_nano,
                        "attributes": _attributes(span.attributes),
                        "resource": resource,
                        "error": span.status.code == span.status.STATUS_CODE_ERROR,
                    }
                )
    return spans


def _handler(received: Callable[[list[Span]], None]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received(spans_of(self.rfile.read(int(self.headers["Content-Length"]))))
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test's log is for the test."""

    return Handler


class Receiver:
    """Serving in a thread while entered; `spans` in the order they arrived."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self._received))

    def _received(self, spans: list[Span]) -> None:
        with self._lock:
            self.spans.extend(spans)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The whole traces URL, as an OTLP/HTTP exporter is given it."""
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def received(self) -> list[Span]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, done: Callable[[list[Span]], bool], timeout_s: float = 30.0) -> list[Span]:
        """The spans once `done` holds of them; AssertionError at the timeout."""
        deadline = time.monotonic() + timeout_s
        while not done(spans := self.received()):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s} s; received {spans}")
            time.sleep(0.05)
        return spans

    def __enter__(self) -> Self:
        threading.Thread(
            target=self._server.serve_forever, name="otlp-receiver", daemon=True
        ).start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
