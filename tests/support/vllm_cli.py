"""vLLM 0.33.0's real `vllm serve` parser (the wheel `make setup` installs), for the tests that hold
the snapshot of its options (api/vllm_flags.py) and our reading of engineArgs to it."""

import contextlib
import io
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
    pytest.importorskip("vllm", reason="vLLM 0.33.0 is installed by `make setup`")
    from vllm.entrypoints.common.cli_args import make_arg_parser  # noqa: PLC0415 (slow import)
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: PLC0415

    parser = make_arg_parser(FlexibleArgumentParser())
    # A refusal's usage line, argparse's own (one line of every one of vLLM's ~400 options), is
    # what `parse` throws away: given one, argparse prints it as it is (the six files that use this
    # parser: 28 s of CPU before, 18-21 s after). What the parser accepts and refuses is unchanged.
    parser.usage = "vllm serve [model_tag] [options]"
    return parser


def parse(parser: Any, args: list[str]) -> dict[str, Any] | None:
    """What vLLM's parser sets, or None when vLLM refuses the arguments as `vllm serve` does: an
    argparse usage error, exit status 2. Anything else it raises propagates: a crash of the parser
    (a TypeError on an odd value) is no refusal, and counting it as one would skip the case."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            parsed: dict[str, Any] = vars(parser.parse_args(args))
    except SystemExit as refused:
        if refused.code != 2:
            raise
        return None
    return parsed


def stops_at_start(parser: Any, args: list[str]) -> bool:
    """Whether `vllm serve` stops before serving: its usage error, or a crash of its own rewriting
    of the arguments (an IndexError on a dotted key without a value), which our validation must
    refuse as well. For verdicts only, not for hunting bypasses: a crash on one value says
    nothing of another (`parse`)."""
    try:
        return parse(parser, args) is None
    except (ValueError, TypeError, IndexError):
        return True
