"""The CLI fixture of the bench tests, shared."""

from tests.kimi_operator.bench.conftest import cli

__all__ = ["cli"]
