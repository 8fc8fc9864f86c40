"""The operator as `kimi-operator run` in a process of its own, reaching an API server through
KUBECONFIG exactly as in a cluster: for the benchmarks and the restart tests, which measure its
memory and CPU, or kill it."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, Self, TypeVar

import yaml

T = TypeVar("T")


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a server that cannot bind port 0 and report the port it
    got (a process given its address on the command line). Another process may take it before the
    server binds it: the only copy, so that a fix reaches every caller."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def fetch(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def http_status(url: str, timeout: float) -> int | None:
    """The HTTP status a GET of `url` is answered with; None without an answer in time."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def healthy(url: str) -> bool:
    return http_status(url, timeout=1) == 200


def wait(
    probe: Callable[[], T | None],
    timeout: float,
    what: str,
    every: float = 0.1,
    *,
    not_yet: tuple[type[Exception], ...] = (),
) -> T:
    """`probe()` once truthy, polling; the errors in `not_yet` count as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = probe()
        except not_yet:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def memory_mb(pid: int, key: str = "VmRSS") -> float:
    """A process's resident memory now (VmRSS) or at its peak (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} in /proc/{pid}/status")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_kubeconfig(url: str, path: Path, token: str | None = None) -> Path:
    """A kubeconfig for a plain-HTTP API server at `url`, with `token` as the bearer token."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "embedded", "cluster": {"server": url}}],
                "users": [{"name": "embedded", "user": {"token": token} if token else {}}],
                "contexts": [
                    {"name": "embedded", "context": {"cluster": "embedded", "user": "embedded"}}
                ],
                "current-context": "embedded",
            }
        )
    )
    return path


class OperatorProcess:
    """`kimi-operator run ARGS` against `url`; started (and restarted) by `start`, which waits
    for its /healthz. Its metrics are served too. A context manager that stops it at the end."""

    def __init__(
        self,
        url: str,
        args: Sequence[str] = (),
        stderr: IO[Any] | None = None,
        *,
        token: str | None = None,
    ) -> None:
        self.kubeconfig = write_kubeconfig(url, Path(tempfile.mkdtemp()) / "kubeconfig", token)
        self.args = list(args)
        self.stderr = stderr
        self.process: subprocess.Popen[bytes] | None = None
        self.health = self.metrics_address = ""

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = 60.0) -> None:
        self.health = f"127.0.0.1:{free_port()}"
        self.metrics_address = f"127.0.0.1:{free_port()}"
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("kimi-operator")),
                "run",
                *self.args,
                f"--health-address={self.health}",
                f"--metrics-address={self.metrics_address}",
            ],
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
            stderr=self.stderr if self.stderr is not None else subprocess.DEVNULL,
        )
        wait(self.is_healthy, timeout, "the operator's /healthz")

    def is_healthy(self) -> bool:
        alive = self.process is not None and self.process.poll() is None
        return alive and healthy(f"http://{self.health}/healthz")

    def metrics(self) -> str:
        url = f"http://{self.metrics_address}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text: str = response.read().decode()
            return text

    def signal(self, signum: int) -> None:
        """SIGSTOP freezes it (a long pause, a partition), SIGCONT wakes it."""
        assert self.process is not None
        self.process.send_signal(signum)

    def wait(self, timeout: float) -> int | None:
        """Its exit code once it ends within `timeout`, else None."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """SIGKILL: no clean-up of any kind, as when a node dies or the OOM killer strikes."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def metric_total(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`, from Prometheus text."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        metric = series.split("{", 1)[0]
        if metric == name and all(f'{k}="{v}"' in series for k, v in labels.items()):
            total += float(value)
    return total
