"""Every API failure becomes an ApiError with its status and Retry-After; the controller's
retry policy says which are retried, and when."""

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from kimi_operator.controller.retry import retry_delay, temporary
from kimi_operator.k8s.client import Client, classify, load_configuration
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import SERVICE


def body(message: str) -> bytes:
    return json.dumps({"kind": "Status", "message": message}).encode()


@pytest.mark.parametrize(
    ("status", "retry_after", "delay"),
    [(409, None, 0.5), (429, None, 5.0), (429, "7", 7.0), (500, None, 1.0), (503, "3", 3.0)],
)
def test_retryable_statuses_are_temporary(
    status: int, retry_after: str | None, delay: float
) -> None:
    error = classify("create", "Service x", status, body("busy"), retry_after)
    assert temporary(error)
    assert retry_delay(error, 0) == delay
    assert str(error) == f"create Service x: HTTP {status}: busy"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 422])
def test_other_statuses_are_permanent(status: int) -> None:
    error = classify("patch", "Service x", status, b"<html>nope</html>", None)
    assert (error.code, temporary(error)) == (status, False)
    assert str(error) == f"patch Service x: HTTP {status}: <html>nope</html>"


def test_refused_connection_is_temporary() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    client = Client(load_configuration(f"http://127.0.0.1:{port}"))
    with pytest.raises(ApiError, match="get Service") as raised:
        client.get(SERVICE, "default", "x")
    assert (raised.value.code, temporary(raised.value)) == (0, True)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def test_timeout_is_temporary(silent_server: str) -> None:
    client = Client(load_configuration(silent_server), timeout_s=0.2)
    with pytest.raises(ApiError, match="timed out") as raised:
        client.get(SERVICE, "default", "x")
    assert (raised.value.code, temporary(raised.value)) == (0, True)
