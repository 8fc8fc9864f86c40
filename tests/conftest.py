"""Options shared by the whole suite."""

import os

import pytest

# vLLM chooses its platform at its first import, and the dev venv's wheel runs on the CPU: set
# before any test module is collected, whichever files a run selects (test_vllm_platform.py).
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

from tests.support.vllm_cli import vllm_parser

__all__ = ["vllm_parser"]  # vLLM's real serve parser, for every test that asks for it


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite the golden files of tests/kimi_operator/builders, not compare with them",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked `heavy` first, the rest in their order (a stable sort). `make unit` hands
    pytest-xdist's workers whole files in this order (`--dist loadfile --no-loadscope-reorder`):
    the longest files start at once and the many short ones even out the end, where xdist's own
    order (most tests first) left one-test files of a minute for last, one worker waiting."""
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)
