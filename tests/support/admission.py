"""`kimi-operator admission` as a process, with no cluster to reach (no kubeconfig, no in-cluster
environment), and AdmissionReviews sent to it over HTTP(S)."""

import contextlib
import json
import os
import queue
import re
import signal
import ssl
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kimi_operator.admission.handler import WEBHOOK_ID
from tests.support.repo import ROOT

SERVING = re.compile(r"serving admission reviews at (\S+)")


@dataclass
class Webhook:
    process: "subprocess.Popen[str]"
    url: str = ""  # the base URL the process announced last
    lines: list[str] = field(default_factory=list)  # its output so far
    _announced: "queue.Queue[str | None]" = field(default_factory=queue.Queue)

    def drain(self) -> None:
        """Read the output as it comes (a full pipe would stop the process), noting each
        announcement of where it serves; None at the end."""
        stream: IO[str] | None = self.process.stdout
        assert stream is not None
        for line in stream:
            self.lines.append(line)
            found = SERVING.search(line)
            if found:
                self._announced.put(found.group(1))
        self._announced.put(None)

    def next_url(self) -> str:
        """Wait until the process announces where it serves (again)."""
        url = self._announced.get(timeout=60)
        if url is None:
            raise AssertionError(f"the webhook stopped: {''.join(self.lines)}")
        self.url = url
        return url


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(ROOT / "no-such-kubeconfig")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "operator"), str(ROOT / "kernels")])
    return env


@contextlib.contextmanager
def running_webhook(*args: str) -> Iterator[Webhook]:
    """`kimi-operator admission ARGS --port 0` (plain HTTP unless ARGS have certificates)."""
    command = [sys.executable, "-m", "kimi_operator.cli", "admission", "--port", "0", *args]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_environment(),
    )
    webhook = Webhook(process)
    reader = threading.Thread(target=webhook.drain, daemon=True)
    reader.start()
    try:
        webhook.next_url()
        yield webhook
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        reader.join(timeout=30)


def admission_review(
    new: Mapping[str, Any], old: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The AdmissionReview v1 kube-apiserver sends for a create (`old` None) or an update."""
    meta = new.get("metadata") or {}
    gvk = {"group": "kimi-operator.io", "version": "v1alpha1"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0b7e3a52-5c4b-4c57-9a6a-6d1f0c2a9e11",
            "kind": {**gvk, "kind": "KimiDeployment"},
            "resource": {**gvk, "resource": "kimideployments"},
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "operation": "CREATE" if old is None else "UPDATE",
            "userInfo": {"username": "jane", "groups": ["system:authenticated"]},
            "object": new,
            "oldObject": old,
            "dryRun": False,
        },
    }


def post_review(
    base_url: str, review: Mapping[str, Any], *, context: ssl.SSLContext | None = None
) -> dict[str, Any]:
    """The `response` of the webhook at `base_url`, posted to the path the chart configures."""
    request = urllib.request.Request(
        f"{base_url}/{WEBHOOK_ID}",
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30, context=context) as answer:
        body = json.loads(answer.read())
    assert body["response"]["uid"] == review["request"]["uid"]
    response: dict[str, Any] = body["response"]
    return response


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1 and localhost, made by openssl: its own CA."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key
