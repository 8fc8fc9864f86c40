"""`kimi-operator run` as a process against the embedded API server (through KUBECONFIG), and
`kimi-operator demo`."""

import io
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kimi_operator.cli import main
from kimi_operator.embedded.demo import run_demo, settled
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.processes import free_port
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT
from tests.support.cluster import NAME, NS, children, reconciled, sample, wait_for
from tests.support.repo import ROOT
from tests.support.tools import require_tool

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except OSError:
        return 0, ""


@pytest.fixture
def operator_process(api: EmbeddedApiServer, tmp_path: Path) -> Iterator[tuple[str, str]]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "embedded", "cluster": {"server": api.url}}],
                "users": [{"name": "nobody", "user": {}}],
                "contexts": [
                    {"name": "embedded", "context": {"cluster": "embedded", "user": "nobody"}}
                ],
                "current-context": "embedded",
            }
        )
    )
    health, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    command = [
        sys.executable,
        "-m",
        "kimi_operator.cli",
        "run",
        "--namespace",
        NS,
        "--serving-image",
        "example.com/vllm:test",
        "--resync-interval",
        "1",
        "--health-address",
        health,
        "--metrics-address",
        metrics,
    ]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(ROOT / "operator")}
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        yield health, metrics
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 0, stderr


def test_run_serves_health_and_metrics_and_reconciles(
    operator_process: tuple[str, str], client: Client
) -> None:
    health, metrics = operator_process
    wait_for(lambda: fetch(f"http://{health}/healthz")[0] == 200, timeout=20, what="/healthz")
    client.create(KIMI_DEPLOYMENT, sample())
    wait_for(lambda: reconciled(client, 1), what="the deployment reconciled")
    lws = children(client)["LeaderWorkerSet/k3-tp8-dspark-g0"]
    container = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert container["image"] == "example.com/vllm:test"
    status, text = fetch(f"http://{metrics}/metrics")
    assert status == 200
    assert 'kimi_operator_reconciles_total{result="reconciled",trigger="create"} 1.0' in text
    assert 'kimi_operator_deployments{condition="Ready",status="False"} 1.0' in text
    assert "kimi_operator_reconcile_duration_seconds_bucket" in text
    # Another namespace is not watched.
    other = sample()
    other["metadata"]["namespace"] = "elsewhere"
    client.create(KIMI_DEPLOYMENT, other)
    wait_for(lambda: reconciled(client, 1), what="still fine")
    kd = client.get(KIMI_DEPLOYMENT, "elsewhere", NAME)
    assert kd is not None
    assert "status" not in kd


def test_demo_runs_the_samples_live() -> None:
    """The demo drives the real helm and kubectl: what they print is what the server said."""
    require_tool("kubectl")
    require_tool("helm")
    out = io.StringIO()
    run_demo(ROOT / "crds" / "samples", out)
    text = out.getvalue()
    assert "listening on http://127.0.0.1:" in text
    assert "installed CRD leaderworkersets.leaderworkerset.x-k8s.io" in text  # the vendored one
    assert "$ helm install kimi charts/kimi-operator --namespace kimi-system" in text
    assert "STATUS: deployed" in text
    assert "$ kubectl create namespace inference\nnamespace/inference created\n" in text
    # A bad spec refused by the server, as kubectl shows it, with the CEL rule's message.
    assert (
        'The KimiDeployment "k3-tp16-dcp" is invalid: spec.kvCache.dtype: Invalid value: '
        '"object": spec.kvCache.dtype: decode.backend latency_specialized reads FP8 e4m3 KV '
        "cache rows only (allowed: fp8, fp8_e4m3; or decode.backend auto)\n"
    ) in text
    assert 'KimiDeployment.kimi-operator.io "k3-bad" is invalid: [' in text
    assert "the operator as the chart's ServiceAccount" in text
    # A spec CEL lets through, refused by the admission webhook with the model's message.
    assert (
        'args.yaml": admission webhook "kimideployments.kimi-operator.io" denied the '
        "request: spec.engineArgs: vLLM 0.33.0's serve parser would refuse this"
    ) in text
    assert "kubelet stand-in" in text
    assert "marked LeaderWorkerSet inference/k3-tp8-dspark-g0 ready" in text
    header = "NAMESPACE   NAME                 GPUS   DESIRED   READY-GROUPS   STOPPED   BACKEND"
    assert header in text
    ready = [line for line in text.split("\n") if line.startswith("inference   k3-tp8-dspark ")]
    assert ready[-1].split()[2:10] == [
        "8",
        "1",
        "1",
        "0",
        "latency_specialized",
        "Service",
        "True",
        "http://k3-tp8-dspark.inference.svc:8000/v1",
    ]
    assert "kimideployment.kimi-operator.io/k3-tp8-dspark condition met" in text
    assert "FIELD: gpus <integer>" in text
    assert "k3-tp16-latency scaled" in text
    assert 'kimideployment.kimi-operator.io "k3-tp16-dcp" deleted from inference namespace' in text
    assert "condition Ready=True (AllGroupsReady" in text
    assert "condition MNNVLReady=True (ComputeDomainsReady" in text
    # No deployment says Ready=True next to a ComputeDomain not ready (the demo waited for both).
    conditions = text.split("\nchildren and conditions:\n", 1)[1].split("\n\n", 1)[0]
    blocks = re.split(r"\n(?=inference/)", conditions)
    assert len(blocks) >= 4
    for block in blocks:
        if "condition Ready=True" in block:
            assert "ComputeDomainNotReady" not in block, block
    assert "demo took" in text


def test_the_demo_waits_for_the_compute_domains_too() -> None:
    """Ready=True comes with the groups; MNNVLReady may trail it by a reconcile: the demo prints
    the conditions only once both say what it marked."""

    def deployment(*conditions: tuple[str, str, str]) -> dict[str, Any]:
        listed = [{"type": t, "status": s, "reason": r, "message": ""} for t, s, r in conditions]
        return {"status": {"conditions": listed}}

    ready = ("Ready", "True", "AllGroupsReady")
    assert not settled(deployment(ready, ("MNNVLReady", "False", "ComputeDomainNotReady")))
    assert settled(deployment(ready, ("MNNVLReady", "True", "ComputeDomainsReady")))
    assert settled(deployment(ready, ("MNNVLReady", "False", "ComputeDomainDisabled")))
    assert not settled(deployment(("Ready", "False", "GroupsNotReady")))


def test_demo_says_when_there_is_nothing_to_deploy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["demo", "--samples", str(tmp_path)])
    assert code == 1
    assert f"no valid KimiDeployment samples in {tmp_path}" in capsys.readouterr().err
