"""`kimi-operator demo`: the operator live on the embedded API server, no cluster needed.

Starts the API server on 127.0.0.1, installs the KimiDeployment CRD and the upstream CRDs it
needs, runs the operator, applies the sample deployments, plays the kubelet (says so), prints a
`kubectl get kimi` table and the children, and shuts everything down.
"""

import datetime
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import yaml

from kimi_operator.api.crd import crd
from kimi_operator.api.validation import check_document
from kimi_operator.embedded.kubelet import mark_ready
from kimi_operator.embedded.server import EmbeddedApiServer
from kimi_operator.embedded.upstream import child_crds
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.resources import (
    CHILD_RESOURCES,
    EVENT,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
)
from kimi_operator.runner import OperatorThread, RunConfig

RESYNC_S = 1.0
TIMEOUT_S = 20.0


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
        for child in client.list(resource, meta["namespace"]):
            if (
                child["metadata"].get("labels", {}).get("app.kubernetes.io/instance")
                == meta["name"]
            ):
                lines.append(f"  {_child_line(child)}")
    for condition in (deployment.get("status") or {}).get("conditions", []):
        lines.append(
            f"  condition {condition['type']}={condition['status']} "
            f"({condition['reason']}: {condition['message']})"
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


def _all_ready(client: Client) -> bool:
    return all(
        _condition(kd, "Ready").get("status") == "True" for kd in client.list(KIMI_DEPLOYMENT)
    )


def run_demo(samples: Path, out: TextIO) -> None:
    started = time.monotonic()
    docs = _load_samples(samples, out)
    upstream = child_crds()
    with EmbeddedApiServer() as api:
        print(f"embedded API server (kmock emulator) listening on {api.url}", file=out)
        api.install_crds([crd(), *upstream])
        for installed in [crd(), *upstream]:
            print(f"  installed CRD {installed['metadata']['name']}", file=out)
        client = Client(load_configuration(api.url))
        config = RunConfig(server=api.url, resync_interval_s=RESYNC_S, workers=4)
        with OperatorThread(config):
            print(f"operator running (resync every {RESYNC_S:.0f} s)", file=out)
            for doc in docs:
                client.create(KIMI_DEPLOYMENT, doc)
                meta = doc["metadata"]
                print(f"  applied KimiDeployment {meta['namespace']}/{meta['name']}", file=out)
            _wait(lambda: _all_reconciled(client), "the operator to reconcile every sample")
            print("\n$ kubectl get kimi -A", file=out)
            print(table(client.list(KIMI_DEPLOYMENT)), file=out)

            print(
                "\nkubelet stand-in: there are no GPUs, nodes or pods behind this API server, so "
                "the demo now writes the status the LeaderWorkerSet controller and the NVIDIA DRA "
                "driver would write once the groups are up:",
                file=out,
            )
            for marked in mark_ready(client):
                print(f"  marked {marked} ready", file=out)
            _wait(lambda: _all_ready(client), "every deployment to report Ready")
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
