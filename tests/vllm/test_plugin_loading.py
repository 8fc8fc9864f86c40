"""vLLM 0.32.0's CPU build (no Kimi K3 module) loads both plugins through its own loaders: the
decode-path plugin warns once, reports itself not instrumented, and imports nothing heavy."""

from kimi_operator.dev.cpu_vllm import PYTHON
from tests.support.plugins import STAT_LOGGER, probe
from tests.vllm.conftest import require_cpu_vllm


def test_without_the_kimi_k3_module_a_warning_not_a_failure() -> None:
    require_cpu_vllm()
    report = probe(str(PYTHON))
    assert report["vllm"] == "0.32.0"
    assert report["stat_loggers"] == [STAT_LOGGER]
    assert report["imported_by_loading"] == []
    assert report["gave_up"] is True
    assert report["instrumented"] == 0.0
    assert report["log"] == [
        "WARNING: kimi_kernels: decode path not instrumented: vLLM 0.32.0 has no "
        "vllm.models.kimi_k3.nvidia.specialized_decode.runtime.decode"
    ]
