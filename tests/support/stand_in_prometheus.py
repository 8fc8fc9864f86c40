"""A stand-in Prometheus on 127.0.0.1: /api/v1/query answers every query with `value` (or, for a
query naming a series of `answers`, that one's value; None: an empty vector) and remembers the
queries; with `token` it answers 401 to a request without that bearer token (as a
proxy in front of a secured Prometheus does), with `tls` it serves HTTPS with that certificate."""

import json
import ssl
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


class StandInPrometheus:
    def __init__(self, token: str | None = None, tls: tuple[Path, Path] | None = None) -> None:
        self.value = 0.0
        self.answers: dict[str, float | None] = {}
        self.queries: list[str] = []
        self.token = token
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if outer.token is not None and (
                    self.headers.get("Authorization") != f"Bearer {outer.token}"
                ):
                    self._answer(401, b"Unauthorized\n", "text/plain")
                    return
                url = urllib.parse.urlsplit(self.path)
                asked = urllib.parse.parse_qs(url.query).get("query", [])
                outer.queries += asked
                value = next(
                    (v for k, v in outer.answers.items() if any(k in q for q in asked)),
                    outer.value,
                )
                result = [] if value is None else [{"metric": {}, "value": [0, str(value)]}]
                body = json.dumps(
                    {"status": "success", "data": {"resultType": "vector", "result": result}}
                ).encode()
                self._answer(200 if url.path == "/api/v1/query" else 404, body, "application/json")

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Down: its port refuses connections from now on."""
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus() -> Iterator[StandInPrometheus]:
    stand_in = StandInPrometheus()
    yield stand_in
    if stand_in.server.socket.fileno() != -1:
        stand_in.stop()
