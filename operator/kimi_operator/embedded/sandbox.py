"""`kimi-operator demo --serve`: an empty cluster of your own on 127.0.0.1, to drive with the real
helm and kubectl as `kind create cluster` gives one, until Ctrl-C or SIGTERM.

It holds what a fresh cluster with LeaderWorkerSet, the NVIDIA DRA driver and the Prometheus
Operator holds: the namespaces default, kube-system, kube-public and kube-node-lease, and those
operators' CRDs; nothing of kimi-operator's (`helm install` brings the CRD, the ServiceAccount and
the RBAC). Once the chart's operator Deployment exists, the sandbox runs the operator in-process
as that Deployment's ServiceAccount with the arguments the chart rendered for it (there are no
nodes to run its pod; embedded.demo.chart_operator), and the chart's admission webhook locally,
its configuration pointed at it. Its nodes are Node objects, RACKS GB300 NVL72 racks of 18 trays
(embedded.scheduler.fleet), to cordon, taint and drain. It plays the controllers a GPU cluster
has: the LeaderWorkerSet controller and kubelets bring the groups' pods up on the nodes the
scheduler model picks and recreate a group that loses one (embedded.leaderworkerset), the DRA
driver readies the ComputeDomains (embedded.kubelet), the disruption controller keeps the
PodDisruptionBudgets' status (embedded.disruption) and the taint-eviction controller deletes the
pods a `NoExecute` taint does not tolerate (embedded.taints). Hugging Face sources' weights Jobs
are not run here (`make demo` runs them against a fake hub): use a `pvc` source, as most samples
do.
"""

import contextlib
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from kimi_operator.embedded.chart import called_at
from kimi_operator.embedded.demo import CHART_OPERATOR, admission_webhook, chart_operator
from kimi_operator.embedded.disruption import sync_budgets
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.kubelet import ready_domains, register_nodes
from kimi_operator.embedded.leaderworkerset import play_groups
from kimi_operator.embedded.processes import write_kubeconfig
from kimi_operator.embedded.scheduler import fleet
from kimi_operator.embedded.taints import evict_untolerated
from kimi_operator.embedded.upstream import child_crds
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.errors import ApiError
from kimi_operator.k8s.resources import DEPLOYMENT, Resource
from kimi_operator.runner import OperatorThread

WEBHOOK_CONFIGURATION = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
)
CHART_WEBHOOK = "app.kubernetes.io/component=admission-webhook"
TICK_S = 0.2  # how often the sandbox looks for the chart and plays the controllers
RACKS = 2


class Sandbox:
    """What the sandbox does on each tick: follow the chart (start the operator when its
    Deployment appears, stop it when it goes), point the chart's webhook here, and play the
    LeaderWorkerSet controller, the kubelets, the DRA driver, the disruption controller and the
    taint-eviction controller."""

    def __init__(self, api: EmbeddedApiServer, webhook_url: str, out: TextIO) -> None:
        self.api = api
        self.client = Client(load_configuration(api.url))
        self.webhook_url = webhook_url
        self.out = out
        self.operator: OperatorThread | None = None
        self._following: str | None = None  # the uid of the Deployment the operator runs as
        self.rng = random.Random(0)  # the scheduler model's picks among feasible nodes

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def tick(self) -> None:
        self._follow_chart()
        self._point_webhooks_here()
        for line in play_groups(self.client, self.rng):
            self._say(f"sandbox: {line}")
        for marked in ready_domains(self.client):
            self._say(f"sandbox: {marked} up (no GPUs here: played)")
        sync_budgets(self.client)
        for pod in evict_untolerated(self.client):
            self._say(
                f"sandbox: pod {pod} deleted: its node has a NoExecute taint it does not tolerate"
            )

    def _follow_chart(self) -> None:
        found = self.client.list(DEPLOYMENT, label_selector=CHART_OPERATOR)
        deployment = found[0] if found else None
        uid = deployment["metadata"]["uid"] if deployment else None
        if uid == self._following:
            return
        self.stop_operator()
        self._following = uid
        if deployment is not None:
            self.operator = OperatorThread(chart_operator(self.api, deployment)).__enter__()
            meta = deployment["metadata"]
            account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
            self._say(
                f"sandbox: the operator runs, as Deployment {meta['namespace']}/{meta['name']} "
                f"would: ServiceAccount {account}, the chart's arguments"
            )

    def _point_webhooks_here(self) -> None:
        for configuration in self.client.list(WEBHOOK_CONFIGURATION, label_selector=CHART_WEBHOOK):
            if any("service" in w["clientConfig"] for w in configuration.get("webhooks", [])):
                self.api.store([called_at(configuration, self.webhook_url)])
                name = configuration["metadata"]["name"]
                self._say(f"sandbox: webhook {name} served here ({self.webhook_url})")

    def stop_operator(self) -> None:
        if self.operator is not None:
            self.operator.stop()
            self.operator = None
            self._say("sandbox: the operator stopped")


@contextlib.contextmanager
def sandbox(kubeconfig: Path, out: TextIO) -> Iterator[Sandbox]:
    """The empty cluster, its kubeconfig written to `kubeconfig` and announced on `out`."""
    with EmbeddedApiServer() as api, admission_webhook() as webhook_url:
        crds = child_crds()
        api.install_crds([*crds])
        kubeconfig = kubeconfig.resolve()
        kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        write_kubeconfig(api.url, kubeconfig)
        names = ", ".join(sorted(crd["spec"]["names"]["kind"] for crd in crds))
        print(
            f"kimi-operator sandbox: an empty cluster on {api.url} (the CRDs of {names}, as "
            f"their own operators install them; nothing of kimi-operator's; {RACKS} GB300 NVL72 "
            "racks of 18 nodes)\n"
            "Ctrl-C stops it. In another shell:\n"
            f"export KUBECONFIG={kubeconfig}",
            file=out,
            flush=True,
        )
        played = Sandbox(api, webhook_url, out)
        register_nodes(played.client, fleet(RACKS))
        try:
            yield played
        finally:
            played.stop_operator()
            played.client.close()


def serve(kubeconfig: Path, out: TextIO, stop: threading.Event) -> None:
    """Run the sandbox until `stop` is set. A pass the API server failed (an object gone under
    it, a timeout) is said and tried again on the next tick, as a controller requeues: it does
    not stop the cluster."""
    with sandbox(kubeconfig, out) as played:
        while not stop.wait(TICK_S):
            try:
                played.tick()
            except ApiError as error:
                print(f"sandbox: a pass failed ({error}); trying again", file=out, flush=True)
