"""The development server refuses to serve in a behaviour the tests were not written for: what
vLLM's CPU build did to an MLA model on a machine without AMX (prefix caching and chunked prefill
off whatever the command line asked) made the same tests pass on one machine and fail on another.
And every process of it holds the AMX tiles the kernel offers from its start (issue 59).
"""

import os
import sys

import pytest

from kimi_operator.bench.results import ServedConfig
from kimi_operator.dev.cpu_vllm import (
    MLA_DISABLE,
    SITE,
    _settings_problem,
    attention_isa,
    environment,
)
from tests.support.amx_probe import run as amx_probe


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


def test_every_server_process_holds_the_amx_tiles_the_kernel_offers_from_its_start() -> None:
    """The server's environment gives each Python it starts the sitecustomize that asks for the
    tiles: its own process and a child spawned as vLLM spawns its engine core and workers hold
    them before running anything, where the kernel offers them (an AMX Xeon); elsewhere nothing
    is asked and nothing held (no machine-dependent path left to chance)."""
    report = amx_probe(sys.executable, environment(metrics_port=1, threads=1))
    for process in (report["process"], report["spawn"]):
        assert process["sitecustomize"] == str(SITE / "sitecustomize.py")
        assert process["permitted"] == process["offered"], report


def test_a_spawned_process_does_not_keep_its_parents_tiles() -> None:
    """The cause: the permission is inherited on fork and cleared on exec, and vLLM's CPU build
    spawns (fork + exec) its engine core and workers: whatever the API server held, a worker
    holds the tiles only if it asks itself. On a machine without AMX nothing is held at all."""
    without_site = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    report = amx_probe(sys.executable, without_site, "--ask")
    assert report["process"]["sitecustomize"] is None
    assert report["process"]["permitted"] == report["process"]["offered"]
    assert report["fork"]["permitted"] == report["process"]["permitted"]
    assert report["spawn"]["permitted"] is False


def test_the_server_keeps_a_pythonpath_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    path = environment(metrics_port=1, threads=1)["PYTHONPATH"].split(os.pathsep)
    assert path == [str(SITE), "/elsewhere"]
    monkeypatch.delenv("PYTHONPATH")
    assert environment(metrics_port=1, threads=1)["PYTHONPATH"] == str(SITE)


def test_the_attention_path_named_for_each_kind_of_cpu() -> None:
    """What pytest's header of `make test-vllm` names (tests/vllm/test_amx.py checks it against
    vLLM's own choice on the machine at hand)."""
    assert attention_isa({"AMX tiles": True, "AVX-512": True}) == "amx"
    assert attention_isa({"AMX tiles": False, "AVX-512": True}) == "vec"
    assert attention_isa({"AMX tiles": False, "AVX-512": False}) == "vec"
