"""Every API failure becomes the kopf error that says whether to retry."""

import json
import socket
import threading
from collections.abc import Iterator

import kopf
import pytest

from kimi_operator.k8s.client import Client, classify, load_configuration, retry_delay
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
    assert isinstance(error, kopf.TemporaryError)
    assert error.delay == delay
    assert str(error) == f"create Service x: HTTP {status}: busy"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 422])
def test_other_statuses_are_permanent(status: int) -> None:
    error = classify("patch", "Service x", status, b"<html>nope</html>", None)
    assert isinstance(error, kopf.PermanentError)
    assert not isinstance(error, kopf.TemporaryError)
    assert str(error) == f"patch Service x: HTTP {status}: <html>nope</html>"


def test_refused_connection_is_temporary() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    client = Client(load_configuration(f"http://127.0.0.1:{port}"))
    with pytest.raises(kopf.TemporaryError, match="get Service"):
        client.get(SERVICE, "default", "x")


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
    with pytest.raises(kopf.TemporaryError, match="timed out"):
        client.get(SERVICE, "default", "x")


def test_retries_back_off_exponentially_unless_the_server_said_when() -> None:
    error = classify("create", "Service x", 500, body("busy"), None)
    assert isinstance(error, kopf.TemporaryError)
    assert [retry_delay(error, n) for n in range(9)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    conflict = classify("patch", "Service x", 409, body("changed"), None)
    assert isinstance(conflict, kopf.TemporaryError)
    assert [retry_delay(conflict, n) for n in range(3)] == [0.5, 1, 2]
    throttled = classify("create", "Service x", 429, body("slow down"), "7")
    assert isinstance(throttled, kopf.TemporaryError)
    assert [retry_delay(throttled, n) for n in range(3)] == [7, 7, 7]
