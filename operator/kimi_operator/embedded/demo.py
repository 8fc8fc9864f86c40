"""`kimi-operator demo`: the operator live on the embedded API server, no cluster needed.

Starts the API server on 127.0.0.1, installs the KimiDeployment CRD and the upstream CRDs it
needs, shows the rejected samples refused by the server as `kubectl apply` shows it, runs the
operator as the chart's ServiceAccount (its RBAC enforced), applies the sample deployments, runs
the weights Jobs of Hugging Face sources for real against a fake hub serving a tiny generated
repository (embedded.jobs), plays the kubelet (says so), prints a `kubectl get kimi` table and the
children, and shuts everything down.
"""

import asyncio
import base64
import contextlib
import copy
import json
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import yaml

from kimi_operator.admission.server import ServeConfig, serve
from kimi_operator.api.status import condition
from kimi_operator.api.validation import check_document
from kimi_operator.embedded.chart import CHART, RELEASE, webhook_configuration
from kimi_operator.embedded.chart import NAMESPACE as CHART_NAMESPACE
from kimi_operator.embedded.clients import Kubectl, step
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.hub import FakeHub
from kimi_operator.embedded.jobs import SECRET, JobRunner
from kimi_operator.embedded.kubelet import mark_ready
from kimi_operator.embedded.processes import wait
from kimi_operator.embedded.upstream import child_crds
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.resources import (
    BUILT_IN,
    CHILD_RESOURCES,
    DEPLOYMENT,
    EVENT,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
)
from kimi_operator.run_args import operator_defaults, parse_run_arguments
from kimi_operator.runner import OperatorThread, RunConfig

CHART_OPERATOR = "app.kubernetes.io/component=operator"  # the chart's operator Deployment
RESYNC_S = 1.0
BAD_ARGS = '["--max-num-batched-tokens", "abc"]'  # CEL lets it through, vLLM's parser does not
TIMEOUT_S = 20.0
DEMO_TOKEN = "hf_demoToken"  # the fake hub's, for the samples' token Secrets
# The tiny repository the fake hub serves for every Hugging Face source of the samples.
DEMO_FILES = {
    "config.json": b'{"model_type": "kimi_k3"}',
    "model-00001-of-00001.safetensors": bytes(range(256)) * 64,
    "tokenizer_config.json": b"{}",
}


class DemoError(Exception):
    """The demo could not run (missing input) or the operator did not get there in time."""


def _wait(probe: Callable[[], bool], what: str) -> None:
    try:
        wait(probe, TIMEOUT_S, what, every=0.05)
    except TimeoutError as error:
        raise DemoError(str(error)) from None


