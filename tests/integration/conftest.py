"""The embedded API server and operator fixtures of tests/operator, for the tests here."""

from tests.operator.conftest import api, client, installed, operator, token

__all__ = ["api", "client", "installed", "operator", "token"]
