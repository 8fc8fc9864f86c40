"""The plugins never break the server they measure: the decode-path plugin finds
modules without importing them and instruments only where the model runner is imported; a failing
stat logger warns and stops measuring instead of raising into vLLM."""

import importlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kimi_kernels.decode_metrics import names
from kimi_kernels.decode_metrics.decode_path import OnImport, module_exists
from kimi_kernels.decode_metrics.stat_logger import KimiStatLogger
from tests.support.feed import record, served


@pytest.fixture
def packages(tmp_path: Path) -> Iterator[Path]:
    """`kimi_probe_pkg.heavy` (whose import raises) holding `leaf`; `kimi_probe_mod`."""
    heavy = tmp_path / "kimi_probe_pkg" / "heavy"
    heavy.mkdir(parents=True)
    (tmp_path / "kimi_probe_pkg" / "__init__.py").write_text("")
    (heavy / "__init__.py").write_text("raise RuntimeError('imported the heavy package')\n")
    (heavy / "leaf.py").write_text("")
    (tmp_path / "kimi_probe_mod.py").write_text("VALUE = 42\n")
    sys.path.insert(0, str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith(("kimi_probe_pkg", "kimi_probe_mod"))]:
        del sys.modules[name]


@pytest.mark.usefixtures("packages")
def test_module_exists_without_importing_its_parents() -> None:
    assert module_exists("kimi_probe_pkg.heavy.leaf")
    assert "kimi_probe_pkg.heavy" not in sys.modules
    assert not module_exists("kimi_probe_pkg.heavy.gone")
    assert not module_exists("kimi_probe_pkg.missing.leaf")
    assert not module_exists("kimi_probe_nothing.leaf")
    assert module_exists("vllm.models.kimi_k3.nvidia.specialized_decode.runtime.decode")


@pytest.mark.usefixtures("packages")
def test_on_import_runs_once_right_after_the_module() -> None:
    seen: list[int] = []
    hook = OnImport("kimi_probe_mod", lambda: seen.append(sys.modules["kimi_probe_mod"].VALUE))
    sys.meta_path.insert(0, hook)
    try:
        module = importlib.import_module("kimi_probe_mod")
        assert seen == [42]
        assert module.VALUE == 42
        assert hook not in sys.meta_path  # once
        importlib.reload(module)
        assert seen == [42]
    finally:
        if hook in sys.meta_path:
            sys.meta_path.remove(hook)


def test_stat_logger_that_cannot_start_warns_and_serves_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = SimpleNamespace(model_config=None)  # vLLM's config changed shape
    with caplog.at_level(logging.WARNING, logger="kimi_kernels"):
        plugin = KimiStatLogger(broken, [0], registry=CollectorRegistry())
        record(plugin, served([(10, 0.1, 0.5)]))
    assert plugin.failed
    assert "stat logger cannot create its metrics" in caplog.text


def test_stat_logger_that_cannot_read_stats_warns_once(
    vllm_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    plugin = KimiStatLogger(vllm_config, [0], registry=registry)
    changed = SimpleNamespace(
        time_to_first_tokens_iter=[], finished_requests=[SimpleNamespace(decode_time=1.0)]
    )
    with caplog.at_level(logging.WARNING, logger="kimi_kernels"):
        plugin.record(None, changed)
        plugin.record(None, changed)
        record(plugin, served([(10, 0.1, 0.5)]))
    assert caplog.text.count("stat logger cannot read vLLM's iteration stats") == 1
    count = f"{names.REQUEST_DECODE_TPS}_count"
    labels = {"model_name": "moonshotai/Kimi-K3", "decode_backend": "latency_specialized"}
    assert registry.get_sample_value(count, labels) == 0
