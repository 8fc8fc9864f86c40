"""General plugin: counts model steps by decode path, `kimi_decode_steps_total{path, reason}`.

How vLLM 0.33.0 runs Kimi K3's specialized decode (read from the wheel): the model's forward asks
`SpecializedDecode.plan(positions, intermediate_tensors)` for a plan; the planner only says yes
while a FULL CUDA graph is being captured, so the fast path runs exactly when the V2 model runner
replays a FULL graph that was captured with a plan (`CudaGraphManager.run_fullgraph`). Every other
step calls the forward, where the planner says no (and gives no reason). So the plugin:

- wraps `CudaGraphManager._capture_stream`, called with each graph's batch descriptor right before
  its capture, to know which FULL graph is being captured;
- wraps `plan`: at capture, remembers per FULL graph whether the plan was taken; at run time
  (eager and PIECEWISE steps), counts a fallback step with the reason it classifies;
- wraps `run_fullgraph`: counts the replay as specialized or fallback from what capture recorded;
- wraps `GPUModelRunner.execute_model` to count real steps only (not profiling, warmup, capture)
  and `GPUModelRunner.__init__` to learn the model, the backend and the ranks.

vLLM calls `register` in every process it starts (API server, engine core, workers). It imports
nothing heavy there: it checks that the modules exist without importing them (a vLLM without Kimi
K3, such as the CPU build, has none) and wraps the classes only in the process that imports the
model runner, i.e. the one that runs the model; importing the Kimi K3 modules elsewhere pulls
numba/llvmlite into processes that then fail to start.

Only TP rank 0 counts (every rank takes the same path). The first GPU worker of every pod serves
the counters in text format on `$KIMI_METRICS_PORT`, bound to `$KIMI_METRICS_ADDR` (default: every
address, as a pod's port must be reachable by Prometheus; set 127.0.0.1 outside a pod). When
vLLM's internals differ from the above, or anything in the plugin fails, serving goes on untouched:
one warning, and `kimi_decode_path_instrumented 0` (served by the first process that gives up).
"""

import functools
import importlib
import importlib.abc
import importlib.machinery
import inspect
import logging
import os
import sys
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from types import ModuleType
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from kimi_kernels.decode_metrics import names
from kimi_kernels.decode_metrics.exporter import serve
from kimi_kernels.decode_metrics.stat_logger import decode_backend

logger = logging.getLogger(__name__)

DECODE_MODULE = "vllm.models.kimi_k3.nvidia.specialized_decode.runtime.decode"
RUNNER_MODULE = "vllm.v1.worker.gpu.model_runner"
GRAPHS_MODULE = "vllm.v1.worker.gpu.cudagraph_utils"
# (module, class, method, leading parameter names the wrapper relies on)
TARGETS = (
    (DECODE_MODULE, "SpecializedDecode", "plan", ("self", "positions", "intermediate_tensors")),
    (RUNNER_MODULE, "GPUModelRunner", "__init__", ("self", "vllm_config")),
    (
        RUNNER_MODULE,
        "GPUModelRunner",
        "execute_model",
        ("self", "scheduler_output", "intermediate_tensors", "dummy_run"),
    ),
    (GRAPHS_MODULE, "CudaGraphManager", "run_fullgraph", ("self", "desc")),
    (GRAPHS_MODULE, "CudaGraphManager", "_capture_stream", ("self", "desc")),
)
_WRAPPED = "__kimi_decode_path__"


class Mismatch(Exception):
    """vLLM's internals are not the ones this plugin instruments."""


