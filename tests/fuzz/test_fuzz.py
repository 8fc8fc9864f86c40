"""Random specs and random YAML through the validator and `kimi-operator validate|render`: no
crash, no traceback, every rejection names a field, every accepted spec renders shell-free,
unprivileged pods; disguised flags never reach a forbidden vLLM setting."""

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.harness import check_text, check_value
from tests.fuzz.strategies import ENGINE_ARGS, YAML_BYTES, documents, smuggled_flags
from tests.support.engine_args import refused_engine_args
from tests.support.fuzzing import examples
from tests.support.vllm_cli import FORBIDDEN_DESTS
from tests.support.vllm_cli import parse as _parse

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)

FUZZ = settings(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@settings(FUZZ, max_examples=examples(300))
@given(doc=documents())
def test_validator_on_random_documents(doc: Any) -> None:
    outcome = check_value(doc)
    assert outcome.verdict != "crash", outcome.bad
    assert outcome.bad == []


@settings(FUZZ, max_examples=examples(150))
@given(data=YAML_BYTES)
def test_cli_on_random_files(data: bytes) -> None:
    outcome = check_text(data)
    assert outcome.verdict != "crash", outcome.bad
    assert not outcome.traceback
    assert outcome.bad == []


@settings(FUZZ, max_examples=examples(300))
@given(args=st.lists(smuggled_flags(), min_size=1, max_size=3) | ENGINE_ARGS)
def test_disguised_flags_are_refused_or_harmless_to_vllm(vllm_parser: Any, args: list[str]) -> None:
    """Whatever we accept, vLLM 0.33.0's real parser either refuses or reads as no forbidden
    setting (e.g. `--ENABLE-LORA` is unknown to it: accepted here, refused by vLLM at start)."""
    if refused_engine_args(args):
        return
    defaults = _parse(vllm_parser, ["m"])
    parsed = _parse(vllm_parser, ["m", *args])
    assert defaults is not None
    if parsed is not None:
        changed = {k for k, v in parsed.items() if v != defaults.get(k)}
        assert not changed & FORBIDDEN_DESTS, args
