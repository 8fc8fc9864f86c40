"""The controller's reading of the client's errors: what is retried, and after how long."""

import json

from kimi_operator.controller.retry import retry_delay
from kimi_operator.k8s.client import classify


def body(message: str) -> bytes:
    return json.dumps({"kind": "Status", "message": message}).encode()


def test_retries_back_off_exponentially_unless_the_server_said_when() -> None:
    error = classify("create", "Service x", 500, body("busy"), None)
    assert [retry_delay(error, n) for n in range(9)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    conflict = classify("patch", "Service x", 409, body("changed"), None)
    assert [retry_delay(conflict, n) for n in range(3)] == [0.5, 1, 2]
    throttled = classify("create", "Service x", 429, body("slow down"), "7")
    assert [retry_delay(throttled, n) for n in range(3)] == [7, 7, 7]
