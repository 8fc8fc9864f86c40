"""`kimi-operator demo`: the operator live on the embedded API server, no cluster needed.

Starts the API server on 127.0.0.1, installs the KimiDeployment CRD and the upstream CRDs it
needs, shows the rejected samples refused by the server as `kubectl apply` shows it, runs the
operator as the chart's ServiceAccount (its RBAC enforced), applies the sample deployments, runs
the weights Jobs of Hugging Face sources for real against a fake hub serving a tiny generated
repository (embedded.jobs), plays the kubelet (says so), prints a `kubectl get kimi` table and the
children, and shuts everything down.
"""

import base64
import copy
import datetime
import json
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import yaml

from kimi_operator.api.crd import crd
from kimi_operator.api.validation import check_document
from kimi_operator.embedded.chart import operator_identity
from kimi_operator.embedded.hub import FakeHub
from kimi_operator.embedded.jobs import SECRET, JobRunner
from kimi_operator.embedded.kubelet import mark_ready
from kimi_operator.embedded.server import EmbeddedApiServer
from kimi_operator.embedded.upstream import child_crds
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.resources import (
    BUILT_IN,
    CHILD_RESOURCES,
    EVENT,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
)
from kimi_operator.runner import OperatorThread, RunConfig

RESYNC_S = 1.0
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
    deadline = time.monotonic() + TIMEOUT_S
    while not probe():
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {TIMEOUT_S:.0f} s waiting for {what}")
        time.sleep(0.05)


def _condition(kd: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    conditions = (kd.get("status") or {}).get("conditions", [])
    found: Mapping[str, Any] = next((c for c in conditions if c["type"] == kind), {})
    return found


def _age(kd: Mapping[str, Any]) -> str:
    created = datetime.datetime.fromisoformat(kd["metadata"]["creationTimestamp"])
    seconds = int((datetime.datetime.now(datetime.UTC) - created).total_seconds())
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"


def table(deployments: list[dict[str, Any]]) -> str:
    """`kubectl get kimi -A`: the CRD's printer columns."""
    rows = [("NAMESPACE", "NAME", "GPUS", "BACKEND", "READY", "ENDPOINT", "AGE")]
    for kd in sorted(
        deployments, key=lambda d: (d["metadata"]["namespace"], d["metadata"]["name"])
    ):
        spec, status = kd["spec"], kd.get("status") or {}
        rows.append(
            (
                kd["metadata"]["namespace"],
                kd["metadata"]["name"],
                str(spec["gpus"]),
                spec.get("decode", {}).get("backend", "latency_specialized"),
                _condition(kd, "Ready").get("status", ""),
                status.get("endpoint", ""),
                _age(kd),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


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
    for condition in (deployment.get("status") or {}).get("conditions", []):
        lines.append(
            f"  condition {condition['type']}={condition['status']} "
            f"({condition['reason']}: {condition['message']})"
        )
    return lines


def kubectl_apply(url: str, doc: Mapping[str, Any]) -> str:
    """What `kubectl apply -f` prints for creating `doc` (strict field validation, as kubectl
    sends), from the API server's answer."""
    meta = doc["metadata"]
    path = KIMI_DEPLOYMENT.collection(meta["namespace"]) + "?fieldValidation=Strict"
    body = json.dumps(doc).encode()
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url + path, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10):
            return f"kimideployment.kimi-operator.io/{meta['name']} created"
    except urllib.error.HTTPError as error:
        status = json.loads(error.read())
    details = status.get("details") or {}
    causes = [f"{c['field']}: {c['message']}" for c in details.get("causes", [])]
    if not causes:
        return f"Error from server ({status['reason']}): {status['message']}"
    head = f"The {details['kind']} {json.dumps(details['name'])} is invalid: "
    return head + (causes[0] if len(causes) == 1 else "\n" + "\n".join(f"* {c}" for c in causes))


def _show_refusals(url: str, good: Mapping[str, Any], rejected: Path, out: TextIO) -> None:
    """`kubectl apply` of a good sample edited to break one CEL rule (the server's message is the
    rule's, as `validate` words it less the value it got), then of the rejected samples."""
    edited = copy.deepcopy(dict(good))
    edited["spec"]["kvCache"] = {"dtype": "bfloat16"}
    name = edited["metadata"]["name"]
    print(f"\n$ kubectl apply -f {name}.yaml    # with spec.kvCache.dtype: bfloat16", file=out)
    print(kubectl_apply(url, edited), file=out)
    for problem in check_document(edited).problems:
        print(f"$ kimi-operator validate {name}.yaml\n{name}.yaml: {problem}", file=out)
    for path in sorted(rejected.glob("*.yaml")):
        print(f"\n$ kubectl apply -f {path}", file=out)
        print(kubectl_apply(url, yaml.safe_load(path.read_text())), file=out)


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


def run_demo(samples: Path, out: TextIO) -> None:
    started = time.monotonic()
    docs = _load_samples(samples, out)
    upstream = child_crds()
    with EmbeddedApiServer() as api:
        print(f"embedded API server (kmock emulator) listening on {api.url}", file=out)
        api.install_crds([crd(), *upstream])
        for installed in [crd(), *upstream]:
            print(f"  installed CRD {installed['metadata']['name']}", file=out)
        print("the API server applies every CRD's schema and CEL rules at admission:", file=out)
        _show_refusals(api.url, docs[0], samples / "rejected", out)
        client = Client(load_configuration(api.url))
        try:
            token: str | None = operator_identity(api)
            who = "the chart's ServiceAccount, its RBAC enforced by the server"
        except RuntimeError as error:  # no helm here: `make tools`
            token, who = None, f"the cluster admin ({error})"
        config = RunConfig(server=api.url, token=token, resync_interval_s=RESYNC_S, workers=4)
        hub = fake_hub(client, docs)
        with OperatorThread(config):
            print(f"\noperator running as {who} (resync every {RESYNC_S:.0f} s)", file=out)
            for doc in docs:
                client.create(KIMI_DEPLOYMENT, doc)
                meta = doc["metadata"]
                print(f"  applied KimiDeployment {meta['namespace']}/{meta['name']}", file=out)
            _wait(lambda: _all_reconciled(client), "the operator to reconcile every sample")
            print("\n$ kubectl get kimi -A", file=out)
            print(table(client.list(KIMI_DEPLOYMENT)), file=out)

            print(
                "\nweights Jobs: the demo runs each resolve and download Job of a Hugging Face "
                "source for real (python -m kimi_kernels.weights against a fake hub on 127.0.0.1 "
                "serving a tiny generated repository; each claim a temporary directory):",
                file=out,
            )
            with hub.running(), tempfile.TemporaryDirectory(prefix="kimi-demo-") as volumes:
                runner = JobRunner(client, hub.url, Path(volumes))

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
            print("\n$ kubectl get kimi -A", file=out)
            print(table(client.list(KIMI_DEPLOYMENT)), file=out)

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
        client.close()
        print("\noperator stopped", file=out)
    print(f"embedded API server stopped; demo took {time.monotonic() - started:.1f} s", file=out)
