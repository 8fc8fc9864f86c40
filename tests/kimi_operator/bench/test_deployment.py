"""`--deployment NAMESPACE/NAME` against the embedded API server on 127.0.0.1, as a user whose
token RBAC lets read KimiDeployments in the namespace (and, in a pod, a small HTTPS server: the
embedded one speaks plain HTTP)."""

import asyncio
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from kimi_operator.embedded.faults import Fault
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.processes import free_port
from tests.support.bench import Cli, results
from tests.support.cluster import older_crd

PATH = "/apis/kimi-operator.io/v1alpha1/namespaces/{namespace}/kimideployments/{name}"
NAMESPACE = "inference"
# What the user running the benchmark may do: read KimiDeployments in its namespace.
READER = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "bench", "namespace": NAMESPACE},
        "rules": [
            {"apiGroups": ["kimi-operator.io"], "resources": ["kimideployments"], "verbs": ["get"]}
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "bench", "namespace": NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "bench"},
        "subjects": [{"kind": "ServiceAccount", "name": "bench", "namespace": NAMESPACE}],
    },
]


def deployment(endpoint: str, backend: str = "latency_specialized") -> dict[str, Any]:
    return {
        "apiVersion": "kimi-operator.io/v1alpha1",
        "kind": "KimiDeployment",
        "metadata": {"name": "k3", "namespace": NAMESPACE},
        "spec": {
            "model": {"name": "moonshotai/Kimi-K3"},
            "gpus": 16,
            "replicas": 1,
            "decode": {"backend": backend},
        },
        "status": {"endpoint": endpoint},
    }


def bench_k3(out: Path, *extra: str, output_tokens: int = 2) -> list[str]:
    """`kimi-operator bench` of deployment inference/k3: one request, no warm-up, into `out`."""
    return [
        "bench", "--deployment", "inference/k3", "--requests", "1",
        "--output-tokens", str(output_tokens), "--output", str(out), "--warmup", "0", *extra,
    ]  # fmt: skip


def kubeconfig(path: Path, server: str, token: str = "sesame") -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{server}'}}}}]\n"
        f"users: [{{name: fake, user: {{token: {token}}}}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: fake}}]\n"
    )
    return path


@dataclass
class Cluster:
    server: EmbeddedApiServer
    reader: str  # the token of the ServiceAccount allowed to read (READER)
    kubeconfig: Path  # with that token

    def put(self, body: dict[str, Any]) -> None:
        """Keep inference/k3 as given, status included (the any-spec CRD admits anything)."""
        kind = {"apiVersion": "kimi-operator.io/v1alpha1", "kind": "KimiDeployment"}
        self.server.store([kind | body | {"metadata": {"name": "k3", "namespace": NAMESPACE}}])

    def reads(self) -> list[tuple[str, bool]]:
        """(user, allowed) of each authorization decision on reading a KimiDeployment."""
        return sorted(
            (c.user, c.allowed)
            for c in self.server.checks()
            if (c.resource, c.verb) == ("kimideployments", "get")
        )


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    with EmbeddedApiServer() as server:
        server.install_crds([older_crd()])
        server.store(READER)
        reader = server.issue_token(NAMESPACE, "bench")
        config = kubeconfig(tmp_path / "kubeconfig", server.url, reader)
        monkeypatch.setenv("KUBECONFIG", str(config))
        yield Cluster(server, reader, config)


def test_the_endpoint_model_and_gpus_come_from_the_deployment(
    cli: Cli, api: Cluster, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.001, step_s=0.001)
    api.put(deployment(url, backend="auto"))
    out = tmp_path / "out"
    run = cli(*bench_k3(out, "--gpu-hour-price", "3", output_tokens=3))
    assert run.code == 0, run.err
    assert api.reads() == [("system:serviceaccount:inference:bench", True)]  # the token's user
    data = results(out)
    config = data["config"]
    assert config["endpoint"] == url
    assert config["deployment"] == "inference/k3"
    assert config["model"] == "moonshotai/Kimi-K3"
    assert config["gpus"] == 16
    assert data["summary"]["cost_per_request_usd"] is not None
    # The stub says latency_specialized while the spec asks for auto: that is worth a warning.
    assert config["server"]["decode_backend"] == "latency_specialized"
    assert any("asks for decode backend 'auto'" in w for w in data["summary"]["warnings"])


NOT_READY = {
    "spec": {},
    "status": {
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "MissingAPI",
                "message": "LeaderWorkerSet API not installed",
            }
        ]
    },
}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (None, "error: KimiDeployment inference/k3 not found"),
        (
            NOT_READY,
            "error: KimiDeployment inference/k3 has no endpoint yet: "
            "LeaderWorkerSet API not installed",
        ),
        ({"spec": {}}, "has no endpoint yet: the operator has not reported one"),
        ({"spec": {}, "status": {"endpoint": "not a url"}}, "endpoint 'not a url'"),
    ],
)
def test_deployment_problems(
    cli: Cli, api: Cluster, tmp_path: Path, body: dict[str, Any] | None, says: str
) -> None:
    if body is not None:
        api.put(body)
    run = cli("bench", "--deployment", "inference/k3", "--output", str(tmp_path))
    assert run.code == 2
    assert run.err.count("\n") == 1
    assert run.err.startswith("error: ")
    assert says in run.err


