"""The decode-path plugin against vLLM 0.33.0's real classes: it finds and wraps them, counts what
the real planner decides, and never breaks serving when the internals differ."""

import logging
import socket
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from prometheus_client import CollectorRegistry
from vllm.config import CUDAGraphMode
from vllm.forward_context import set_forward_context
from vllm.models.kimi_k3.nvidia.specialized_decode.runtime.decode import SpecializedDecode
from vllm.plugins import load_plugins_by_group
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor, CudaGraphManager
from vllm.v1.worker.gpu.model_runner import GPUModelRunner

from kimi_kernels.decode_metrics import decode_path, names
from kimi_kernels.decode_metrics.decode_path import DecodePathRecorder, Mismatch
from tests.kimi_kernels.decode_metrics.conftest import MODEL_NAME

BACKEND = "latency_specialized"
GRAPHS = "vllm.v1.worker.gpu.cudagraph_utils"


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The CUDA stream as the planner sees it on a GPU; `capturing` as CudaGraphManager sets it."""
    state = SimpleNamespace(capturing=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: state.capturing)
    return state


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> DecodePathRecorder:
    fresh = DecodePathRecorder(CollectorRegistry())
    monkeypatch.setattr(decode_path, "RECORDER", fresh)
    return fresh


@pytest.fixture
def registered(recorder: DecodePathRecorder) -> DecodePathRecorder:
    decode_path.register()
    assert not recorder.failed
    return recorder


@pytest.fixture
def counting(
    registered: DecodePathRecorder, vllm_config: Any, stream: SimpleNamespace
) -> Iterator[DecodePathRecorder]:
    """TP rank 0 inside a real step, on a GPU."""
    assert not stream.capturing
    registered.on_runner(vllm_config, tp_rank=0, local_rank=1)
    token = registered.in_step.set(True)
    yield registered
    registered.in_step.reset(token)


def steps(recorder: DecodePathRecorder, path: str, reason: str) -> float:
    labels = {"model_name": MODEL_NAME, "decode_backend": BACKEND, "path": path, "reason": reason}
    found = recorder.registry.get_sample_value(f"{names.DECODE_STEPS}_total", labels)
    return found if found is not None else 0.0


def decode(batches: tuple[int, ...] = (*range(1, 9), 16, 32, 64)) -> Any:
    """A SpecializedDecode without a model: the planner only reads these attributes."""
    instance = object.__new__(SpecializedDecode)
    instance.batches, instance.q, instance.layers, instance.rank = batches, 1, (), 0
    return instance


def metadata(prefills: int = 0, decodes: int = 0, spec: int = 0) -> dict[str, Any]:
    row = SimpleNamespace(num_prefills=prefills, num_decodes=decodes, num_spec_decodes=spec)
    return {"model.layers.0.self_attn": row}


def plan(
    vllm_config: Any, tokens: int, mode: CUDAGraphMode, rows: dict[str, Any], **kw: Any
) -> Any:
    with set_forward_context(rows, vllm_config, cudagraph_runtime_mode=mode):
        return decode().plan(torch.arange(tokens), kw.get("intermediate_tensors"))


def test_vllm_loads_the_general_plugin() -> None:
    assert load_plugins_by_group("vllm.general_plugins")["kimi_decode_path"] is decode_path.register


def test_register_wraps_the_real_classes_once(registered: DecodePathRecorder) -> None:
    assert registered.registry.get_sample_value(names.DECODE_PATH_INSTRUMENTED) == 1
    wrapped = (SpecializedDecode.plan, GPUModelRunner.execute_model, CudaGraphManager.run_fullgraph)
    for method in (*wrapped, GPUModelRunner.__init__, CudaGraphManager._capture_stream):
        assert getattr(method, "__kimi_decode_path__", False)
    decode_path.register()  # vLLM loads plugins once per process, but may in several processes
    assert (SpecializedDecode.plan, GPUModelRunner.execute_model) == wrapped[:2]
    assert SpecializedDecode.plan.__wrapped__.__name__ == "plan"
    assert not hasattr(SpecializedDecode.plan.__wrapped__, "__wrapped__")


def test_capture_then_replay_counts_specialized_and_fallback(
    counting: DecodePathRecorder,
    vllm_config: Any,
    stream: SimpleNamespace,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(f"{GRAPHS}.current_stream", lambda: "capture stream")
    manager = object.__new__(CudaGraphManager)
    manager.ubatch_runner = None
    descs = {
        n: BatchExecutionDescriptor(cg_mode=CUDAGraphMode.FULL, num_tokens=n, num_reqs=n)
        for n in (8, 128)
    }
    # Capture, as CudaGraphManager.capture does it: the stream for the graph, then the forward.
    stream.capturing = True
    assert manager._capture_stream(descs[8]) == "capture stream"
    assert plan(vllm_config, 8, CUDAGraphMode.NONE, metadata(decodes=8)) is not None
    manager._capture_stream(descs[128])
    assert plan(vllm_config, 128, CUDAGraphMode.NONE, metadata(decodes=128)) is None
    stream.capturing = False
    assert counting.captured == {
        descs[8]: (names.PATH_SPECIALIZED, names.REASON_NONE),
        descs[128]: (names.PATH_FALLBACK, names.REASON_BATCH_TOO_LARGE),
    }
    # Replay through the real run_fullgraph.
    replays: list[int] = []
    manager.graphs = {
        d: SimpleNamespace(replay=lambda n=n: replays.append(n)) for n, d in descs.items()
    }
    for n in (8, 8, 8, 128):
        manager.run_fullgraph(descs[n])
    assert replays == [8, 8, 8, 128]
    assert steps(counting, names.PATH_SPECIALIZED, names.REASON_NONE) == 3
    assert steps(counting, names.PATH_FALLBACK, names.REASON_BATCH_TOO_LARGE) == 1
    # A graph captured before the plugin knew it (none here) is not counted.
    other = BatchExecutionDescriptor(cg_mode=CUDAGraphMode.FULL, num_tokens=8, num_reqs=1)
    manager.graphs[other] = SimpleNamespace(replay=lambda: replays.append(0))
    manager.run_fullgraph(other)
    assert steps(counting, names.PATH_SPECIALIZED, names.REASON_NONE) == 3


@pytest.mark.parametrize(
    ("tokens", "mode", "rows", "reason"),
    [
        (512, CUDAGraphMode.PIECEWISE, metadata(prefills=2), names.REASON_PREFILL),
        (40, CUDAGraphMode.PIECEWISE, metadata(prefills=1, decodes=8), names.REASON_MIXED_BATCH),
        (16, CUDAGraphMode.NONE, metadata(decodes=4, spec=4), names.REASON_MIXED_BATCH),
        (96, CUDAGraphMode.NONE, metadata(decodes=96), names.REASON_BATCH_TOO_LARGE),
        (12, CUDAGraphMode.NONE, metadata(decodes=12), names.REASON_BATCH_NOT_PREPARED),
        (8, CUDAGraphMode.PIECEWISE, metadata(decodes=8), names.REASON_PIECEWISE_GRAPHS),
        (8, CUDAGraphMode.NONE, metadata(decodes=8), names.REASON_OUTSIDE_CUDA_GRAPHS),
    ],
)
def test_eager_and_piecewise_steps_count_as_fallback_with_the_reason(
    counting: DecodePathRecorder,
    vllm_config: Any,
    *,
    tokens: int,
    mode: CUDAGraphMode,
    rows: dict[str, Any],
    reason: str,
) -> None:
    assert plan(vllm_config, tokens, mode, rows) is None
    assert steps(counting, names.PATH_FALLBACK, reason) == 1
    total = sum(steps(counting, names.PATH_FALLBACK, r) for r in names.FALLBACK_REASONS)
    assert total == 1
    assert counting.captured == {}


def test_verify_step_across_mla_and_kda_layers_is_not_mixed(
    counting: DecodePathRecorder, vllm_config: Any
) -> None:
    """A uniform verify step: MLA metadata counts it in num_decodes, KDA in num_spec_decodes."""
    rows = {
        "model.layers.0.self_attn": SimpleNamespace(num_prefills=0, num_decodes=4),
        "model.layers.1.self_attn": SimpleNamespace(
            num_prefills=0, num_decodes=0, num_spec_decodes=4
        ),
    }
    assert plan(vllm_config, 32, CUDAGraphMode.NONE, rows) is None
    assert steps(counting, names.PATH_FALLBACK, names.REASON_OUTSIDE_CUDA_GRAPHS) == 1


def test_pipeline_stage_inputs(counting: DecodePathRecorder, vllm_config: Any) -> None:
    rows = metadata(decodes=8)
    assert plan(vllm_config, 8, CUDAGraphMode.NONE, rows, intermediate_tensors=object()) is None
    assert steps(counting, names.PATH_FALLBACK, names.REASON_PIPELINE_STAGE) == 1


@pytest.mark.usefixtures("stream")
def test_only_real_steps_on_tp_rank_0_count(
    registered: DecodePathRecorder, vllm_config: Any
) -> None:
    registered.on_runner(vllm_config, tp_rank=3, local_rank=3)
    token = registered.in_step.set(True)
    plan(vllm_config, 8, CUDAGraphMode.NONE, metadata(decodes=8))
    registered.in_step.reset(token)
    assert steps(registered, names.PATH_FALLBACK, names.REASON_OUTSIDE_CUDA_GRAPHS) == 0
    registered.on_runner(vllm_config, tp_rank=0, local_rank=0)
    plan(vllm_config, 8, CUDAGraphMode.NONE, metadata(decodes=8))  # profiling: not in a step
    assert steps(registered, names.PATH_FALLBACK, names.REASON_OUTSIDE_CUDA_GRAPHS) == 0
    # Rank 0 exports every series from the start, at 0.
    exported = {
        s.labels["reason"]
        for family in registered.registry.collect()
        for s in family.samples
        if s.name == f"{names.DECODE_STEPS}_total"
    }
    assert exported == {names.REASON_NONE, *names.FALLBACK_REASONS}


def test_execute_model_marks_real_steps_only(registered: DecodePathRecorder) -> None:
    seen: list[bool] = []

    def execute_model(*_: object, **__: object) -> str:
        seen.append(registered.in_step.get())
        return "output"

    wrapped = decode_path._wrap_execute_model(execute_model)
    assert wrapped(None, "sched") == "output"
    wrapped(None, "sched", None, True)
    wrapped(None, "sched", dummy_run=True)
    wrapped(None, "sched", dummy_run=False)
    assert seen == [True, False, False, True]
    assert registered.in_step.get() is False


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        body: str = response.read().decode()
        return body


def test_first_worker_of_the_pod_serves_the_counters(
    registered: DecodePathRecorder, vllm_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(names.METRICS_PORT_ENV, "0")  # the server binds a free port itself
    monkeypatch.setenv(names.METRICS_ADDR_ENV, "127.0.0.1")
    registered.on_runner(vllm_config, tp_rank=4, local_rank=0)  # a worker pod's first GPU
    assert registered.server is not None
    port = registered.server.server_address[1]
    try:
        body = scrape(port)
        assert "kimi_decode_path_instrumented 1.0" in body
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
    finally:
        registered.server.shutdown()
        registered.server.server_close()


def test_port_taken_does_not_break_serving(
    recorder: DecodePathRecorder, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setenv(names.METRICS_PORT_ENV, str(taken.getsockname()[1]))
        monkeypatch.setenv(names.METRICS_ADDR_ENV, "127.0.0.1")
        with caplog.at_level(logging.INFO, logger=decode_path.__name__):
            recorder.start_server()
    assert recorder.server is None
    assert "not serving metrics" in caplog.text


def test_no_port_no_server(recorder: DecodePathRecorder, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside the operator's pods ($KIMI_METRICS_PORT unset) nothing listens."""
    monkeypatch.delenv(names.METRICS_PORT_ENV, raising=False)
    recorder.start_server()
    assert recorder.server is None


