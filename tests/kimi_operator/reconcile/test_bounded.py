"""The operator's reads outside the API server end, however a server answers (reconcile/
bounded.py): a leader's vLLM /metrics while its group drains, a Prometheus instant query. A bug
once: each socket read had a timeout, the answer none in all and no size cap, so a server sending
a byte now and then held the reconcile's worker for as long as it liked."""

import importlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import urllib3

from kimi_operator.builders import OperatorDefaults
from kimi_operator.reconcile import bounded
from kimi_operator.reconcile.prometheus import query

# The module (the package's `observe` is its function).
observe = importlib.import_module("kimi_operator.reconcile.observe")

METRICS = b"vllm:num_requests_running 3\nvllm:num_requests_waiting 0\n"
VECTOR = {"status": "success", "data": {"resultType": "vector", "result": []}}
PROMETHEUS = json.dumps(VECTOR).encode()
BYTE_EVERY_S = 0.3  # far apart: the whole answer takes 30 s or more, each byte well within a read


class Server:
    """/metrics or /api/v1/query: `body` at once; under /slow/ a byte at a time, BYTE_EVERY_S
    apart; under /large/ after `padding` bytes of comment lines."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = PROMETHEUS if "/api/v1/query" in self.path else METRICS
                if self.path.startswith("/large/"):
                    body = b"# padding\n" * (600 * 1024) + body
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    if not self.path.startswith("/slow/"):
                        self.wfile.write(body)
                        return
                    for i in range(len(body)):
                        self.wfile.write(body[i : i + 1])
                        self.wfile.flush()
                        if outer.stop.wait(BYTE_EVERY_S):
                            return
                except OSError:
                    return  # the reader gave up

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


def test_an_answer_within_its_bounds_is_read(server: Server) -> None:
    pool = urllib3.PoolManager()
    timeout = urllib3.Timeout(connect=1.0, read=2.0)
    answer = bounded.get(
        pool, f"{server.url}/metrics", timeout=timeout, deadline_s=30.0, max_bytes=1024
    )
    assert answer == (200, METRICS)
    assert observe.requests_at(f"{server.url}/metrics") == 3


def test_a_slow_answer_ends_at_its_deadline(server: Server) -> None:
    pool = urllib3.PoolManager()
    timeout = urllib3.Timeout(connect=1.0, read=2.0)
    with pytest.raises(bounded.Exceeded, match=r"not read within 0\.2 s"):
        bounded.get(
            pool, f"{server.url}/slow/metrics", timeout=timeout, deadline_s=0.2, max_bytes=1024
        )


def test_a_large_answer_ends_at_its_cap(server: Server) -> None:
    pool = urllib3.PoolManager()
    timeout = urllib3.Timeout(connect=1.0, read=2.0)
    with pytest.raises(bounded.Exceeded, match="larger than 1048576 bytes"):
        bounded.get(
            pool, f"{server.url}/large/metrics", timeout=timeout, deadline_s=30.0, max_bytes=1 << 20
        )


@pytest.mark.parametrize("path", ["/slow/metrics", "/large/metrics"])
def test_a_leader_answering_beyond_the_bounds_is_unknown(
    server: Server, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unknown: the drain waits for its grace, as for a leader that does not answer."""
    monkeypatch.setattr(observe, "METRICS_DEADLINE_S", 0.2)
    assert observe.requests_at(f"{server.url}{path}") is None


@pytest.mark.parametrize("path", ["/slow", "/large"])
def test_a_prometheus_answering_beyond_the_bounds_is_no_answer(server: Server, path: str) -> None:
    defaults = OperatorDefaults(prometheus_url=f"{server.url}{path}")
    assert query(OperatorDefaults(prometheus_url=server.url), "sum(up)") is None  # empty vector
    with pytest.raises(ValueError, match="Exceeded"):  # each byte within its read's 1 s
        query(defaults, "sum(up)", timeout_s=1.0)
