"""The README's journey with the real kubectl and helm against the embedded API server: their
output, and what the server stored."""

import json
import os
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from kimi_operator.embedded.chart import CHART
from kimi_operator.embedded.clients import Kubectl, tool
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT, Resource
from tests.support.repo import ROOT

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)

SAMPLES = ROOT / "crds" / "samples"
LATENCY = SAMPLES / "k3-tp16-latency.yaml"
STOCK = SAMPLES / "k3-tp16-stock.yaml"
NAMESPACE = Resource("", "v1", "namespaces", "Namespace")
CRD = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition"
)
DEPLOYMENT = Resource("apps", "v1", "deployments", "Deployment")
SECRET = Resource("", "v1", "secrets", "Secret")
CRD_NAME = "kimideployments.kimi-operator.io"
RELEASE_ARGS = ("--namespace", "kimi-system")


def ok(kubectl: Kubectl, *args: str) -> str:
    result = kubectl.call("kubectl", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def helm(kubectl: Kubectl, *args: str) -> str:
    result = kubectl.call("helm", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def install_chart(kubectl: Kubectl) -> None:
    helm(kubectl, "install", "kimi", str(CHART), *RELEASE_ARGS, "--create-namespace")


def operator_args(client: Client) -> list[str]:
    operator = "app.kubernetes.io/component=operator"
    (deployment,) = client.list(DEPLOYMENT, "kimi-system", label_selector=operator)
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_helm_install_upgrade_and_uninstall_keep_the_crd(kubectl: Kubectl, client: Client) -> None:
    install_chart(kubectl)
    assert client.get(CRD, "", CRD_NAME) is not None
    # The CRD helm created is served at once: its short name and categories are discovered.
    resources = ok(kubectl, "api-resources", "--api-group=kimi-operator.io")
    assert resources.split("\n")[1].split() == [
        "kimideployments",
        "kimi",
        "kimi-operator.io/v1alpha1",
        "true",
        "KimiDeployment",
    ]
    assert "--workers=16" in operator_args(client)
    assert client.list(SECRET, "kimi-system", label_selector="owner=helm,name=kimi")

    helm(kubectl, "upgrade", "kimi", str(CHART), *RELEASE_ARGS, "--set", "operator.workers=8")
    assert "--workers=8" in operator_args(client)
    assert "2" in helm(kubectl, "history", "kimi", *RELEASE_ARGS).split("\n")[2].split()[0]

    uninstalled = kubectl.call("helm", "uninstall", "kimi", *RELEASE_ARGS)
    assert uninstalled.returncode == 0, uninstalled.stderr
    assert f"[CustomResourceDefinition] {CRD_NAME}" in uninstalled.stdout  # kept by its policy
    assert client.list(DEPLOYMENT, "kimi-system") == []
    assert client.list(SECRET, "kimi-system", label_selector="owner=helm") == []
    assert client.get(CRD, "", CRD_NAME) is not None


def apply_client_and_server_side(kubectl: Kubectl, client: Client, tmp_path: Path) -> None:
    # Client-side apply: created, unchanged, then a merge patch of what changed.
    assert "k3-tp16-latency created" in ok(kubectl, "apply", "-f", str(LATENCY))
    assert "k3-tp16-latency unchanged" in ok(kubectl, "apply", "-f", str(LATENCY))
    edited = yaml.safe_load(LATENCY.read_text())
    edited["spec"]["replicas"] = 3
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump(edited))
    assert "k3-tp16-latency configured" in ok(kubectl, "apply", "-f", str(path))
    stored = client.get(KIMI_DEPLOYMENT, "inference", "k3-tp16-latency")
    assert stored is not None
    assert stored["spec"]["replicas"] == 3
    last = stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    assert json.loads(last)["spec"]["replicas"] == 3

    # Server-side apply: the field manager recorded.
    assert "k3-tp16-stock serverside-applied" in ok(
        kubectl, "apply", "--server-side", "-f", str(STOCK)
    )
    stock = client.get(KIMI_DEPLOYMENT, "inference", "k3-tp16-stock")
    assert stock is not None
    (entry,) = stock["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"]) == ("kubectl", "Apply")
    assert "f:gpus" in entry["fieldsV1"]["f:spec"]


