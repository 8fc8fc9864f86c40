"""`kimi-operator demo --serve`, as a user drives it: the sandbox in a process of its own, then the
README's quickstart with the real helm and kubectl on the kubeconfig it wrote, then Ctrl-C."""

import functools
import io
import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from kimi_operator.embedded.chart import CHART
from kimi_operator.embedded.clients import Kubectl
from kimi_operator.embedded.processes import wait
from tests.support.repo import ROOT

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)

SAMPLE = ROOT / "crds" / "samples" / "k3-tp16-latency.yaml"
NAME, NAMESPACE = "k3-tp16-latency", "inference"
TIMEOUT = "--timeout=60s"


def test_the_quickstart_on_the_sandbox(
    sandbox: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    process, kubeconfig = sandbox
    kubectl = Kubectl(kubeconfig, io.StringIO(), tmp_path / "home")

    # Empty: a real cluster's namespaces, nothing a `helm install` would collide with.
    namespaces = kubectl.run("get", "namespaces", "-o", "name").split()
    assert {"namespace/default", "namespace/kube-system"} <= set(namespaces)
    assert "namespace/kimi-system" not in namespaces
    assert kubectl.run("get", "serviceaccounts", "-A") == "No resources found"
    assert "kimideployments" not in kubectl.run("get", "crd", "-o", "name")

    kubectl.helm("install", "kimi-operator", str(CHART), "-n", "kimi-system", "--create-namespace")
    kubectl.run("create", "namespace", NAMESPACE)
    kubectl.run("apply", "-f", str(SAMPLE))
    kubectl.run("wait", "--for=condition=Ready", f"kimi/{NAME}", "-n", NAMESPACE, TIMEOUT)
    table = kubectl.run("get", "kimi", "-n", NAMESPACE)
    assert f"http://{NAME}.{NAMESPACE}.svc:8000/v1" in table

    kubectl.run("scale", f"kimi/{NAME}", "-n", NAMESPACE, "--replicas", "2")
    ready_2 = "--for=jsonpath={.status.readyReplicas}=2"
    kubectl.run("wait", ready_2, f"kimi/{NAME}", "-n", NAMESPACE, TIMEOUT)
    groups = json.loads(kubectl.run("get", "leaderworkersets", "-n", NAMESPACE, "-o", "json"))
    assert len(groups["items"]) == 2
    assert "Ready Replicas:" in kubectl.run("describe", "kimi", NAME, "-n", NAMESPACE)

    kubectl.run("delete", "kimi", NAME, "-n", NAMESPACE)
    kubectl.run("wait", "--for=delete", "leaderworkersets", "--all", "-n", NAMESPACE, TIMEOUT)

    process.send_signal(signal.SIGINT)  # Ctrl-C
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert f"export KUBECONFIG={kubeconfig}\n" in output
    assert (
        "the operator runs, as Deployment kimi-system/kimi-operator would: ServiceAccount "
        "kimi-operator" in output
    )
    assert "the operator stopped" in output


def _naming(groups: Callable[[], list[dict[str, object]]], count: int) -> bool:
    return len(groups()) == count


def test_scaled_to_zero_and_back_on_the_sandbox_no_group_is_named_nor_counted(
    sandbox: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    """#48's done-when, with the real kubectl: a two-group deployment scaled 2 -> 0 -> 2 names no
    group in its status while at 0 (the merge patch kept both), and comes back with no restart or
    failure recorded."""
    _, kubeconfig = sandbox
    kubectl = Kubectl(kubeconfig, io.StringIO(), tmp_path / "home")
    kubectl.helm("install", "kimi-operator", str(CHART), "-n", "kimi-system", "--create-namespace")
    kubectl.run("create", "namespace", NAMESPACE)
    kubectl.run("apply", "-f", str(SAMPLE))
    kd = (f"kimi/{NAME}", "-n", NAMESPACE)

    def groups() -> list[dict[str, object]]:
        found = kubectl.run("get", *kd, "-o", "jsonpath={.status.groups}")
        return list(json.loads(found)) if found else []

    for replicas in (2, 0, 2):
        kubectl.run("scale", *kd, "--replicas", str(replicas))
        ready = f"--for=jsonpath={{.status.readyReplicas}}={replicas}"
        kubectl.run("wait", ready, *kd, TIMEOUT)
        wait(functools.partial(_naming, groups, replicas), 60, f"status.groups naming {replicas}")
        for group in groups():
            assert (group["restarts"], group.get("lastFailure")) == (0, None), group
    assert kubectl.run("get", *kd, "-o", "jsonpath={.status.stoppedGroups}") == "0"
