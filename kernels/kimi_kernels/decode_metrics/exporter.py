"""A text-format `/metrics` endpoint for a registry of our own.

The classic text format 0.0.4 only (never OpenMetrics): what vLLM serves, what every Prometheus 2.x
reads, and what Prometheus stores under the names we chose.
"""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4


def serve(registry: CollectorRegistry, address: str, port: int) -> ThreadingHTTPServer:
    """Serve `registry` on http://address:port/metrics from a daemon thread; raises OSError when
    the port is taken. Port 0 picks a free one (`server.server_address`)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics here")
                return
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Scrapes are not worth a log line each."""

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="kimi-metrics", daemon=True).start()
    return server