def test_missing_specialized_decode_module(
    recorder: DecodePathRecorder, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(names.METRICS_PORT_ENV, "0")  # the server binds a free port itself
    monkeypatch.setenv(names.METRICS_ADDR_ENV, "127.0.0.1")
    gone = ("vllm.models.kimi_k3.nvidia.specialized_decode.runtime.gone", "SpecializedDecode")
    monkeypatch.setattr(decode_path, "TARGETS", ((*gone, "plan", ("self",)),))
    with caplog.at_level(logging.WARNING, logger=decode_path.__name__):
        decode_path.register()
        decode_path.register()
    assert caplog.text.count("decode path not instrumented") == 1
    assert recorder.server is not None
    try:
        assert "kimi_decode_path_instrumented 0.0" in scrape(recorder.server.server_address[1])
    finally:
        recorder.server.shutdown()
        recorder.server.server_close()


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (("vllm.v1.worker.gpu.model_runner", "GPUModelRunner", "run", ("self",)), "missing"),
        (
            (
                "vllm.v1.worker.gpu.cudagraph_utils",
                "CudaGraphManager",
                "run_fullgraph",
                ("self", "batch"),
            ),
            "is not CudaGraphManager.run_fullgraph('self', 'batch')",
        ),
    ],
)
def test_changed_internals_are_a_mismatch(
    monkeypatch: pytest.MonkeyPatch, target: tuple[Any, ...], message: str
) -> None:
    monkeypatch.setattr(decode_path, "TARGETS", (target,))
    with pytest.raises(Mismatch, match=message.replace("(", r"\(").replace(")", r"\)")):
        decode_path.find_targets()


