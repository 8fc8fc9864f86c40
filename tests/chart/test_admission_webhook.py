"""The admission webhook as the chart installs it: a ValidatingWebhookConfiguration on
KimiDeployments alone, its TLS by Helm or by cert-manager, its pods hardened and with no access to
the cluster, every built-in object valid for the API server."""

import base64
import copy
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from kimi_operator.admission.handler import WEBHOOK_ID
from kimi_operator.cli import build_parser
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.processes import write_kubeconfig
from kimi_operator.embedded.server import ApiServer

from .helm import CHART, helm, of_kind, template, write_values
from .test_chart import validate

CERT_MANAGER = {"admissionWebhook": {"certManager": {"enabled": True}}}
NAMESPACES = ["inference", "research"]
SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cert-manager": CERT_MANAGER,
    "namespaced": {"watchNamespaces": NAMESPACES},
    "fail": {"admissionWebhook": {"failurePolicy": "Fail", "timeoutSeconds": 10}},
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    return {name: template(values, tmp_path_factory.mktemp(name)) for name, values in SETS.items()}


def _one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = of_kind(objects, kind, webhook=True)
    return found


def _webhook(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (webhook,) = _one(objects, "ValidatingWebhookConfiguration")["webhooks"]
    return dict(webhook)


@pytest.mark.parametrize("name", list(SETS))
def test_lint_and_every_built_in_object_is_valid(
    name: str, rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    result = helm(
        "lint", "--strict", str(CHART), "--values", str(write_values(tmp_path, SETS[name]))
    )
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout
    for obj in rendered[name]:
        if not obj["apiVersion"].startswith("cert-manager.io/"):
            validate(obj)


def test_only_kimideployment_creates_and_updates(rendered: dict[str, list[dict[str, Any]]]) -> None:
    webhook = _webhook(rendered["defaults"])
    assert webhook["name"] == "kimideployments.kimi-operator.io"
    assert webhook["rules"] == [
        {
            "apiGroups": ["kimi-operator.io"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["kimideployments"],  # not /status, not /scale
            "scope": "Namespaced",
        }
    ]
    assert webhook["sideEffects"] == "None"
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["timeoutSeconds"] == 5
    assert webhook["namespaceSelector"] == {}
    fail = _webhook(rendered["fail"])
    assert (fail["failurePolicy"], fail["timeoutSeconds"]) == ("Fail", 10)


def test_the_namespace_selector_follows_watch_namespaces(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    selector = _webhook(rendered["namespaced"])["namespaceSelector"]
    assert selector == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": NAMESPACES}
        ]
    }


def test_the_service_path_and_port_reach_the_handler(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["defaults"]
    service = _one(objects, "Service")
    client = _webhook(objects)["clientConfig"]["service"]
    assert client["path"] == f"/{WEBHOOK_ID}"
    assert client["name"] == service["metadata"]["name"]
    assert client["namespace"] == "kimi-system"
    (port,) = service["spec"]["ports"]
    assert client["port"] == port["port"]
    container = _container(objects)
    (container_port,) = container["ports"]
    assert port["targetPort"] == container_port["name"]
    pods = _one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pods.items()
    args = _parsed(container)
    assert args.port == container_port["containerPort"]


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = _one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _parsed(container: dict[str, Any]) -> Any:
    """The container's command and arguments as the CLI reads them."""
    assert container["command"][0] == "kimi-operator"
    return build_parser().parse_args([*container["command"][1:], *container["args"]])


def test_the_pods_are_hardened_spread_and_without_cluster_access(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["defaults"]
    deployment = _one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = _container(objects)
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["tcpSocket"] == {"port": "webhook"}
    args = _parsed(container)
    assert args.run.__name__ == "cmd_admission"
    assert not args.insecure
    (mount,) = container["volumeMounts"]
    assert mount["readOnly"] is True
    assert Path(args.cert_file).parent == Path(args.key_file).parent == Path(mount["mountPath"])
    (volume,) = pod["volumes"]
    assert volume["name"] == mount["name"]
    budget = _one(objects, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert (
        budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    )
    # Neither Deployment selects the other's pods.
    (operator,) = of_kind(objects, "Deployment")
    webhook_pods = deployment["spec"]["template"]["metadata"]["labels"]
    operator_pods = operator["spec"]["template"]["metadata"]["labels"]
    assert not operator["spec"]["selector"]["matchLabels"].items() <= webhook_pods.items()
    assert not deployment["spec"]["selector"]["matchLabels"].items() <= operator_pods.items()


def _openssl(*args: str, data: bytes = b"") -> str:
    result = subprocess.run(["openssl", *args], input=data, capture_output=True, check=True)
    return result.stdout.decode()


def test_helm_generates_a_ca_and_a_certificate_for_the_service(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    objects = rendered["defaults"]
    secret = _one(objects, "Secret")
    pod = _one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["volumes"][0]["secret"]["secretName"] == secret["metadata"]["name"]
    assert secret["type"] == "kubernetes.io/tls"
    assert _webhook(objects)["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / key).write_bytes(base64.b64decode(secret["data"][key]))
    verified = _openssl("verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt"))
    assert verified.strip().endswith(": OK")
    text = _openssl("x509", "-in", str(tmp_path / "tls.crt"), "-noout", "-ext", "subjectAltName")
    service = _one(objects, "Service")["metadata"]["name"]
    assert f"DNS:{service}.kimi-system.svc" in text
    public = _openssl("x509", "-in", str(tmp_path / "tls.crt"), "-noout", "-pubkey")
    from_key = _openssl("pkey", "-in", str(tmp_path / "tls.key"), "-pubout")
    assert public == from_key


def test_cert_manager_issues_the_certificate_and_injects_the_ca(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["cert-manager"]
    assert not of_kind(objects, "Secret", webhook=True)
    configuration = _one(objects, "ValidatingWebhookConfiguration")
    assert "caBundle" not in _webhook(objects)["clientConfig"]
    certificates = {c["metadata"]["name"]: c for c in of_kind(objects, "Certificate", webhook=True)}
    injected = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    namespace, name = injected.split("/")
    assert namespace == "kimi-system"
    serving = certificates[name]
    service = _one(objects, "Service")["metadata"]["name"]
    assert f"{service}.kimi-system.svc" in serving["spec"]["dnsNames"]
    pod = _one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["volumes"][0]["secret"]["secretName"] == serving["spec"]["secretName"]
    issuers = {i["metadata"]["name"]: i for i in of_kind(objects, "Issuer", webhook=True)}
    ca_issuer = issuers[serving["spec"]["issuerRef"]["name"]]
    ca = next(c for c in certificates.values() if c["spec"].get("isCA"))
    assert ca_issuer["spec"]["ca"]["secretName"] == ca["spec"]["secretName"]
    assert issuers[ca["spec"]["issuerRef"]["name"]]["spec"] == {"selfSigned": {}}


def test_nothing_of_the_webhook_when_disabled(tmp_path: Path) -> None:
    objects = template({"admissionWebhook": {"enabled": False}}, tmp_path)
    labels = [o["metadata"].get("labels") or {} for o in objects]
    assert not [
        label for label in labels if label.get("app.kubernetes.io/component") == "admission-webhook"
    ]
    assert not [o for o in objects if o["kind"] == "ValidatingWebhookConfiguration"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"failurePolicy": "Sometimes"}, "at '/admissionWebhook/failurePolicy'"),
        ({"timeoutSeconds": 11}, "at '/admissionWebhook/timeoutSeconds': maximum"),
        ({"replica": 2}, "additional properties 'replica' not allowed"),
    ],
)
def test_bad_values_are_refused(values: dict[str, Any], message: str, tmp_path: Path) -> None:
    written = write_values(tmp_path, {"admissionWebhook": values})
    result = helm("template", "kimi", str(CHART), "--values", str(written), check=False)
    assert result.returncode != 0
    assert message in result.stderr


def test_notes_name_the_webhook() -> None:
    result = helm("install", "kimi", str(CHART), "--dry-run=client", "--namespace", "kimi-system")
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "the admission webhook: Deployment/kimi-kimi-operator-webhook (2 replicas)" in notes
    assert "failurePolicy Ignore; TLS by a CA generated by Helm" in notes


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedApiServer]:
    """The embedded API server as the cluster `helm --dry-run=server` reads (its `lookup`s).

    What helm's discovery needs of it beyond kmock's: a version the chart accepts, the core
    group's groupVersion `v1` (kmock says `/v1`) with verbs, and Deployments served."""
    served = ApiServer._serve_version

    async def version(_: ApiServer, __: Any) -> dict[str, str]:
        return {"major": "1", "minor": "34", "gitVersion": "v1.34.0"}

    async def resources(self: ApiServer, request: Any) -> Any:
        payload: Any = await served(self, request)
        payload["groupVersion"] = payload["groupVersion"].lstrip("/")
        for resource in payload["resources"]:
            resource["verbs"] = resource["verbs"] or ["get", "list", "create", "patch"]
        return payload

    monkeypatch.setattr(ApiServer, "_serve_server_version", version)
    monkeypatch.setattr(ApiServer, "_serve_version", resources)
    with EmbeddedApiServer() as api:
        deployments = kmock.ResourceInfo(kind="Deployment", namespaced=True)
        api.call(lambda server: server.resources.__setitem__("apps/v1/deployments", deployments))
        yield api


def test_helm_upgrade_keeps_the_generated_certificates(
    cluster: EmbeddedApiServer, tmp_path: Path
) -> None:
    first = _one(template({}, tmp_path), "Secret")
    another = _one(template({}, tmp_path), "Secret")
    assert another["data"] != first["data"]  # each render without a cluster generates anew
    installed = copy.deepcopy(first)  # as `helm install` left it
    installed["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "Helm"
    installed["metadata"]["annotations"] = {
        "meta.helm.sh/release-name": "kimi",
        "meta.helm.sh/release-namespace": "kimi-system",
    }
    cluster.store([installed])
    kubeconfig = write_kubeconfig(cluster.url, tmp_path / "kubeconfig")
    result = helm(
        "template", "kimi", str(CHART), "--namespace", "kimi-system", "--dry-run=server",
        "--disable-openapi-validation", "--kubeconfig", str(kubeconfig),
    )  # fmt: skip
    upgraded = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    assert _one(upgraded, "Secret")["data"] == first["data"]
    assert _webhook(upgraded)["clientConfig"]["caBundle"] == first["data"]["ca.crt"]