class DecodePathRecorder:
    """The counters and what the wrappers learned; one per process."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.steps = Counter(
            names.DECODE_STEPS,
            "Model steps by decode path: specialized (Kimi K3 CuTe DSL decode) or fallback (stock "
            "forward), with the reason of the fallback.",
            list(names.DECODE_STEP_LABELS),
            registry=registry,
        )
        self.instrumented = Gauge(
            names.DECODE_PATH_INSTRUMENTED,
            "1 when this vLLM's decode path is instrumented; 0 when its internals differ from "
            "what kimi_kernels expects (kimi_decode_steps_total is then missing).",
            registry=registry,
        )
        self.in_step: ContextVar[bool] = ContextVar("kimi_in_step", default=False)
        self.capturing: Any = None  # the batch descriptor of the graph being captured
        self.captured: dict[Any, tuple[str, str]] = {}  # FULL graph descriptor -> (path, reason)
        self.labels = ("", "auto")  # model_name, decode_backend
        self.counting = False  # TP rank 0 of a model runner
        self.failed = False
        self.server: Any = None

    def give_up(self, message: str) -> None:
        if not self.failed:
            logger.warning("kimi_kernels: decode path not instrumented: %s", message)
        self.failed = True
        self.counting = False
        self.instrumented.set(0)

    def guard(self, action: Callable[[], None]) -> None:
        """Runs `action`; an exception disables the instrumentation instead of the step."""
        if self.failed:
            return
        try:
            action()
        except Exception as error:  # never break serving over a metric
            logger.debug("kimi_kernels: decode path hook failed", exc_info=True)
            self.give_up(f"{type(error).__name__}: {error}")

    def count(self, path: str, reason: str) -> None:
        self.steps.labels(*self.labels, path, reason).inc()

    def on_runner(self, vllm_config: Any, tp_rank: int, local_rank: int) -> None:
        self.labels = (str(vllm_config.model_config.served_model_name), decode_backend(vllm_config))
        self.counting = tp_rank == 0
        if self.counting:  # every series exists from the start: rates of 0, not "no data"
            self.steps.labels(*self.labels, names.PATH_SPECIALIZED, names.REASON_NONE)
            for reason in names.FALLBACK_REASONS:
                self.steps.labels(*self.labels, names.PATH_FALLBACK, reason)
        if local_rank == 0:
            self.start_server()

    def start_server(self) -> None:
        port = os.environ.get(names.METRICS_PORT_ENV)
        if self.server is not None or not port:
            return
        address = os.environ.get(names.METRICS_ADDR_ENV, "")
        try:
            self.server = serve(self.registry, address, int(port))
        except OSError as error:
            logger.info("kimi_kernels: not serving metrics on port %s: %s", port, error)

    def on_plan(self, decode: Any, positions: Any, intermediate_tensors: Any, step: Any) -> None:
        import torch  # noqa: PLC0415 (present wherever vLLM runs)

        tokens = int(positions.shape[0])
        capturing = torch.cuda.is_available() and bool(torch.cuda.is_current_stream_capturing())
        if step is not None:
            outcome = (names.PATH_SPECIALIZED, names.REASON_NONE)
        else:
            reason = classify(decode, tokens, intermediate_tensors, capturing)
            outcome = (names.PATH_FALLBACK, reason)
        if capturing:
            self.captured[self.capturing] = outcome
        elif self.counting and self.in_step.get():
            self.count(*outcome)

    def on_full_replay(self, desc: Any) -> None:
        outcome = self.captured.get(desc)
        if outcome is not None and self.counting and self.in_step.get():
            self.count(*outcome)


def classify(decode: Any, tokens: int, intermediate_tensors: Any, capturing: bool) -> str:
    """Why the planner said no: the first that applies of the cases its docstring lists, batch
    contents first (they say the most to an operator)."""
    from vllm.config import CUDAGraphMode  # noqa: PLC0415
    from vllm.forward_context import (  # noqa: PLC0415
        get_forward_context,
        is_forward_context_available,
    )

    if intermediate_tensors is not None:
        return names.REASON_PIPELINE_STAGE
    context = get_forward_context() if is_forward_context_available() else None
    by_layer = context.attn_metadata if context is not None else None
    rows = list(by_layer.values()) if isinstance(by_layer, dict) else []
    # Per layer's metadata: MLA rows count every decode in num_decodes, KDA rows split plain
    # decodes (num_decodes) from verify rows (num_spec_decodes), as the planner reads them.
    decodes = [(getattr(md, "num_decodes", 0), getattr(md, "num_spec_decodes", 0)) for md in rows]
    prefills = [getattr(md, "num_prefills", 0) for md in rows]
    if any(prefills):
        mixed = any(p and (d or v) for p, (d, v) in zip(prefills, decodes, strict=True))
        return names.REASON_MIXED_BATCH if mixed else names.REASON_PREFILL
    if any(d and v for d, v in decodes):
        return names.REASON_MIXED_BATCH
    if tokens > max(decode.batches):
        return names.REASON_BATCH_TOO_LARGE
    if tokens not in decode.batches:
        return names.REASON_BATCH_NOT_PREPARED
    if context is not None and context.cudagraph_runtime_mode == CUDAGraphMode.PIECEWISE:
        return names.REASON_PIECEWISE_GRAPHS
    if not capturing:
        return names.REASON_OUTSIDE_CUDA_GRAPHS
    return names.REASON_MIXED_BATCH  # captured, yet not a uniform decode / verify batch


RECORDER = DecodePathRecorder(CollectorRegistry())


def find_targets() -> dict[tuple[str, str], Callable[..., Any]]:
    """The methods to wrap, by (class, method); raises Mismatch when one is missing or its
    parameters are not the expected ones."""
    found: dict[tuple[str, str], Callable[..., Any]] = {}
    for module_name, class_name, method, params in TARGETS:
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise Mismatch(f"cannot import {module_name}: {error}") from error
        owner = getattr(module, class_name, None)
        function = getattr(owner, method, None)
        if owner is None or not callable(function):
            raise Mismatch(f"{module_name}.{class_name}.{method} is missing")
        actual = tuple(inspect.signature(function).parameters)[: len(params)]
        if actual != params:
            raise Mismatch(f"{class_name}.{method}{actual} is not {class_name}.{method}{params}")
        found[class_name, method] = function
    return found


def _wrap_plan(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def plan(self: Any, positions: Any, intermediate_tensors: Any) -> Any:
        step = original(self, positions, intermediate_tensors)
        RECORDER.guard(lambda: RECORDER.on_plan(self, positions, intermediate_tensors, step))
        return step

    return plan


def _wrap_runner_init(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def __init__(self: Any, vllm_config: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        original(self, vllm_config, *args, **kwargs)

        def learn() -> None:
            from vllm.distributed.parallel_state import get_tp_group  # noqa: PLC0415

            group = get_tp_group()
            RECORDER.on_runner(vllm_config, group.rank_in_group, group.local_rank)

        RECORDER.guard(learn)

    return __init__


def _wrap_execute_model(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        dummy = kwargs.get("dummy_run", args[1] if len(args) > 1 else False)
        token = RECORDER.in_step.set(not dummy)
        try:
            return original(self, scheduler_output, *args, **kwargs)
        finally:
            RECORDER.in_step.reset(token)

    return execute_model


def _wrap_run_fullgraph(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def run_fullgraph(self: Any, desc: Any) -> Any:
        RECORDER.guard(lambda: RECORDER.on_full_replay(desc))
        return original(self, desc)

    return run_fullgraph


def _wrap_capture_stream(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _capture_stream(self: Any, desc: Any) -> Any:
        RECORDER.capturing = desc
        return original(self, desc)

    return _capture_stream


WRAPPERS = {
    ("SpecializedDecode", "plan"): _wrap_plan,
    ("GPUModelRunner", "__init__"): _wrap_runner_init,
    ("GPUModelRunner", "execute_model"): _wrap_execute_model,
    ("CudaGraphManager", "run_fullgraph"): _wrap_run_fullgraph,
    ("CudaGraphManager", "_capture_stream"): _wrap_capture_stream,
}


def instrument(targets: dict[tuple[str, str], Callable[..., Any]], owners: dict[str, type]) -> None:
    """Wraps each target method on its owner class, once (plugins load more than once)."""
    for (class_name, method), function in targets.items():
        if getattr(function, _WRAPPED, False):
            continue
        wrapped = WRAPPERS[class_name, method](function)
        setattr(wrapped, _WRAPPED, True)
        setattr(owners[class_name], method, wrapped)


def module_exists(name: str) -> bool:
    """Whether module `name` can be imported, found without importing it or its parent packages
    (`importlib.util.find_spec` would import the parents, and their imports)."""
    head, *rest = name.split(".")
    spec = importlib.machinery.PathFinder.find_spec(head) if head not in sys.modules else None
    locations = getattr(sys.modules.get(head), "__path__", None) or (
        spec.submodule_search_locations if spec is not None else None
    )
    found = head
    for part in rest:
        if locations is None:
            return False
        found = f"{found}.{part}"
        loaded = sys.modules.get(found)
        if loaded is not None:
            locations = getattr(loaded, "__path__", None)
            continue
        spec = importlib.machinery.PathFinder.find_spec(found, list(locations))
        if spec is None:
            return False
        locations = spec.submodule_search_locations
    return True


class _Then(importlib.abc.Loader):
    """A module's own loader, then a callback once the module has run."""

    def __init__(self, loader: importlib.abc.Loader, then: Callable[[], None]) -> None:
        self.loader = loader
        self.then = then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.then()

    def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader, ...
        return getattr(self.loader, name)


