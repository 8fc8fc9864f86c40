"""Options shared by the whole suite."""

import pytest

from tests.support.vllm_cli import vllm_parser

__all__ = ["vllm_parser"]  # vLLM's real serve parser, for every test that asks for it


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite the golden files of tests/kimi_operator/builders, not compare with them",
    )
