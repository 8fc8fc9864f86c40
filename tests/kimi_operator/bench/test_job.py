"""`bench --render-job`: manifests that a 1.33 API server would accept, running the same bench."""

from importlib.metadata import version
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kimi_operator.bench.job import default_image
from tests.support.bench import Cli

K8S_VERSION = "1.33"


def render(cli: Cli, *args: str) -> list[dict[str, Any]]:
    run = cli("bench", "--render-job", *args)
    assert run.code == 0, run.err
    docs = list(yaml.safe_load_all(run.out))
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    return docs


def test_job_against_a_deployment(cli: Cli) -> None:
    docs = render(
        cli,
        "--deployment",
        "inference/k3",
        "--profile",
        "long-context",
        "--requests",
        "20",
        "--gpu-hour-price",
        "3.5",
        "--concurrency",
        "2",
    )
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding", "Job"]
    assert {d["metadata"]["namespace"] for d in docs} == {"inference"}
    role = docs[1]
    assert role["rules"] == [
        {
            "apiGroups": ["kimi-operator.io"],
            "resources": ["kimideployments"],
            "resourceNames": ["k3"],
            "verbs": ["get"],
        }
    ]
    job = docs[-1]
    assert job["metadata"]["name"] == "kimi-bench-k3-long-context"
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "kimi-bench-k3-long-context"
    container = pod["containers"][0]
    tag = version("kimi-operator")
    bench_image = f"ghcr.io/kimi-operator/kimi-operator-bench:{tag}"
    assert container["image"] == default_image() == bench_image
    assert container["command"] == [
        "kimi-operator",
        "bench",
        "--deployment",
        "inference/k3",
        "--profile",
        "long-context",
        "--api",
        "completions",
        "--concurrency",
        "2",
        "--requests",
        "20",
        "--warmup",
        "1",
        "--gpu-hour-price",
        "3.5",
        "--timeout",
        "600.0",
        "--traceparent-sampling",
        "1.0",
        "--output",
        "/results/kimi-bench-k3-long-context",
        "--force",
    ]
    assert "cpu" not in container["resources"]["limits"]
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_the_job_command_parses_as_the_same_benchmark(cli: Cli) -> None:
    from kimi_operator.cli import build_parser  # noqa: PLC0415

    args = [
        "--deployment",
        "inference/k3",
        "--profile",
        "headline",
        "--gpus",
        "16",
        "--model",
        "m",
        "--no-ignore-eos",
        "--output-tokens",
        "500",
    ]
    command = render(cli, *args)[-1]["spec"]["template"]["spec"]["containers"][0]["command"]
    local = build_parser().parse_args(["bench", *args])
    in_cluster = build_parser().parse_args(command[1:])
    ignored = {"output", "force", "render_job", "run"}
    assert {k: v for k, v in vars(local).items() if k not in ignored} == {
        k: v for k, v in vars(in_cluster).items() if k not in ignored
    }


def test_job_against_an_endpoint_with_a_trace_and_a_pvc(cli: Cli, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"start_s": 0, "prompt_tokens": 100, "output_tokens": 20, "fanout": 2}\n')
    docs = render(
        cli,
        "--endpoint",
        "http://k3-auto.inference.svc:8000/v1",
        "--profile",
        "agentic",
        "--trace",
        str(trace),
        "--replay",
        "open",
        "--namespace",
        "bench",
        "--results-pvc",
        "bench-results",
        "--image",
        "registry.local/op:1",
    )
    assert [d["kind"] for d in docs] == ["ConfigMap", "Job"]
    assert docs[0]["data"] == {
        "trace.jsonl": '{"start_s":0.0,"prompt_tokens":100,"output_tokens":20,"fanout":2}\n'
    }
    job = docs[1]
    assert job["metadata"] == {
        "name": "kimi-bench-k3-auto-agentic",
        "namespace": "bench",
        "labels": {
            "app.kubernetes.io/name": "kimi-operator-bench",
            "app.kubernetes.io/part-of": "kimi-operator",
        },
    }
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod
    assert {"name": "results", "persistentVolumeClaim": {"claimName": "bench-results"}} in pod[
        "volumes"
    ]
    command = pod["containers"][0]["command"]
    assert command[-2:] == ["--trace", "/trace/trace.jsonl"]
    assert command[command.index("--replay") + 1] == "open"
    assert pod["containers"][0]["image"] == "registry.local/op:1"


def test_long_names_are_cut_to_a_valid_name(cli: Cli) -> None:
    name = "a" * 40
    job = render(cli, "--deployment", f"ns/{name}", "--profile", "long-context")[-1]
    assert len(job["metadata"]["name"]) <= 63
    assert not job["metadata"]["name"].endswith("-")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--endpoint", "http://k3:8000/v1", "--api-key", "secret"], "does not write API keys"),
        (["--endpoint", "k3:8000"], "expected an http(s) URL"),
        (["--deployment", "k3"], "expected NAMESPACE/NAME"),
        (
            ["--endpoint", "http://k3:8000/v1", "--profile", "agentic", "--trace", "/nope"],
            "cannot read the trace",
        ),
    ],
)
def test_render_job_input_errors(cli: Cli, args: list[str], says: str) -> None:
    run = cli("bench", "--render-job", *args)
    assert run.code == 2
    assert run.out == ""
    assert run.err.count("\n") == 1
    assert says in run.err


def test_job_in_another_namespace_still_may_read_the_deployment(cli: Cli) -> None:
    docs = render(cli, "--deployment", "inference/k3", "--namespace", "bench")
    where = {d["kind"]: d["metadata"]["namespace"] for d in docs}
    assert where == {
        "ServiceAccount": "bench",
        "Role": "inference",
        "RoleBinding": "inference",
        "Job": "bench",
    }
    assert docs[2]["subjects"] == [
        {"kind": "ServiceAccount", "name": "kimi-bench-k3-headline", "namespace": "bench"}
    ]


@pytest.mark.parametrize(
    ("endpoint", "name"),
    [
        ("http://10.0.0.5:8000/v1", "kimi-bench-10-headline"),
        ("http://[fd00::5]:8000/v1", "kimi-bench-fd00-5-headline"),
        ("https://K3.Example.com/v1", "kimi-bench-k3-headline"),
    ],
)
def test_job_names_from_endpoints_are_valid(cli: Cli, endpoint: str, name: str) -> None:
    assert render(cli, "--endpoint", endpoint)[-1]["metadata"]["name"] == name


def test_a_trace_too_large_for_a_configmap(cli: Cli, tmp_path: Path) -> None:
    trace = tmp_path / "big.jsonl"
    line = '{"start_s": 0, "prompt_tokens": 100, "output_tokens": 20, "prefix_group": "%s"}\n'
    trace.write_text("".join(line % ("g" * 40 + str(i)) for i in range(20_000)))
    run = cli(
        "bench",
        "--render-job",
        "--endpoint",
        "http://k3:8000/v1",
        "--profile",
        "agentic",
        "--trace",
        str(trace),
    )
    assert run.code == 2
    assert run.err == f"error: {trace}: too large for a ConfigMap (1,000,000 bytes)\n"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--render-job", "--output", "runs/a"], "drop --output/--force"),
        (["--image", "x:1", "--output", "runs/a"], "go with --render-job"),
        (["--results-pvc", "c", "--output", "runs/a"], "go with --render-job"),
    ],
)
def test_job_options_out_of_place(cli: Cli, args: list[str], says: str) -> None:
    run = cli("bench", "--endpoint", "http://127.0.0.1:1/v1", *args)
    assert run.code == 2
    assert says in run.err
    assert run.err.count("\n") == 1