class OnImport(importlib.abc.MetaPathFinder):
    """Calls `then` right after `module` is imported, in whichever process imports it (once)."""

    def __init__(self, module: str, then: Callable[[], None]) -> None:
        self.module = module
        self.then = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.module:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            RECORDER.give_up(f"{fullname} cannot be found by its import")
            return None
        spec.loader = _Then(spec.loader, self.then)
        return spec


def instrument_now() -> None:
    """Wraps vLLM's classes; any failure is a warning and `kimi_decode_path_instrumented 0`."""
    try:
        targets = find_targets()
        owners = {
            class_name: importlib.import_module(module_name).__dict__[class_name]
            for module_name, class_name, _, _ in TARGETS
        }
        instrument(targets, owners)
    except Exception as error:  # Mismatch, or anything else: serving goes on regardless
        RECORDER.give_up(str(error))
        RECORDER.start_server()
        return
    if not RECORDER.failed:
        RECORDER.instrumented.set(1)


def register() -> None:
    """Entry point of `vllm.general_plugins`; vLLM calls it in every process it starts."""
    try:
        missing = [module for module, *_ in TARGETS if not module_exists(module)]
        if missing:
            from vllm import __version__  # noqa: PLC0415 (vLLM is imported when it calls us)

            RECORDER.give_up(f"vLLM {__version__} has no {missing[0]}")
            RECORDER.start_server()
        elif RUNNER_MODULE in sys.modules:
            instrument_now()
        elif not any(isinstance(finder, OnImport) for finder in sys.meta_path):
            sys.meta_path.insert(0, OnImport(RUNNER_MODULE, instrument_now))
    except Exception as error:  # never a dead server over a metric
        RECORDER.give_up(f"{type(error).__name__}: {error}")
        RECORDER.start_server()
