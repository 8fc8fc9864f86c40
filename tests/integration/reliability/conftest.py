"""The operator under faults, restarts, hand edits and churn (marked `reliability`: run by
`make test-reliability`, not by `make test`)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_operator.controller import retry
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.processes import OperatorProcess
from kimi_operator.runner import OperatorThread, RunConfig

HERE = Path(__file__).parent
RESYNC_S = 0.5
CLIENT_TIMEOUT_S = 1.0  # the operator's read timeout here; injected timeouts answer later


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.reliability)


@pytest.fixture
def operator(
    api: EmbeddedApiServer,
    token: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[OperatorThread]:
    """The operator in-process, its client with a short read timeout (so that an injected slow
    answer is a timeout) and short discovery caching (so that a CRD removed is noticed soon);
    server errors and timeouts retried after 0.5 s (1 s in a cluster): the same paths, sooner."""
    monkeypatch.setattr(retry, "SERVER_ERROR_DELAY_S", 0.5)
    config = RunConfig(
        server=api.url,
        token=token,
        resync_interval_s=RESYNC_S,
        workers=4,
        api_timeout_s=CLIENT_TIMEOUT_S,
        discovery_ttl_s=0.5,
    )
    with OperatorThread(config) as op:
        yield op


@pytest.fixture
def operator_process(
    api: EmbeddedApiServer,
    token: str,
) -> Iterator[OperatorProcess]:
    """`kimi-operator run` in a process of its own, against the embedded server."""
    with OperatorProcess(api.url, ["--resync-interval=2", "--workers=4"], token=token) as op:
        yield op
