"""The real kubectl and helm (`make tools` puts them in .tools/bin), run against an API server
on 127.0.0.1 through a kubeconfig of their own: what the demo shows and the client tests drive."""

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from kimi_operator.embedded.processes import write_kubeconfig

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT_S = 60


def tool(name: str) -> str:
    """The path of `kubectl` or `helm`: .tools/bin's, else the PATH's."""
    local = ROOT / ".tools" / "bin" / name
    found = str(local) if local.exists() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed: run `make tools` (scripts/install-helm.sh)")
    return found


def step(out: TextIO, title: str) -> None:
    print(f"\n-- {title}", file=out)


@dataclass
class Kubectl:
    """kubectl and helm for one server; each command echoed (`$ kubectl ...`) with its output."""

    kubeconfig: Path
    out: TextIO
    home: Path  # their caches (discovery, OpenAPI) and helm's configuration

    @classmethod
    def for_server(cls, url: str, work: Path, out: TextIO) -> "Kubectl":
        work.mkdir(parents=True, exist_ok=True)
        return cls(write_kubeconfig(url, work / "kubeconfig"), out, work)

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "HOME": str(self.home),
            "HELM_CACHE_HOME": str(self.home / "helm-cache"),
            "HELM_CONFIG_HOME": str(self.home / "helm-config"),
            "HELM_DATA_HOME": str(self.home / "helm-data"),
        }

    def call(self, binary: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run `binary` (kubectl or helm) quietly: its exit status and output."""
        return subprocess.run(
            [tool(binary), *args],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )

    def watch(self, *args: str) -> "subprocess.Popen[str]":
        """`kubectl args` left running (a `--watch`): its output read as it comes, until ended."""
        command = [tool("kubectl"), *args]
        return subprocess.Popen(command, env=self._env(), stdout=subprocess.PIPE, text=True)

    def _shown(self, binary: str, args: tuple[str, ...], *, check: bool) -> str:
        shown = " ".join(shlex.quote(a.replace(str(ROOT) + "/", "")) for a in args)
        print(f"\n$ {binary} {shown}", file=self.out)
        result = self.call(binary, *args)
        output = (result.stdout + result.stderr).rstrip()
        print(output, file=self.out)
        if check and result.returncode != 0:
            raise RuntimeError(f"{binary} {shown} failed (exit {result.returncode}): {output}")
        return output

    def run(self, *args: str, check: bool = True) -> str:
        """`kubectl args`, echoed with its output (a failure raises unless `check` is off)."""
        return self._shown("kubectl", args, check=check)

    def helm(self, *args: str, check: bool = True) -> str:
        return self._shown("helm", args, check=check)