def test_the_readme_journey(kubectl: Kubectl, client: Client, tmp_path: Path) -> None:
    install_chart(kubectl)
    assert ok(kubectl, "create", "namespace", "inference") == "namespace/inference created\n"
    namespace = client.get(NAMESPACE, "", "inference")
    assert namespace is not None
    assert namespace["status"] == {"phase": "Active"}
    assert ok(kubectl, "get", "namespace", "inference").split("\n")[1].split()[:2] == [
        "inference",
        "Active",
    ]

    apply_client_and_server_side(kubectl, client, tmp_path)

    # get: the CRD's printer columns, by its short name, with no ambiguity warning.
    listed = kubectl.call("kubectl", "get", "kimi", "-A")
    assert listed.stderr == ""
    rows = [line.split() for line in listed.stdout.strip().split("\n")]
    assert rows[0] == [
        "NAMESPACE",
        "NAME",
        "GPUS",
        "DESIRED",
        "READY-GROUPS",
        "STOPPED",
        "BACKEND",
        "ROUTING",
        "READY",
        "ENDPOINT",
        "AGE",
    ]
    assert [row[:4] for row in rows[1:]] == [
        ["inference", "k3-tp16-latency", "3", "latency_specialized"],  # no status: cells empty
        ["inference", "k3-tp16-stock", "1", "auto"],
    ]

    # wait: Ready written to the status (as the operator would), seen through a watch.
    status = {"conditions": [{"type": "Ready", "status": "True", "reason": "AllGroupsReady"}]}
    client.patch(
        KIMI_DEPLOYMENT, "inference", "k3-tp16-stock", {"status": status}, subresource="status"
    )
    waited = ok(
        kubectl,
        "wait",
        "--for=condition=Ready",
        "kimi/k3-tp16-stock",
        "-n",
        "inference",
        "--timeout=10s",
    )
    assert waited == "kimideployment.kimi-operator.io/k3-tp16-stock condition met\n"

    described = ok(kubectl, "describe", "kimi", "k3-tp16-stock", "-n", "inference")
    assert "Kind:         KimiDeployment" in described
    assert re.search(r"\n +Reason: +AllGroupsReady\n", described)

    explained = ok(kubectl, "explain", "kimideployment.spec.gpus")
    assert "FIELD: gpus <integer>" in explained
    assert "GPUs per TP group" in explained

    scaled = ok(kubectl, "scale", "kimi", "k3-tp16-stock", "-n", "inference", "--replicas=2")
    assert scaled == "kimideployment.kimi-operator.io/k3-tp16-stock scaled\n"
    stock = client.get(KIMI_DEPLOYMENT, "inference", "k3-tp16-stock")
    assert stock is not None
    assert stock["spec"]["replicas"] == 2

    missing = kubectl.call("kubectl", "get", "kimi", "nope", "-n", "inference")
    assert missing.stderr == (
        'Error from server (NotFound): kimideployments.kimi-operator.io "nope" not found\n'
    )

    deleted = ok(kubectl, "delete", "-f", str(LATENCY))
    assert (
        deleted
        == 'kimideployment.kimi-operator.io "k3-tp16-latency" deleted from inference namespace\n'
    )
    assert client.get(KIMI_DEPLOYMENT, "inference", "k3-tp16-latency") is None

    # Deleting the namespace deletes what is in it.
    assert ok(kubectl, "delete", "namespace", "inference") == 'namespace "inference" deleted\n'
    assert client.list(KIMI_DEPLOYMENT) == []
    assert client.get(NAMESPACE, "", "inference") is None


def test_a_refused_apply_says_what_the_api_server_said(kubectl: Kubectl) -> None:
    install_chart(kubectl)
    ok(kubectl, "create", "namespace", "inference")
    refused = kubectl.call(
        "kubectl", "apply", "-f", str(SAMPLES / "rejected" / "k3-lora-tp12.yaml")
    )
    assert refused.returncode == 1
    assert refused.stderr.startswith('The KimiDeployment "k3-bad" is invalid: \n* spec.')
    assert '\n* spec.gpus: Unsupported value: 12: supported values: "8", "16"\n' in refused.stderr


def test_server_side_apply_conflicts_with_another_manager(kubectl: Kubectl, client: Client) -> None:
    install_chart(kubectl)
    ok(kubectl, "create", "namespace", "inference")
    ok(kubectl, "apply", "--server-side", "-f", str(STOCK))
    ok(
        kubectl,
        "patch",
        "kimi",
        "k3-tp16-stock",
        "-n",
        "inference",
        "--type=merge",
        "-p",
        '{"spec":{"gpus":8}}',
        "--field-manager=by-hand",
    )
    refused = kubectl.call("kubectl", "apply", "--server-side", "-f", str(STOCK))
    assert refused.returncode == 1
    assert refused.stderr.startswith(
        'error: Apply failed with 1 conflict: conflict with "by-hand" using '
        "kimi-operator.io/v1alpha1: .spec.gpus\n"
    )
    stock = client.get(KIMI_DEPLOYMENT, "inference", "k3-tp16-stock")
    assert stock is not None
    assert stock["spec"]["gpus"] == 8

    ok(kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(STOCK))
    stock = client.get(KIMI_DEPLOYMENT, "inference", "k3-tp16-stock")
    assert stock is not None
    assert stock["spec"]["gpus"] == 16
    managers = {e["manager"]: e for e in stock["metadata"]["managedFields"]}
    assert "f:gpus" in managers["kubectl"]["fieldsV1"]["f:spec"]
    assert "f:gpus" not in (managers.get("by-hand", {}).get("fieldsV1") or {}).get("f:spec", {})