def test_a_user_rbac_does_not_let_read_it(
    cli: Cli, api: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.put(deployment("http://127.0.0.1:9/v1"))
    other = api.server.issue_token(NAMESPACE, "nobody")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "other", api.server.url, other)))
    run = cli("bench", "--deployment", "inference/k3", "--output", str(tmp_path / "out"))
    assert run.code == 2
    assert run.err == "error: not allowed to read KimiDeployment inference/k3: HTTP 403\n"
    assert api.reads() == [("system:serviceaccount:inference:nobody", False)]


def test_a_server_error(cli: Cli, api: Cluster, tmp_path: Path) -> None:
    api.put(deployment("http://127.0.0.1:9/v1"))
    api.server.inject(Fault("GET", "/kimideployments/k3", 500, times=100))
    run = cli("bench", "--deployment", "inference/k3", "--output", str(tmp_path / "out"))
    assert run.code == 2
    assert run.err.count("\n") == 1
    assert run.err.startswith("error: reading KimiDeployment inference/k3: HTTP 500")


def test_unreachable_api_server(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kubeconfig", server)))
    run = cli("bench", "--deployment", "inference/k3", "--output", str(tmp_path))
    assert run.code == 2
    assert run.err.count("\n") == 1
    assert run.err.startswith(f"error: cannot reach the Kubernetes API at {server}: ")


def test_no_kubernetes_access(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    run = cli("bench", "--deployment", "inference/k3", "--output", str(tmp_path))
    assert run.code == 2
    assert run.err == (
        "error: --deployment needs Kubernetes access: no kubeconfig (KUBECONFIG, ~/.kube/config) "
        "and not running in a cluster\n"
    )


def test_replicas_multiply_gpus_and_metrics_come_from_one_of_them(
    cli: Cli, api: Cluster, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.001, step_s=0.001)
    body = deployment(url)
    body["spec"]["replicas"] = 2
    api.put(body)
    out = tmp_path / "out"
    run = cli(*bench_k3(out))
    assert run.code == 0, run.err
    data = results(out)
    assert data["config"]["gpus"] == 32
    assert "/metrics came from one of 2 replicas behind the Service" in data["summary"]["warnings"]


class TlsApi:
    """An HTTPS API server answering one GET of a KimiDeployment: what a pod reaches, and what
    the embedded API server (plain HTTP) cannot stand in for."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.auth: list[str | None] = []
        self.app = web.Application()
        self.app.router.add_get(PATH, self._get)

    async def _get(self, request: web.Request) -> web.Response:
        self.auth.append(request.headers.get("Authorization"))
        key = (request.match_info["namespace"], request.match_info["name"])
        if key not in self.objects:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return web.json_response(self.objects[key])


@pytest.fixture
def tls_api(tmp_path: Path) -> Iterator[tuple[TlsApi, int, Path]]:
    """An API server over HTTPS with a self-signed certificate for 127.0.0.1."""
    cert, key = tmp_path / "ca.crt", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    fake = TlsApi()

    async def listen() -> tuple[web.AppRunner, int]:
        runner = web.AppRunner(fake.app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
        return runner, runner.addresses[0][1]

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner, port = asyncio.run_coroutine_threadsafe(listen(), loop).result(10)
    try:
        yield fake, port, cert
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_in_a_pod_the_service_account_is_used(
    cli: Cli,
    tls_api: tuple[TlsApi, int, Path],
    stub: Callable[..., tuple[str, object]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the rendered Job relies on: no kubeconfig, the pod's token and CA, HTTPS."""
    from kubernetes.config import incluster_config  # noqa: PLC0415

    fake, port, cert = tls_api
    token = tmp_path / "token"
    token.write_text("pod-token")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(cert))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(port))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    url, _ = stub(ttft_s=0.001, step_s=0.001)
    fake.objects["inference", "k3"] = deployment(url)
    out = tmp_path / "out"
    run = cli(*bench_k3(out))
    assert run.code == 0, run.err
    assert [a and a.lower() for a in fake.auth] == ["bearer pod-token"]  # the scheme is any case
    assert results(out)["config"]["endpoint"] == url


JAEGER = "https://jaeger.example/trace/{trace_id}"
TEMPO = "https://tempo.example/t/{trace_id}"


@pytest.mark.parametrize(
    ("extra", "wanted"),
    [((), JAEGER), (("--trace-url", TEMPO), TEMPO)],
    ids=["the deployment's", "the flag's first"],
)
def test_the_slowest_turns_link_to_the_deployments_trace_ui(
    cli: Cli,
    api: Cluster,
    stub: Callable[..., tuple[str, object]],
    tmp_path: Path,
    *,
    extra: tuple[str, ...],
    wanted: str,
) -> None:
    """status.traceUrl (spec.observability.tracing.uiUrl, or the operator's default) links the
    report's slowest turns when --trace-url does not say otherwise."""
    url, _ = stub(ttft_s=0.001, step_s=0.001)
    body = deployment(url)
    body["status"]["traceUrl"] = JAEGER
    api.put(body)
    out = tmp_path / "out"
    run = cli(*bench_k3(out, *extra))
    assert run.code == 0, run.err
    data = results(out)
    assert data["config"]["trace_url"] == wanted
    (request,) = data["requests"]
    link = wanted.replace("{trace_id}", request["trace_id"])
    assert f"[`{request['trace_id']}`]({link})" in (out / "report.md").read_text()
