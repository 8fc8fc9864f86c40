"""The embedded API server and the operator, as tests/operator/conftest.py provides them."""

from tests.operator.conftest import api, client, installed, operator, token

__all__ = ["api", "client", "installed", "operator", "token"]