def test_client_side_apply_of_a_built_in_kind_is_a_strategic_merge(
    kubectl: Kubectl, client: Client, tmp_path: Path
) -> None:
    """kubectl sends a strategic merge patch for built-in kinds: containers merged by name, the
    one left out deleted (`$patch: delete`), the directives never stored."""
    web: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "main", "image": "nginx:1"},
                        {"name": "side", "image": "side:1"},
                    ]
                },
            },
        },
    }
    path = tmp_path / "web.yaml"
    path.write_text(yaml.safe_dump(web))
    assert ok(kubectl, "apply", "-f", str(path)) == "deployment.apps/web created\n"
    web["spec"]["template"]["spec"]["containers"] = [{"name": "main", "image": "nginx:2"}]
    path.write_text(yaml.safe_dump(web))
    assert ok(kubectl, "apply", "-f", str(path)) == "deployment.apps/web configured\n"
    stored = client.get(DEPLOYMENT, "default", "web")
    assert stored is not None
    assert stored["spec"]["template"]["spec"]["containers"] == [
        {"name": "main", "image": "nginx:2"}
    ]
    assert "$" not in json.dumps(stored)


def test_get_watch_prints_rows_of_the_crd_s_columns(kubectl: Kubectl, client: Client) -> None:
    """`kubectl get -w`: the listed rows, then one row per change (not the unchanged ones again)."""
    install_chart(kubectl)
    ok(kubectl, "create", "namespace", "inference")
    ok(kubectl, "apply", "-f", str(LATENCY))
    env = {**os.environ, "KUBECONFIG": str(kubectl.kubeconfig), "HOME": str(kubectl.home)}
    command = [tool("kubectl"), "get", "kimi", "-n", "inference", "-w"]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) as watch:
        assert watch.stdout is not None
        deadline = threading.Timer(30, watch.kill)  # a watch that prints nothing fails, not hangs
        deadline.start()
        header, listed = watch.stdout.readline(), watch.stdout.readline()
        assert header.split()[:4] == ["NAME", "GPUS", "DESIRED", "READY-GROUPS"]
        assert listed.split()[:3] == ["k3-tp16-latency", "1", "latency_specialized"]
        client.patch(KIMI_DEPLOYMENT, "inference", "k3-tp16-latency", {"spec": {"replicas": 3}})
        changed = watch.stdout.readline()
        watch.kill()
        deadline.cancel()
    assert changed.split()[:3] == ["k3-tp16-latency", "3", "latency_specialized"]


CONFIG_MAP = Resource("", "v1", "configmaps", "ConfigMap")


def owned_pair(client: Client, owner_name: str) -> None:
    """A ConfigMap `owner_name` in `default` and a ConfigMap `<owner_name>-child` it owns, the
    reference blocking the owner's deletion (as the operator's children's do)."""
    owner = client.create(
        CONFIG_MAP, {"metadata": {"name": owner_name, "namespace": "default"}, "data": {}}
    )
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner_name,
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    child = {"name": f"{owner_name}-child", "namespace": "default", "ownerReferences": [reference]}
    client.create(CONFIG_MAP, {"metadata": child, "data": {}})


def test_kubectl_delete_with_each_cascade(kubectl: Kubectl, client: Client) -> None:
    """`kubectl delete --cascade=background|foreground|orphan` as kube-apiserver and the garbage
    collector carry them out: the dependent goes with its owner, or stays without the reference."""
    for cascade in ("background", "foreground", "orphan"):
        owned_pair(client, cascade)
        deleted = ok(
            kubectl, "delete", "configmap", cascade, "-n", "default", f"--cascade={cascade}"
        )
        assert f'configmap "{cascade}" deleted' in deleted
        assert client.get(CONFIG_MAP, "default", cascade) is None
    assert client.get(CONFIG_MAP, "default", "background-child") is None
    assert client.get(CONFIG_MAP, "default", "foreground-child") is None
    kept = client.get(CONFIG_MAP, "default", "orphan-child")
    assert kept is not None
    assert "ownerReferences" not in kept["metadata"] or kept["metadata"]["ownerReferences"] == []
