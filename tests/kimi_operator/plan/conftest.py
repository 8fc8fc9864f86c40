"""The CLI and stub-server fixtures of the bench tests, shared."""

from tests.kimi_operator.bench.conftest import cli, stub

__all__ = ["cli", "stub"]
