"""Fixtures: the scheduled stub server on 127.0.0.1 and a way to run the CLI."""

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kimi_operator.bench.stub import Schedule, StubApp, serve_in_process, serve_in_thread
from kimi_operator.cli import main
from tests.support.bench import Cli, CliResult


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    def run(*args: str) -> CliResult:
        code = main(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def stub() -> Iterator[Callable[..., tuple[str, StubApp]]]:
    """Start stubs with a given schedule in this process (their state can be inspected)."""
    servers: list[Any] = []

    def start(**schedule: Any) -> tuple[str, StubApp]:
        server = serve_in_thread(Schedule(**schedule))
        servers.append(server)
        return server.__enter__()

    yield start
    for server in servers:
        server.__exit__(None, None, None)


@pytest.fixture(scope="module")
def timed_stub() -> Iterator[Callable[..., str]]:
    """Stubs in their own processes, for measurements that must not share the client's GIL."""
    servers: dict[Schedule, Any] = {}
    urls: dict[Schedule, str] = {}

    def start(**fields: Any) -> str:
        schedule = Schedule(**fields)
        if schedule not in servers:
            servers[schedule] = serve_in_process(schedule)
            urls[schedule] = servers[schedule].__enter__()
        return urls[schedule]

    yield start
    for server in servers.values():
        server.__exit__(None, None, None)
