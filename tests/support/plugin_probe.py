"""Loads the kimi_kernels plugins through vLLM's own loaders in a fresh interpreter, as vLLM does
in each process it starts, and prints what happened as JSON. Run by
tests/kimi_kernels/decode_metrics/test_plugin_loading.py (vLLM 0.33.0, with the Kimi K3 module) and
tests/vllm/test_plugin_loading.py (0.32.0 CPU, without), each with its own venv's Python:
`python plugin_probe.py [--import-runner]`.
"""

import json
import logging
import sys

HEAVY = ("numba", "llvmlite")


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.levelname}: {record.getMessage()}")


def main() -> None:
    kept = Kept()
    logging.getLogger("kimi_kernels").addHandler(kept)
    logging.getLogger("kimi_kernels").setLevel(logging.INFO)
    from vllm.plugins import load_general_plugins  # noqa: PLC0415
    from vllm.v1.metrics.loggers import load_stat_logger_plugin_factories  # noqa: PLC0415

    import vllm  # noqa: PLC0415

    load_general_plugins()
    from kimi_kernels.decode_metrics import decode_path  # noqa: PLC0415

    modules = (*HEAVY, decode_path.DECODE_MODULE, decode_path.RUNNER_MODULE)
    report = {
        "vllm": vllm.__version__,
        "imported_by_loading": sorted(m for m in modules if m in sys.modules),
        "gave_up": decode_path.RECORDER.failed,
        "instrumented": decode_path.RECORDER.registry.get_sample_value(
            "kimi_decode_path_instrumented"
        ),
        "stat_loggers": [
            f"{c.__module__}.{c.__qualname__}" for c in load_stat_logger_plugin_factories()
        ],
    }
    if "--import-runner" in sys.argv:  # what the process that runs the model does next
        runner = __import__(decode_path.RUNNER_MODULE, fromlist=["GPUModelRunner"])
        report["instrumented_with_runner"] = decode_path.RECORDER.registry.get_sample_value(
            "kimi_decode_path_instrumented"
        )
        report["runner_wrapped"] = bool(
            getattr(runner.GPUModelRunner.execute_model, "__kimi_decode_path__", False)
        )
    report["log"] = kept.messages
    print(json.dumps(report))


if __name__ == "__main__":
    main()
