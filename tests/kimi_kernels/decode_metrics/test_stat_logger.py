"""The stat-logger plugin against vLLM 0.33.0's real interfaces: its entry point, its base class,
its manager, and its stats objects."""

import importlib.metadata
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from vllm.v1.metrics.buckets import TIME_TO_FIRST_TOKEN_BUCKETS
from vllm.v1.metrics.loggers import (
    AggregateStatLoggerBase,
    StatLoggerBase,
    StatLoggerManager,
    load_stat_logger_plugin_factories,
)
from vllm.v1.metrics.stats import SchedulerStats

from kimi_kernels.decode_metrics import names, stat_logger
from kimi_kernels.decode_metrics.stat_logger import KimiStatLogger
from tests.kimi_kernels.decode_metrics.conftest import MODEL_NAME, TENSOR_PARALLEL
from tests.support.feed import record, served

LABELS = {"model_name": MODEL_NAME, "decode_backend": "latency_specialized"}


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, LABELS | labels)
    assert found is not None, f"{name} {labels} missing"
    return found


def test_vllm_loads_the_plugin_from_its_entry_point() -> None:
    assert KimiStatLogger in load_stat_logger_plugin_factories()
    assert issubclass(KimiStatLogger, StatLoggerBase)
    assert issubclass(KimiStatLogger, AggregateStatLoggerBase)


def test_through_vllms_manager(vllm_config: Any) -> None:
    """StatLoggerManager builds the plugin as vLLM's AsyncLLM does and forwards every record."""
    manager = StatLoggerManager(vllm_config, engine_idxs=[0], custom_stat_loggers=[KimiStatLogger])
    assert any(isinstance(logger, KimiStatLogger) for logger in manager.stat_loggers)
    before = REGISTRY.get_sample_value(f"{names.REQUEST_DECODE_TPS}_count", LABELS) or 0.0
    for stats in served([(101, 0.5, 2.0)]):
        manager.record(SchedulerStats(), stats, engine_idx=0)
    assert value(REGISTRY, f"{names.REQUEST_DECODE_TPS}_count") == before + 1
    manager.log_engine_initialized()


def test_decode_rate_excludes_prefill(vllm_config: Any) -> None:
    registry = CollectorRegistry()
    logger = KimiStatLogger(vllm_config, [0], registry=registry)
    # 101 tokens, 2 s from first to last: 100 decode tokens / 2 s = 50 tok/s; TTFT 0.5 s.
    # 843 tokens in 1 s: vLLM's 842 tok/s headline.
    record(logger, served([(101, 0.5, 2.0), (843, 0.25, 1.0)]))
    assert value(registry, f"{names.REQUEST_DECODE_TPS}_count") == 2
    assert value(registry, f"{names.REQUEST_DECODE_TPS}_sum") == pytest.approx(50 + 842)
    assert value(registry, f"{names.REQUEST_DECODE_TPS}_bucket", le="50.0") == 1
    assert value(registry, f"{names.REQUEST_DECODE_TPS}_bucket", le="800.0") == 1
    assert value(registry, f"{names.REQUEST_DECODE_TPS}_bucket", le="900.0") == 2
    assert value(registry, f"{names.REQUEST_TTFT}_count") == 2
    assert value(registry, f"{names.REQUEST_TTFT}_sum") == pytest.approx(0.75, abs=1e-6)


def test_ttft_is_vllms_own_interval_when_the_last_token_reaches_the_frontend_late(
    vllm_config: Any,
) -> None:
    """Regression: TTFT was the frontend's end-to-end latency less the engine core's decode time,
    two clocks apart; a last token that reached the frontend 0.3 s late made a 0.5 s TTFT 0.8 s
    (on a busy 2-CPU server the two disagreed by 13%). It is now the frontend's own arrival to
    first token, the value vLLM observes into `vllm:time_to_first_token_seconds`."""
    registry = CollectorRegistry()
    logger = KimiStatLogger(vllm_config, [0], registry=registry)
    record(logger, served([(101, 0.5, 2.0)], late_last_token=0.3))
    assert value(registry, f"{names.REQUEST_TTFT}_sum") == pytest.approx(0.5, abs=1e-6)
    assert value(registry, f"{names.REQUEST_DECODE_TPS}_sum") == pytest.approx(50)  # engine core's