def _condition(kd: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return condition(kd.get("status") or {}, kind)


def _child_line(child: Mapping[str, Any]) -> str:
    name = f"{child['kind']}/{child['metadata']['name']}"
    if child["kind"] != LEADER_WORKER_SET.kind:
        return name
    lwt = child["spec"]["leaderWorkerTemplate"]
    args = lwt["leaderTemplate"]["spec"]["containers"][0]["args"]
    tp = args[args.index("--tensor-parallel-size") + 1]
    ready = (child.get("status") or {}).get("readyReplicas", 0)
    return f"{name}  ({lwt['size']} pods, TP {tp}, ready groups {ready})"


def summary(client: Client, deployment: Mapping[str, Any]) -> list[str]:
    """The children of one deployment and its conditions, one line each."""
    meta = deployment["metadata"]
    lines = [f"{meta['namespace']}/{meta['name']}:"]
    for resource in CHILD_RESOURCES:
        if resource not in BUILT_IN and not client.served(resource):
            continue
        for child in client.list(resource, meta["namespace"]):
            if (
                child["metadata"].get("labels", {}).get("app.kubernetes.io/instance")
                == meta["name"]
            ):
                lines.append(f"  {_child_line(child)}")
    for weights in (deployment.get("status") or {}).get("weights", []):
        lines.append(
            f"  PersistentVolumeClaim/{weights['claimName']} and Job/{weights['claimName']}  "
            f"(weights cache, shared: {weights['repo']}@{weights['commit'][:12]})"
        )
    for shown in (deployment.get("status") or {}).get("conditions", []):
        lines.append(
            f"  condition {shown['type']}={shown['status']} ({shown['reason']}: {shown['message']})"
        )
    return lines


def _load_samples(samples: Path, out: TextIO) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(samples.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if check_document(doc).deployment is None:
            print(
                f"  skipping {path.name}: invalid (see `kimi-operator validate {path}`)", file=out
            )
            continue
        docs.append(doc)
    if not docs:
        raise DemoError(f"no valid KimiDeployment samples in {samples}")
    return docs


def _all_reconciled(client: Client) -> bool:
    items = client.list(KIMI_DEPLOYMENT)
    return all(
        (kd.get("status") or {}).get("observedGeneration") == kd["metadata"]["generation"]
        for kd in items
    )


def _sources(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = doc["spec"]
    sources = [spec["model"]["source"], (spec.get("speculative") or {}).get("draftSource") or {}]
    return [s["huggingface"] for s in sources if "huggingface" in s]


def fake_hub(client: Client, docs: list[dict[str, Any]]) -> FakeHub:
    """A hub serving DEMO_FILES for every Hugging Face repository of `docs` (private where a
    token is referenced, its Secret created holding DEMO_TOKEN)."""
    hub = FakeHub()
    for doc in docs:
        for source in _sources(doc):
            ref = source.get("tokenSecretRef")
            hub.push(source["repo"], DEMO_FILES, source.get("revision", "main"), ref and DEMO_TOKEN)
            if ref is not None:
                secret = {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": ref["name"], "namespace": doc["metadata"]["namespace"]},
                    "data": {ref["key"]: base64.b64encode(DEMO_TOKEN.encode()).decode()},
                }
                client.create(SECRET, secret)
    return hub


def _weights_ready(client: Client) -> bool:
    return all(
        _condition(kd, "WeightsReady").get("status") == "True"
        for kd in client.list(KIMI_DEPLOYMENT)
    )


def settled(kd: Mapping[str, Any]) -> bool:
    """What the demo prints once the groups and ComputeDomains are marked ready: Ready, and no
    ComputeDomain still counted as not ready (MNNVLReady may trail Ready by a reconcile)."""
    mnnvl = _condition(kd, "MNNVLReady").get("reason")
    return _condition(kd, "Ready").get("status") == "True" and mnnvl != "ComputeDomainNotReady"


def _all_ready(client: Client) -> bool:
    return all(settled(kd) for kd in client.list(KIMI_DEPLOYMENT))


def _refused_apply(kubectl: Kubectl, good: Mapping[str, Any], rejected: Path, work: Path) -> None:
    """`kubectl apply` of a good sample edited to break one CEL rule (the server's message is the
    rule's, as `validate` words it less the value it got), then of the rejected samples."""
    edited = copy.deepcopy(dict(good))
    edited["spec"]["kvCache"] = {"dtype": "bfloat16"}
    name = edited["metadata"]["name"]
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(edited))
    kubectl.out.write(f"# {path.name}: {name} with spec.kvCache.dtype: bfloat16\n")
    kubectl.run("apply", "-f", str(path), check=False)
    for problem in check_document(edited).problems:
        print(f"$ kimi-operator validate {path.name}\n{path.name}: {problem}", file=kubectl.out)
    kubectl.run("apply", "-f", str(rejected), check=False)


@contextlib.contextmanager
def admission_webhook() -> Iterator[str]:
    """`kimi-operator admission --insecure` (plain HTTP on 127.0.0.1) in a thread: its URL."""
    urls: queue.Queue[str] = queue.Queue()
    loop = asyncio.new_event_loop()
    config = ServeConfig(address="127.0.0.1", port=0)
    task = loop.create_task(serve(config, urls.put))

    def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # stopped
            loop.run_until_complete(task)
        loop.close()

    thread = threading.Thread(target=run, name="admission-webhook", daemon=True)
    thread.start()
    try:
        yield urls.get(timeout=TIMEOUT_S)
    finally:
        loop.call_soon_threadsafe(task.cancel)
        thread.join(timeout=TIMEOUT_S)


def _webhook_refusal(
    kubectl: Kubectl, api: EmbeddedApiServer, url: str, good: Mapping[str, Any], work: Path
) -> None:
    """The chart's ValidatingWebhookConfiguration pointed at `kimi-operator admission` on
    127.0.0.1 (as the operator, the webhook runs locally: there is no cluster network), then
    `kubectl apply` of a good sample with engineArgs that CEL lets through: refused by the webhook
    with the model's message."""
    api.store([webhook_configuration(url)])
    edited = copy.deepcopy(dict(good))
    edited["spec"]["engineArgs"] = json.loads(BAD_ARGS)
    name = edited["metadata"]["name"]
    path = work / f"{name}-args.yaml"
    path.write_text(yaml.safe_dump(edited))
    kubectl.out.write(f"# {path.name}: {name} with spec.engineArgs: {BAD_ARGS}\n")
    kubectl.run("apply", "-f", str(path), check=False)


def chart_operator(api: EmbeddedApiServer, deployment: Mapping[str, Any]) -> RunConfig:
    """The operator as the chart deployed it (`deployment`, the chart's operator Deployment): its
    ServiceAccount's identity (a token the server issues for it, as the kubelet mounts one) and
    the arguments the chart rendered for its container; only the resync interval is the demo's
    (1 s) and it serves no health or metrics ports."""
    pod = deployment["spec"]["template"]["spec"]
    args = parse_run_arguments(pod["containers"][0]["args"])
    token = api.issue_token(deployment["metadata"]["namespace"], pod["serviceAccountName"])
    return RunConfig(
        server=api.url,
        token=token,
        namespaces=tuple(args.namespace or ()),
        defaults=operator_defaults(args),
        resync_interval_s=RESYNC_S,
        workers=args.workers,
        traces_endpoint=args.operator_traces_endpoint,
    )


def _kubectl_tour(kubectl: Kubectl, client: Client, doc: Mapping[str, Any]) -> None:
    """kubectl describe, scale and explain on one running deployment."""
    step(kubectl.out, "kubectl describe, scale, explain")
    name, namespace = doc["metadata"]["name"], doc["metadata"]["namespace"]
    kubectl.run("describe", "kimi", name, "-n", namespace)
    kubectl.run("scale", "kimi", name, "-n", namespace, "--replicas=2")
    _wait(lambda: _all_reconciled(client), "the operator to reconcile the new scale")
    kubectl.run("get", "kimi", name, "-n", namespace)
    kubectl.run("explain", "kimideployment.spec.gpus")


def run_demo(samples: Path, out: TextIO) -> None:
    started = time.monotonic()
    docs = _load_samples(samples, out)
    upstream = child_crds()
    with (
        EmbeddedApiServer() as api,
        tempfile.TemporaryDirectory(prefix="kimi-demo-") as work,
        admission_webhook() as webhook_url,
    ):
        print(f"embedded API server (kmock emulator) listening on {api.url}", file=out)
        api.install_crds([*upstream])
        for installed in upstream:
            print(f"  installed CRD {installed['metadata']['name']} (its own operator's)", file=out)
        kubectl = Kubectl.for_server(api.url, Path(work), out)
        client = Client(load_configuration(api.url))

        step(out, "the chart, installed by helm (the operator runs locally, as the chart says)")
        kubectl.helm(
            "install",
            RELEASE,
            str(CHART),
            "--namespace",
            CHART_NAMESPACE,
            "--create-namespace",
            "--hide-notes",
        )
        (deployment,) = client.list(DEPLOYMENT, CHART_NAMESPACE, label_selector=CHART_OPERATOR)
        config = chart_operator(api, deployment)
        kubectl.run(
            "get",
            "deployment,serviceaccount,clusterrole",
            "-n",
            CHART_NAMESPACE,
            "-l",
            "app.kubernetes.io/instance=kimi",
        )

        step(out, "the API server applies the CRD's schema and CEL rules at admission")
        namespace = docs[0]["metadata"]["namespace"]
        kubectl.run("create", "namespace", namespace)
        _refused_apply(kubectl, docs[0], samples / "rejected", Path(work))

        step(out, "the admission webhook (kimi-operator admission, kopf) checks what CEL cannot")
        _webhook_refusal(kubectl, api, webhook_url, docs[0], Path(work))

        hub = fake_hub(client, docs)
        with OperatorThread(config):
            step(out, f"the operator as the chart's ServiceAccount, resync {RESYNC_S:.0f}s")
            kubectl.run("apply", "-f", str(samples))
            _wait(lambda: _all_reconciled(client), "the operator to reconcile every sample")
            kubectl.run("get", "kimi", "-A")

            print(
                "\nweights Jobs: the demo runs each resolve and download Job of a Hugging Face "
                "source for real (python -m kimi_kernels.weights against a fake hub on 127.0.0.1 "
                "serving a tiny generated repository; each claim a temporary directory):",
                file=out,
            )
            with hub.running():
                runner = JobRunner(client, hub.url, Path(work) / "volumes")

                def weights() -> bool:
                    for job in runner.run_pending():
                        print(f"  ran Job {job}", file=out)
                    return _weights_ready(client)

                _wait(weights, "every deployment's weights")
            print(
                "\nkubelet stand-in: there are no GPUs, nodes or pods behind this API server, so "
                "the demo now writes the status the LeaderWorkerSet controller and the NVIDIA DRA "
                "driver would write once the groups are up:",
                file=out,
            )

            def ready() -> bool:
                for marked in mark_ready(client):
                    print(f"  marked {marked} ready", file=out)
                return _all_ready(client)

            _wait(ready, "every deployment to report Ready")
            kubectl.run(
                "wait", "--for=condition=Ready", "kimi", "--all", "-n", namespace, "--timeout=20s"
            )
            kubectl.run("get", "kimi", "-A")

            single = [d for d in docs if d["spec"].get("replicas", 1) == 1]
            _kubectl_tour(kubectl, client, (single or docs)[0])
            print("\nchildren and conditions:", file=out)
            for deployment in client.list(KIMI_DEPLOYMENT):
                for line in summary(client, deployment):
                    print(line, file=out)
            print("\nwarning events:", file=out)
            for event in client.list(EVENT):
                obj = event["involvedObject"]
                print(
                    f"  {obj['namespace']}/{obj['name']}: {event['reason']}: {event['message']}",
                    file=out,
                )
            step(out, "kubectl delete")
            kubectl.run("delete", "kimi", docs[0]["metadata"]["name"], "-n", namespace)
        client.close()
        print("\noperator stopped", file=out)
    print(f"embedded API server stopped; demo took {time.monotonic() - started:.1f} s", file=out)
