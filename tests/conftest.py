"""Options shared by the whole suite."""

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite the golden files of tests/unit/builders instead of comparing with them",
    )