def test_requests_without_decode_have_a_ttft_but_no_decode_rate(vllm_config: Any) -> None:
    registry = CollectorRegistry()
    logger = KimiStatLogger(vllm_config, [0], registry=registry)
    record(logger, served([(1, 0.5, 0.0), (5, 0.25, 0.0), (0, 0.1, 0.0)]))
    logger.record(SchedulerStats(), None)
    assert value(registry, f"{names.REQUEST_DECODE_TPS}_count") == 0
    # Every request with a first token, as vLLM counts them; the one without has no TTFT.
    assert value(registry, f"{names.REQUEST_TTFT}_count") == 2
    assert value(registry, f"{names.REQUEST_TTFT}_sum") == pytest.approx(0.75, abs=1e-6)


def test_build_info_and_gpus(vllm_config: Any) -> None:
    registry = CollectorRegistry()
    KimiStatLogger(vllm_config, [0], registry=registry)
    info = {
        "vllm_version": "0.33.0",
        "cutlass_dsl_version": stat_logger._version("nvidia-cutlass-dsl"),
        "gpu_name": "cpu",
    }
    assert value(registry, names.BUILD_INFO, **info) == 1
    assert value(registry, names.ENGINE_GPUS) == TENSOR_PARALLEL


def test_a_second_instance_replaces_the_first(vllm_config: Any) -> None:
    """vLLM may rebuild its loggers in one process: no duplicate-registration error."""
    registry = CollectorRegistry()
    record(KimiStatLogger(vllm_config, [0], registry=registry), served([(11, 0.1, 1.0)]))
    KimiStatLogger(vllm_config, [0], registry=registry)
    assert value(registry, f"{names.REQUEST_DECODE_TPS}_count") == 0


def test_missing_cutlass_dsl_and_gpu_name_failure(
    vllm_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm.platforms import current_platform  # noqa: PLC0415

    real_version = importlib.metadata.version

    def version(distribution: str) -> str:
        if distribution == "nvidia-cutlass-dsl":
            raise importlib.metadata.PackageNotFoundError(distribution)
        return real_version(distribution)

    def no_gpu(*_: object) -> str:
        raise RuntimeError("NVML: driver not loaded")

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(current_platform, "get_device_name", no_gpu)
    registry = CollectorRegistry()
    KimiStatLogger(vllm_config, [0], registry=registry)
    info = {"vllm_version": "0.33.0", "cutlass_dsl_version": "none", "gpu_name": "unknown"}
    assert value(registry, names.BUILD_INFO, **info) == 1


def test_decode_backend_defaults_to_auto() -> None:
    class Config:
        additional_config: dict[str, str] = {}  # noqa: RUF012

    assert stat_logger.decode_backend(Config()) == "auto"
    Config.additional_config = {"decode_backend": "latency_specialized"}
    assert stat_logger.decode_backend(Config()) == "latency_specialized"


def test_ttft_buckets_are_vllms() -> None:
    assert tuple(TIME_TO_FIRST_TOKEN_BUCKETS) == names.TTFT_BUCKETS


def test_scheduler_config_info_is_what_the_engine_runs(vllm_config: Any) -> None:
    """The settings after vLLM resolved them (a platform may change what the command line
    asked), read back from the configuration object vLLM hands the plugin."""
    registry = CollectorRegistry()
    KimiStatLogger(vllm_config, [0], registry=registry)
    scheduler = vllm_config.scheduler_config
    found = registry.get_sample_value(
        names.SCHEDULER_CONFIG_INFO,
        {
            "model_name": MODEL_NAME,
            "max_num_seqs": str(scheduler.max_num_seqs),
            "max_num_batched_tokens": str(scheduler.max_num_batched_tokens),
            "enable_chunked_prefill": str(scheduler.enable_chunked_prefill),
            "max_model_len": "512",  # the tiny model's max_position_embeddings
        },
    )
    assert found == 1
