"""vLLM 0.33.0's real `vllm serve` parser (the wheel `make setup` installs), for the tests that hold
the snapshot of its options (api/vllm_flags.py) and our reading of engineArgs to it."""

import contextlib
import io
import os
from typing import Any

import pytest

from kimi_operator.api.engine_args import FORBIDDEN_FLAG_GROUPS
from kimi_operator.api.vllm_flags import SERVE_OPTIONS

# vLLM destinations (parsed settings) that some refused flag sets.
FORBIDDEN_DESTS = {
    d for g in FORBIDDEN_FLAG_GROUPS for d, fs in SERVE_OPTIONS.items() if set(fs) & set(g.flags)
}


@pytest.fixture(scope="session")
def vllm_parser() -> Any:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    pytest.importorskip("vllm", reason="vLLM 0.33.0 is installed by `make setup`")
    from vllm.entrypoints.common.cli_args import make_arg_parser  # noqa: PLC0415 (slow import)
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: PLC0415

    return make_arg_parser(FlexibleArgumentParser())


def parse(parser: Any, args: list[str]) -> dict[str, Any] | None:
    """What vLLM's parser sets, or None when it refuses (argparse exits; vLLM's own rewriting
    raises on a dotted key without a value)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            parsed: dict[str, Any] = vars(parser.parse_args(args))
    except (SystemExit, ValueError, TypeError, IndexError):
        return None
    return parsed
