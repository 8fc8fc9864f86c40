"""The development server refuses to serve in a behaviour the tests were not written for: what
vLLM's CPU build did to an MLA model on a machine without AMX (prefix caching and chunked prefill
off whatever the command line asked) made the same tests pass on one machine and fail on another.
"""

import pytest

from kimi_operator.bench.results import ServedConfig
from kimi_operator.dev.cpu_vllm import MLA_DISABLE, _settings_problem, environment


def test_what_the_cpu_build_does_to_mla_without_amx_is_refused_naming_what_is_off() -> None:
    without_amx = ServedConfig(enable_prefix_caching=False, enable_chunked_prefill=False)
    assert _settings_problem(without_amx) == "it runs with prefix caching and chunked prefill off"
    assert _settings_problem(ServedConfig(enable_prefix_caching=True)) == (
        "it runs with chunked prefill off"
    )
    assert _settings_problem(None) == (
        "it reported no settings (kimi_scheduler_config_info, vllm:cache_config_info)"
    )


def test_the_expected_behaviour_is_accepted() -> None:
    served = ServedConfig(enable_prefix_caching=True, enable_chunked_prefill=True)
    assert _settings_problem(served) is None


def test_the_server_is_served_without_mla_whatever_the_callers_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The one switch that gives every CPU the same path: a shell that set it otherwise does not
    bring the machine-dependent behaviour back."""
    monkeypatch.setenv(MLA_DISABLE, "0")
    assert environment(metrics_port=1, threads=1)[MLA_DISABLE] == "1"