def test_a_failing_hook_disables_counting_not_the_step(
    counting: DecodePathRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    manager = object.__new__(CudaGraphManager)
    desc = BatchExecutionDescriptor(cg_mode=CUDAGraphMode.FULL, num_tokens=8, num_reqs=8)
    counting.captured[desc] = (names.PATH_SPECIALIZED, names.REASON_NONE)
    manager.graphs = {desc: SimpleNamespace(replay=lambda: None)}
    changed = SimpleNamespace(cg_mode=CUDAGraphMode.FULL)  # internals changed: unhashable
    with (
        caplog.at_level(logging.WARNING, logger=decode_path.__name__),
        pytest.raises(TypeError, match="unhashable"),
    ):
        manager.run_fullgraph(changed)  # the original raises on its own, as without the plugin
    assert counting.failed
    assert counting.registry.get_sample_value(names.DECODE_PATH_INSTRUMENTED) == 0
    assert "decode path not instrumented" in caplog.text
    manager.run_fullgraph(desc)  # steps go on, uncounted
    assert steps(counting, names.PATH_SPECIALIZED, names.REASON_NONE) == 0


def test_runner_without_distributed_state_gives_up(recorder: DecodePathRecorder) -> None:
    """The model runner's __init__ wrapper: no TP group (internals differ) -> instrumented 0."""
    built: list[object] = []

    def init(_: object, vllm_config: object, *__: object) -> None:
        built.append(vllm_config)

    decode_path._wrap_runner_init(init)(object(), "config", "cpu")
    assert built == ["config"]
    assert recorder.failed
    assert recorder.registry.get_sample_value(names.DECODE_PATH_INSTRUMENTED) == 0
