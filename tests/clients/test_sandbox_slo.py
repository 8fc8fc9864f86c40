"""#57's done-when on the sandbox (`kimi-operator demo --serve`), with the real helm and kubectl: a
KimiDeployment with `spec.autoscaling.slo`, its load served by a stand-in Prometheus on
127.0.0.1 (the chart's autoscaling.prometheusUrl), gets the groups the SLO scaler wants, and
`kubectl get kimi -o wide` and its status say how many and why; no HPA is made.
Then an HPA applied by hand on the same scale subresource is refused: Degraded names it, the count
stays, and nothing moves until it is deleted."""

import io
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from kimi_operator import slo_roles
from kimi_operator.embedded.chart import CHART
from kimi_operator.embedded.clients import Kubectl
from kimi_operator.embedded.processes import wait
from kimi_operator.observability.rules import (
    ROLE_OUTPUT_TOKENS,
    ROLE_PREFIX_HITS,
    ROLE_PROMPT_TOKENS,
    ROLE_REQUESTS,
    ROLE_SERVING_GROUPS,
)
from tests.support.repo import ROOT
from tests.support.stand_in_prometheus import StandInPrometheus, prometheus

__all__ = ["prometheus"]  # the fixture

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)

SAMPLE = ROOT / "crds" / "samples" / "k3-tp16-latency.yaml"
NAME, NAMESPACE = "k3-tp16-latency", "inference"
KD = (f"kimi/{NAME}", "-n", NAMESPACE)
SLO = {"ttftSeconds": 2, "decodeTokensPerSecondPerUser": 40}
# A busy agent load on the one group serving: 4 requests/s of 20K-token prompts, 80% cached.
LOAD = {
    ROLE_REQUESTS: 4.0,
    ROLE_PROMPT_TOKENS: 20_000.0,
    ROLE_OUTPUT_TOKENS: 400.0,
    ROLE_PREFIX_HITS: 0.8,
    ROLE_SERVING_GROUPS: 1.0,
    "time_to_first_token_seconds": 1.0,
    "decode_tokens_per_second_per_user": 50.0,
}
HPA = {
    "apiVersion": "autoscaling/v2",
    "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "by-hand", "namespace": NAMESPACE},
    "spec": {
        "scaleTargetRef": {
            "apiVersion": "kimi-operator.io/v1alpha1",
            "kind": "KimiDeployment",
            "name": NAME,
        },
        "minReplicas": 1,
        "maxReplicas": 8,
        "metrics": [
            {
                "type": "External",
                "external": {
                    "metric": {"name": "anything"},
                    "target": {"type": "AverageValue", "averageValue": "1"},
                },
            }
        ],
    },
}


def _jsonpath(kubectl: Kubectl, path: str) -> str:
    return kubectl.run("get", *KD, "-o", f"jsonpath={path}")


def _groups(kubectl: Kubectl) -> list[str]:
    names = kubectl.run("get", "lws", "-n", NAMESPACE, "-o", "name").split()
    return sorted(name.rsplit("/", 1)[1] for name in names)


def _degraded(kubectl: Kubectl) -> dict[str, str]:
    found: dict[str, str] = json.loads(
        _jsonpath(kubectl, '{.status.conditions[?(@.type=="Degraded")]}')
    )
    return found


def test_the_slo_scaler_decides_says_why_and_refuses_a_second_writer(
    sandbox: tuple[subprocess.Popen[str], Path],
    prometheus: StandInPrometheus,
    tmp_path: Path,
) -> None:
    _, kubeconfig = sandbox
    kubectl = Kubectl(kubeconfig, io.StringIO(), tmp_path / "home")
    prometheus.answers = dict(LOAD)
    kubectl.helm(
        "install", "kimi-operator", str(CHART), "-n", "kimi-system", "--create-namespace",
        "--set", f"autoscaling.prometheusUrl={prometheus.url}",
    )  # fmt: skip
    kubectl.run("create", "namespace", NAMESPACE)
    doc = yaml.safe_load(SAMPLE.read_text())
    doc["spec"].pop("replicas", None)  # the operator, not the manifest, sets the count
    doc["spec"]["serving"] = {"drainSeconds": 0}
    doc["spec"]["autoscaling"] = {"maxReplicas": 4, "slo": SLO}
    manifest = tmp_path / "kimi.yaml"
    manifest.write_text(yaml.safe_dump(doc))
    kubectl.run("apply", "-f", str(manifest))

    def decided() -> int | None:
        text = _jsonpath(kubectl, "{.status.sloAutoscaler.decode.desiredReplicas}")
        return int(text) if text and len(_groups(kubectl)) == int(text) else None

    wanted = wait(decided, 120, "the SLO scaler's groups", every=1.0)
    assert 2 <= wanted <= 4  # more than the one group serving the load now, within maxReplicas
    assert _groups(kubectl) == [f"{NAME}-g{i}" for i in range(wanted)]
    assert _jsonpath(kubectl, "{.spec.replicas}") == "1"  # never written: the count is status's
    assert _jsonpath(kubectl, "{.status.autoscaler}") == slo_roles.AUTOSCALER
    scaler = json.loads(_jsonpath(kubectl, "{.status.sloAutoscaler.decode}"))
    assert scaler["load"]["requestRate"] == LOAD[ROLE_REQUESTS]
    assert scaler["needed"]["replicas"] == wanted
    assert scaler["needed"]["fewer"]["replicas"] == wanted - 1
    why = f"{wanted} groups recommended for TTFT p90 <= 2 s and 40 tok/s per user at P90"
    assert why in scaler["message"]
    wide = kubectl.run("get", *KD, "-o", "wide").splitlines()
    header, row = wide[0].split(), wide[1]
    assert row.split()[header.index("SLO-GROUPS")] == str(wanted)
    assert why in row  # SLO-WHY
    assert kubectl.run("get", "hpa", "-n", NAMESPACE, "-o", "name") == ""  # (KEDA: none here)

    # A second writer of the count: refused, named, and the count kept while it is there.
    hpa = tmp_path / "hpa.yaml"
    hpa.write_text(yaml.safe_dump(HPA))
    kubectl.run("apply", "-f", str(hpa))
    wait(lambda: _degraded(kubectl).get("reason") == slo_roles.SHARED, 90, "the refusal", every=1.0)
    message = _degraded(kubectl)["message"]
    assert message.startswith("HorizontalPodAutoscaler/by-hand also targets this KimiDeployment")
    assert f"keeps {wanted} groups" in message
    prometheus.answers[ROLE_REQUESTS] = 0.0  # no load: it would scale down were it alone
    assert _jsonpath(kubectl, "{.status.sloAutoscaler.decode.desiredReplicas}") == str(wanted)
    kubectl.run("delete", "-f", str(hpa))
    wait(lambda: _degraded(kubectl).get("status") == "False", 90, "the refusal's end", every=1.0)
    assert len(_groups(kubectl)) == wanted  # the quiet window keeps the groups for now
