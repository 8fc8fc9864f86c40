"""The operator scenarios against a real cluster: only when KUBECONFIG points at one.

Needs the KimiDeployment CRD (`kimi-operator crd | kubectl apply -f -`) and the LeaderWorkerSet,
ComputeDomain and PodMonitor CRDs installed; the operator runs in this process, watching a
namespace the test creates and deletes. Skipped (never passed) without KUBECONFIG.
"""

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kimi_operator.api.crd import crd
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import (
    COMPUTE_DOMAIN,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    POD_MONITOR,
    SERVICE,
)
from kimi_operator.runner import OperatorThread, RunConfig
from tests.support.cluster import children, reconciled, sample, wait_for

pytestmark = pytest.mark.skipif(
    not os.environ.get("KUBECONFIG"), reason="needs a real cluster: set KUBECONFIG"
)
RESYNC_S = 2.0
NAME = "k3-e2e"


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    c = Client(load_configuration())
    missing = [
        r.crd_name
        for r in (KIMI_DEPLOYMENT, COMPUTE_DOMAIN, LEADER_WORKER_SET, POD_MONITOR)
        if not c.served(r)
    ]
    if missing:
        pytest.fail(
            f"install these CRDs first: {', '.join(missing)} (ours: {crd()['metadata']['name']})"
        )
    yield c
    c.close()


@pytest.fixture
def namespace() -> Iterator[str]:
    from kubernetes import client as k8s  # noqa: PLC0415

    name = f"kimi-e2e-{uuid.uuid4().hex[:6]}"
    core = k8s.CoreV1Api(k8s.ApiClient(load_configuration()))
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture
def operator(namespace: str) -> Iterator[OperatorThread]:
    with OperatorThread(RunConfig(namespaces=(namespace,), resync_interval_s=RESYNC_S)) as op:
        yield op


def deployment(namespace: str) -> dict[str, Any]:
    doc = sample()
    doc["metadata"] = {"name": NAME, "namespace": namespace}
    return doc


@pytest.mark.usefixtures("operator")
def test_lifecycle_on_a_real_cluster(client: Client, namespace: str) -> None:
    kd = client.create(KIMI_DEPLOYMENT, deployment(namespace))
    wait_for(lambda: reconciled(client, 1, NAME, namespace), timeout=60, what="first status")
    found = children(client, NAME, namespace)
    assert len(found) == 5
    for child in found.values():
        assert child["metadata"]["ownerReferences"][0]["uid"] == kd["metadata"]["uid"]

    # A quiet resync writes nothing: no child's resourceVersion moves.
    def versions() -> dict[str, str]:
        found = children(client, NAME, namespace)
        return {k: v["metadata"]["resourceVersion"] for k, v in found.items()}

    before = versions()
    time.sleep(3 * RESYNC_S)
    assert versions() == before

    client.patch(KIMI_DEPLOYMENT, namespace, NAME, {"spec": {"gpus": 16, "replicas": 3}})
    wait_for(lambda: reconciled(client, 2, NAME, namespace), timeout=60, what="generation 2")
    found = children(client, NAME, namespace)
    assert sum(k.startswith("LeaderWorkerSet/") for k in found) == 3
    assert found[f"LeaderWorkerSet/{NAME}-g0"]["spec"]["leaderWorkerTemplate"]["size"] == 4

    client.patch(KIMI_DEPLOYMENT, namespace, NAME, {"spec": {"replicas": 1}})
    wait_for(lambda: reconciled(client, 3, NAME, namespace), timeout=60, what="generation 3")
    found = children(client, NAME, namespace)
    assert sum(k.startswith("LeaderWorkerSet/") for k in found) == 1

    client.delete(SERVICE, namespace, NAME)
    wait_for(
        lambda: f"Service/{NAME}" in children(client, NAME, namespace), timeout=30, what="repair"
    )

    client.delete(KIMI_DEPLOYMENT, namespace, NAME)
    wait_for(lambda: not children(client, NAME, namespace), timeout=120, what="garbage collection")


def test_the_api_server_refuses_an_invalid_spec(client: Client, namespace: str) -> None:
    doc = deployment(namespace)
    doc["spec"]["gpus"] = 12
    with pytest.raises(ApiError, match="HTTP 422"):
        client.create(KIMI_DEPLOYMENT, doc)
