"""The operator's own /healthz (the chart's liveness and readiness probes)."""

import urllib.error
import urllib.request

import pytest

from kimi_operator.runner import health_server


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            code: int = response.status
            return code
    except urllib.error.HTTPError as error:
        return error.code


def test_healthz_says_what_the_check_says_and_nothing_else_is_served() -> None:
    healthy = [True]
    server = health_server("127.0.0.1:0", lambda: healthy[0])
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert status_of(f"{base}/healthz") == 200
        healthy[0] = False  # a leader past its renew deadline
        assert status_of(f"{base}/healthz") == 503
        assert status_of(f"{base}/metrics") == 404
    finally:
        server.shutdown()
        server.server_close()


def test_a_busy_address_is_an_error_at_start() -> None:
    server = health_server("127.0.0.1:0", lambda: True)
    try:
        with pytest.raises(OSError, match="in use"):
            health_server(f"127.0.0.1:{server.server_address[1]}", lambda: True)
    finally:
        server.shutdown()
        server.server_close()
