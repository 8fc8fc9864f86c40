"""`--deployment NAMESPACE/NAME` against a small fake Kubernetes API server on 127.0.0.1."""

import asyncio
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from kimi_operator.bench.stub import serve_app_in_thread
from tests.support.bench import Cli, results

PATH = "/apis/kimi-operator.io/v1alpha1/namespaces/{namespace}/kimideployments/{name}"


def deployment(endpoint: str, backend: str = "latency_specialized") -> dict[str, Any]:
    return {
        "apiVersion": "kimi-operator.io/v1alpha1",
        "kind": "KimiDeployment",
        "metadata": {"name": "k3", "namespace": "inference"},
        "spec": {
            "model": {"name": "moonshotai/Kimi-K3"},
            "gpus": 16,
            "replicas": 1,
            "decode": {"backend": backend},
        },
        "status": {"endpoint": endpoint},
    }


class FakeAPI:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.status = 200
        self.auth: list[str | None] = []
        self.app = web.Application()
        self.app.router.add_get(PATH, self._get)

    async def _get(self, request: web.Request) -> web.Response:
        self.auth.append(request.headers.get("Authorization"))
        if self.status != 200:
            return web.json_response({"kind": "Status", "code": self.status}, status=self.status)
        key = (request.match_info["namespace"], request.match_info["name"])
        if key not in self.objects:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return web.json_response(self.objects[key])


def bench_k3(out: Path, *extra: str, output_tokens: int = 2) -> list[str]:
    """`kimi-operator bench` of deployment inference/k3: one request, no warm-up, into `out`."""
    return [
        "bench", "--deployment", "inference/k3", "--requests", "1",
        "--output-tokens", str(output_tokens), "--output", str(out), "--warmup", "0", *extra,
    ]  # fmt: skip


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: fake, user: {token: sesame}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: fake}}]\n"
    )
    return path


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAPI]:
    fake = FakeAPI()
    with serve_app_in_thread(fake.app) as root:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kubeconfig", root)))
        yield fake


def test_the_endpoint_model_and_gpus_come_from_the_deployment(
    cli: Cli, api: FakeAPI, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.001, step_s=0.001)
    api.objects["inference", "k3"] = deployment(url, backend="auto")
    out = tmp_path / "out"
    run = cli(*bench_k3(out, "--gpu-hour-price", "3", output_tokens=3))
    assert run.code == 0, run.err
    assert api.auth == ["Bearer sesame"]
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


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ((200, None), "error: KimiDeployment inference/k3 not found"),
        ((403, None), "error: not allowed to read KimiDeployment inference/k3: HTTP 403"),
        ((500, None), "error: reading KimiDeployment inference/k3: HTTP 500"),
        (
            (
                200,
                {
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
                },
            ),
            "error: KimiDeployment inference/k3 has no endpoint yet: "
            "LeaderWorkerSet API not installed",
        ),
        ((200, {"spec": {}}), "has no endpoint yet: the operator has not reported one"),
        ((200, {"spec": {}, "status": {"endpoint": "not a url"}}), "endpoint 'not a url'"),
    ],
)
def test_deployment_problems(
    cli: Cli, api: FakeAPI, tmp_path: Path, answer: tuple[int, dict[str, Any] | None], says: str
) -> None:
    api.status, body = answer
    if body is not None:
        api.objects["inference", "k3"] = body
    run = cli("bench", "--deployment", "inference/k3", "--output", str(tmp_path))
    assert run.code == 2
    assert run.err.count("\n") == 1
    assert run.err.startswith("error: ")
    assert says in run.err


def test_unreachable_api_server(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = f"http://127.0.0.1:{port}"
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
    cli: Cli, api: FakeAPI, stub: Callable[..., tuple[str, object]], tmp_path: Path
) -> None:
    url, _ = stub(ttft_s=0.001, step_s=0.001)
    body = deployment(url)
    body["spec"]["replicas"] = 2
    api.objects["inference", "k3"] = body
    out = tmp_path / "out"
    run = cli(*bench_k3(out))
    assert run.code == 0, run.err
    data = results(out)
    assert data["config"]["gpus"] == 32
    assert "/metrics came from one of 2 replicas behind the Service" in data["summary"]["warnings"]


@pytest.fixture
def tls_api(tmp_path: Path) -> Iterator[tuple[FakeAPI, int, Path]]:
    """The fake API server over HTTPS with a self-signed certificate for 127.0.0.1."""
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
    fake = FakeAPI()

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
    tls_api: tuple[FakeAPI, int, Path],
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
