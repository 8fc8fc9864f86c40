"""The chart's RBAC allows exactly what the operator does: no more, no less, no wildcards.

What the operator does is observed, not declared: the real operator (leader election included)
runs against the embedded API server, as the chart's ServiceAccount, through a scenario that
reaches every call of the Kubernetes client in the operator's in-cluster code (found by reading
that code: a call added later that the scenario does not reach fails
`test_scenario_reaches_every_client_call`). The server
authorizes every request by the chart's rendered RBAC, as kube-apiserver does, including the
owner-reference check of the OwnerReferencesPermissionEnforcement admission plugin, and records
each decision (API group, resource[/subresource], verb); those are compared with the rules
`helm template` renders: a permission missing is refused, one too many is unused.
"""

import ast
import copy
import functools
import json
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from kimi_operator.api.crd import crd
from kimi_operator.builders.meta import (
    APP_NAME,
    LWS_WORKER_INDEX_LABEL,
    MANAGER,
    ROUTABLE_LABEL,
)
from kimi_operator.builders.placement import GROUP_LABEL
from kimi_operator.controller.leader import LeaseConfig
from kimi_operator.embedded.chart import NAMESPACE as RELEASE_NAMESPACE
from kimi_operator.embedded.chart import operator_identity
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.hub import FakeHub
from kimi_operator.embedded.jobs import JobRunner, running
from kimi_operator.embedded.kubelet import group_ready_status, mark_ready
from kimi_operator.embedded.rbac import Attributes, request_attributes
from kimi_operator.embedded.upstream import ROUTING_KINDS, child_crds, upstream_crd
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.resources import (
    CHILD_RESOURCES,
    COMPUTE_DOMAIN,
    CRON_JOB,
    HORIZONTAL_POD_AUTOSCALER,
    INFERENCE_POOL,
    JOB,
    LEADER_WORKER_SET,
    LEASE,
    POD,
    POD_MONITOR,
    SCALED_OBJECT,
    SERVICE,
    Resource,
)
from kimi_operator.runner import OperatorThread, RunConfig
from kimi_operator.slo_roles import AUTOSCALER
from tests.support.cluster import older_crd, wait_for
from tests.support.repo import ROOT

from .helm import of_kind, template

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)

PACKAGE = ROOT / "operator" / "kimi_operator"
CLIENT_MODULE = PACKAGE / "k8s" / "client.py"
# Code that never runs in the operator's pod: the embedded API server and its fake kubelet (demo,
# tests) and the benchmark (run from a user's machine with the user's credentials).
NOT_IN_CLUSTER = ("embedded", "bench")
SAMPLES = ROOT / "crds" / "samples"
NAMESPACE = "inference"
LEASE_NAME = "kimi-kimi-operator"  # the release's full name (embedded.chart renders release kimi)

CACHES = "labelSelector=app.kubernetes.io/component%3Dweights-cache"
MANAGED_BY = "app.kubernetes.io/managed-by"
Permission = tuple[str, str, str]  # (API group, resource[/subresource], verb)
AUTOSCALING = {"maxReplicas": 4, "target": {"waitingRequestsPerGroup": 8}}
# Routed through an InferencePool and a Gateway (whose address is read): the endpoint picker's
# objects, its Role among them (granting what the operator holds), and an HTTPRoute.
ROUTING = {"mode": "InferencePool", "gatewayRef": {"name": "inference-gateway"}}
# The children of an autoscaled deployment while KEDA is installed: every kind but the HPA (and
# the CronJob of an slo's scheduled calibration: _slo_scaler's).
WITH_KEDA = [r for r in CHILD_RESOURCES if r not in {HORIZONTAL_POD_AUTOSCALER, CRON_JOB}]


# --- what a request needs: kube-apiserver's RequestInfo, for resource requests ---------------


def test_attributes_of_requests() -> None:
    assert request_attributes("GET", "/apis", {}) is None
    assert request_attributes("GET", "/apis/kimi-operator.io/v1alpha1", {}) is None
    assert request_attributes("GET", "/apis/x.io/v1/things", {"watch": "true"}) == Attributes(
        "watch", "x.io", "things", ""
    )
    assert request_attributes("GET", "/api/v1/namespaces/ns/services/s", {}) == Attributes(
        "get", "", "services", "ns", "s"
    )
    assert request_attributes(
        "PATCH", "/apis/x.io/v1/namespaces/ns/things/t/status", {}
    ) == Attributes("patch", "x.io", "things/status", "ns", "t")
    assert request_attributes("DELETE", "/api/v1/namespaces/ns/events", {}) == Attributes(
        "deletecollection", "", "events", "ns"
    )
    assert request_attributes("GET", "/api/v1/namespaces", {}) == Attributes(
        "list", "", "namespaces", ""
    )


# --- the calls of the Kubernetes client in the operator's in-cluster code --------------------


@dataclass(frozen=True)
class CallSite:
    path: Path
    first_line: int
    last_line: int
    method: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.first_line} ({self.method})"


def client_methods() -> set[str]:
    """The public methods of `Client` that send a request: that call `self._request`, directly or
    through other methods of the class."""
    tree = ast.parse(CLIENT_MODULE.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Client"]
    calls = {
        fn.name: {
            n.func.attr
            for n in ast.walk(fn)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and ast.unparse(n.func.value) == "self"
        }
        for fn in cls.body
        if isinstance(fn, ast.FunctionDef)
    }
    sending = {"_request"}
    while True:
        more = {name for name, called in calls.items() if called & sending} - sending
        if not more:
            break
        sending |= more
    return {name for name in sending if not name.startswith("_")}


@functools.cache
def client_call_sites() -> tuple[CallSite, ...]:
    """Every `<...>client.<method>(...)` in the operator's in-cluster code (read once: the file's
    runs and checks asked five times, and the parses took 1.7 s of its CPU in a py-spy profile)."""
    methods = client_methods()
    sites = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] in NOT_IN_CLUSTER or path == CLIENT_MODULE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver = ast.unparse(node.func.value)
            if node.func.attr in methods and receiver.split(".")[-1].endswith("client"):
                sites.append(
                    CallSite(path, node.lineno, node.end_lineno or node.lineno, node.func.attr)
                )
    return tuple(sites)


def test_call_sites_are_found() -> None:
    """The reading of the code finds the calls it is meant to find (a guard against the scan
    silently finding nothing after a refactoring)."""
    methods = client_methods()
    assert {"get", "create", "patch", "delete"} <= methods
    assert {site.method for site in client_call_sites()} >= {"get", "create", "patch", "delete"}


# --- the operator, observed ----------------------------------------------------------------


@dataclass
class Observed:
    cluster: set[Permission] = field(default_factory=set)
    namespaced: set[Permission] = field(default_factory=set)
    lease: set[Permission] = field(default_factory=set)  # in the release's namespace
    reached: set[tuple[str, int]] = field(default_factory=set)  # (file, line) of client calls


def _record_call_sites(monkeypatch: pytest.MonkeyPatch, reached: set[tuple[str, int]]) -> None:
    lock = threading.Lock()

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1)
            with lock:
                reached.add((caller.f_code.co_filename, caller.f_lineno))
            return method(*args, **kwargs)

        return recorded

    for name in client_methods():
        monkeypatch.setattr(Client, name, wrap(getattr(Client, name)))


def _send(url: str, method: str, path: str, body: Any = None, *, merge: bool = False) -> Any:
    """A request of the test itself: without a token, the cluster admin's."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/merge-patch+json" if merge else "application/json"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"{}")


def _sample(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((SAMPLES / f"{name}.yaml").read_text())
    return copy.deepcopy(loaded)


def _autoscaler_switch(
    api: EmbeddedApiServer, kimi: str, children: Callable[[Resource], list[dict[str, Any]]]
) -> None:
    """Autoscaling off: the ScaledObject is pruned. KEDA gone and autoscaling on again: an HPA,
    repaired when edited by hand."""
    url = api.url
    _send(url, "PATCH", f"{kimi}/k3", {"spec": {"autoscaling": None}}, merge=True)
    wait_for(lambda: not children(SCALED_OBJECT), 20.0, "the ScaledObject gone")
    api.remove_crd(SCALED_OBJECT.crd_name)
    _send(url, "PATCH", f"{kimi}/k3", {"spec": {"autoscaling": AUTOSCALING}}, merge=True)
    wait_for(lambda: bool(children(HORIZONTAL_POD_AUTOSCALER)), 20.0, "the HPA")
    hpa = HORIZONTAL_POD_AUTOSCALER.item(NAMESPACE, "k3")
    _send(url, "PATCH", hpa, {"spec": {"maxReplicas": 9}}, merge=True)
    wait_for(lambda: _send(url, "GET", hpa)["spec"]["maxReplicas"] == 4, 20.0, "the HPA repaired")


def _slo_scaler(url: str, kimi: str) -> None:
    """Objectives instead of the target: the HPA is pruned, and the operator lists the
    autoscalers that could share the count with it and gets the ConfigMap its calibration is
    stored in (not there: the built-in; its Prometheus does not answer here: the count stays).
    The calibration is kept current on a schedule: a CronJob, and the Role it runs as (granting
    what the operator holds), and its running Jobs listed; rescheduled, the CronJob is patched."""
    calibration = {"configMapName": "k3-calibration", "schedule": "0 4 * * 0"}
    objectives = {"ttftSeconds": 2, "calibration": calibration}
    slo = {"spec": {"autoscaling": {"target": None, "slo": objectives}}}
    _send(url, "PATCH", f"{kimi}/k3", slo, merge=True)

    def scaling() -> bool:
        status = _send(url, "GET", f"{kimi}/k3").get("status") or {}
        return bool(status.get("autoscaler") == AUTOSCALER and status.get("sloAutoscaler"))

    wait_for(scaling, 30.0, "the SLO scaler")
    cron = CRON_JOB.item(NAMESPACE, "k3-calibrate-g")
    listed = CRON_JOB.collection(NAMESPACE)
    wait_for(lambda: bool(_send(url, "GET", listed)["items"]), 20.0, "the calibration's CronJob")
    rescheduled = {"spec": {"autoscaling": {"slo": {"calibration": {"schedule": "@daily"}}}}}
    _send(url, "PATCH", f"{kimi}/k3", rescheduled, merge=True)
    wait_for(
        lambda: _send(url, "GET", cron)["spec"]["schedule"] == "@daily",
        20.0,
        "the CronJob rescheduled",
    )


def _scale_down_to_one(
    url: str, kimi: str, children: Callable[[Resource], list[dict[str, Any]]]
) -> None:
    """Down to one group, and its status written: no status write left in flight to undo the
    scenario's next status patch. Both groups Ready (a scale-down takes a group not serving
    first: group_set.py), the one leaving, the higher index, with a leader pod (whose vLLM does
    not answer): it drains first, its leader taken out of routing (a pod patched), for the
    deployment's drainSeconds (1 s)."""
    for name in ("k3-g0", "k3-g1"):
        group = LEADER_WORKER_SET.item(NAMESPACE, name)
        _send(
            url,
            "PATCH",
            group + "/status",
            {"status": group_ready_status(_send(url, "GET", group))},
            merge=True,
        )
    labels = {
        "app.kubernetes.io/name": APP_NAME,
        "app.kubernetes.io/instance": "k3",
        GROUP_LABEL: "k3-g1",
        LWS_WORKER_INDEX_LABEL: "0",
        ROUTABLE_LABEL: "true",
    }
    port = {"name": "http", "containerPort": 1}  # nothing listens: in flight unknown
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "k3-g1-0", "namespace": NAMESPACE, "labels": labels},
        "spec": {"containers": [{"name": "vllm", "image": "vllm", "ports": [port]}]},
    }
    _send(url, "POST", POD.collection(NAMESPACE), pod)
    _send(
        url,
        "PATCH",
        POD.item(NAMESPACE, "k3-g1-0") + "/status",
        {"status": {"podIP": "127.0.0.1"}},
        merge=True,
    )
    _send(url, "PATCH", f"{kimi}/k3", {"spec": {"replicas": 1}}, merge=True)
    wait_for(lambda: len(children(LEADER_WORKER_SET)) == 1, 20.0, "the scale-down to one group")
    drained = _send(url, "GET", POD.item(NAMESPACE, "k3-g1-0"))
    assert drained["metadata"]["labels"][ROUTABLE_LABEL] == "false"  # out of routing first

    def settled() -> bool:
        kd = _send(url, "GET", f"{kimi}/k3")
        status = kd.get("status") or {}
        current = status.get("observedGeneration") == kd["metadata"]["generation"]
        return current and status.get("replicas") == 1

    wait_for(settled, 20.0, "the scale-down's status")


KIMI = "/apis/kimi-operator.io/v1alpha1/namespaces/" + NAMESPACE + "/kimideployments"


def _created(url: str) -> Callable[[Resource], list[dict[str, Any]]]:
    """A two-group multi-node deployment routed through an InferencePool, created, and a child
    of every kind made; its children of a kind, as a function."""
    good = _sample("k3-tp16-latency")
    good["metadata"] = {"name": "k3", "namespace": NAMESPACE}
    good["spec"]["replicas"] = 2
    good["spec"]["autoscaling"] = AUTOSCALING  # with KEDA installed: a ScaledObject
    good["spec"]["routing"] = ROUTING
    good["spec"]["serving"] = {"drainSeconds": 1}  # the scale-down's drain (a pod patched)
    _send(url, "POST", KIMI, good)

    def children(resource: Resource) -> list[dict[str, Any]]:
        """The operator's objects of a kind (not the chart's Role and RoleBinding there)."""
        found: list[dict[str, Any]] = _send(url, "GET", resource.collection(NAMESPACE))["items"]
        return [c for c in found if c["metadata"].get("labels", {}).get(MANAGED_BY) == MANAGER]

    wait_for(lambda: all(children(r) for r in WITH_KEDA), 20.0, "a child of every kind")
    return children


def _scenario(
    api: EmbeddedApiServer, reached: set[tuple[str, int]], sites: tuple[CallSite, ...]
) -> None:
    """Create a two-group multi-node deployment routed through an InferencePool, edit and disown
    a child of every kind by hand, delete one, scale it down, scale it on objectives, drop its
    ComputeDomains, PodMonitor
    and pool, create an invalid one and delete it; then let resyncs run until every client call
    in `sites` was made."""
    url, kimi = api.url, KIMI
    children = _created(url)
    # A child deleted by hand: the operator creates it again.
    service = children(SERVICE)[0]["metadata"]["name"]
    _send(url, "DELETE", SERVICE.item(NAMESPACE, service))
    wait_for(lambda: bool(children(SERVICE)), 20.0, "the Service created again")
    # Every kind of child edited by hand: the operator patches each back.
    label = "app.kubernetes.io/name"
    for resource in WITH_KEDA:
        name = children(resource)[0]["metadata"]["name"]
        edited = {"metadata": {"labels": {label: "edited-by-hand"}}}
        _send(url, "PATCH", resource.item(NAMESPACE, name), edited, merge=True)

    def repaired() -> bool:
        labels = [c["metadata"].get("labels", {}) for r in WITH_KEDA for c in children(r)]
        return all(found.get(label) != "edited-by-hand" for found in labels)

    wait_for(repaired, 20.0, "every edited child repaired")
    # Every kind of child disowned by hand: the operator adopts each (changing an object's
    # ownerReferences needs delete on it, by the owner-reference admission check).
    for resource in WITH_KEDA:
        name = children(resource)[0]["metadata"]["name"]
        disowned = {"metadata": {"ownerReferences": None}}
        _send(url, "PATCH", resource.item(NAMESPACE, name), disowned, merge=True)

    def adopted() -> bool:
        return all(c["metadata"].get("ownerReferences") for r in WITH_KEDA for c in children(r))

    wait_for(adopted, 20.0, "every disowned child adopted")
    _autoscaler_switch(api, kimi, children)
    _scale_down_to_one(url, kimi, children)
    _default_image_turn(url, kimi, reached, sites)
    _slo_scaler(url, kimi)
    # Children the spec no longer asks for: whatever the operator does about them is observed.
    dropped = {
        "spec": {
            "computeDomain": "Disabled",
            "decode": {"backend": "auto"},
            "monitoring": {"podMonitor": False},
            "autoscaling": None,
            "routing": {"mode": "Service", "gatewayRef": None},
        }
    }
    _send(url, "PATCH", f"{kimi}/k3", dropped, merge=True)
    wait_for(lambda: not children(COMPUTE_DOMAIN), 20.0, "the ComputeDomains gone")
    wait_for(lambda: not children(POD_MONITOR), 20.0, "the PodMonitor gone")
    wait_for(lambda: not children(HORIZONTAL_POD_AUTOSCALER), 20.0, "the HPA gone")
    wait_for(lambda: not children(INFERENCE_POOL), 20.0, "the InferencePool gone")
    wait_for(lambda: not children(CRON_JOB), 20.0, "the calibration's CronJob gone")
    _invalid_one(api, kimi)
    _weights_scenario(api, kimi)

    def all_reached() -> bool:
        return all(_hit(site, reached) for site in sites)

    try:
        wait_for(all_reached, 30.0, "every client call of the operator in this mode")
    except AssertionError as timeout:
        raise AssertionError(
            f"{timeout}: the RBAC scenario never made these client calls, so the permissions "
            f"they need are not checked: extend _scenario: {_missing(sites, reached)}"
        ) from None


def _first_reconcile(
    api: EmbeddedApiServer, _: set[tuple[str, int]], __: tuple[CallSite, ...]
) -> None:
    """The deployment of `_scenario` created, its children made and its status written: an
    operator that reconciles (and, without leader election, holds no Lease to)."""
    _created(api.url)

    def written() -> bool:
        kd = _send(api.url, "GET", f"{KIMI}/k3")
        status = kd.get("status") or {}
        return bool(status.get("observedGeneration") == kd["metadata"]["generation"])

    wait_for(written, 20.0, "the deployment's status")


def _invalid_one(api: EmbeddedApiServer, kimi: str) -> None:
    """A deployment the API server would refuse (created under an older CRD without the rules,
    kept after): the operator writes its status only; then it is deleted."""
    url = api.url
    bad = _sample("k3-tp16-latency")
    bad["metadata"] = {"name": "bad", "namespace": NAMESPACE}
    bad["spec"]["gpus"] = 12
    api.install_crds([older_crd()])
    _send(url, "POST", kimi, bad)
    api.install_crds([crd()])
    wait_for(
        lambda: bool(_send(url, "GET", f"{kimi}/bad").get("status")),
        20.0,
        "the invalid one's status",
    )
    _send(url, "DELETE", f"{kimi}/bad")


def _hit(site: CallSite, reached: set[tuple[str, int]]) -> bool:
    return any(
        str(site.path) == f and site.first_line <= line <= site.last_line for f, line in reached
    )


def _default_image_turn(
    url: str, kimi: str, reached: set[tuple[str, int]], sites: tuple[CallSite, ...]
) -> None:
    # Recorded on an older default image: the operator reads the deployments' statuses to find
    # whose turn it is to move to the new default (docs/rollout.md).
    older = {
        "status": {"image": "registry.example/vllm-kimi:old", "imageSource": "OperatorDefault"}
    }
    # A reconcile in flight (a group's readiness refreshes its owner at once) may write its
    # status over this one: written again until a reconcile asked for the turn.
    turn = [
        site
        for site in sites
        if site.path.name == "observe.py"
        and "KIMI_DEPLOYMENT"
        in "".join(site.path.read_text().splitlines()[site.first_line - 1 : site.last_line])
    ]

    def turn_asked() -> bool:
        if turn and all(_hit(site, reached) for site in turn):
            return True
        _send(url, "PATCH", f"{kimi}/k3/status", older, merge=True)
        return False

    wait_for(turn_asked, 20.0, "a reconcile asking for the turn to move to the new default image")


def _weights_scenario(api: EmbeddedApiServer, kimi: str) -> None:
    """Two deployments of one Hugging Face repository share a weights cache (its Jobs run for
    real: embedded.jobs); both move to another branch one after the other: the first lets go of
    the old cache, the second, its last user, deletes it."""
    hub = FakeHub()
    hub.push("moonshotai/Kimi-K3", {"config.json": b"{}", "model.safetensors": b"1" * 1000})
    hub.push("moonshotai/Kimi-K3", {"config.json": b"{}", "model.safetensors": b"2" * 1000}, "v2")
    admin = Client(load_configuration(api.url))
    with (
        hub.running(),
        tempfile.TemporaryDirectory(prefix="kimi-rbac-") as volumes,
        running(JobRunner(admin, hub.url, Path(volumes))),
    ):
        for name in ("w1", "w2"):
            doc = _sample("k3-tp16-latency")
            doc["metadata"] = {"name": name, "namespace": NAMESPACE}
            doc["spec"]["model"]["source"] = {"huggingface": {"repo": "moonshotai/Kimi-K3"}}
            _send(api.url, "POST", kimi, doc)

        def serving(names: tuple[str, ...]) -> Callable[[], bool]:
            def probe() -> bool:
                mark_ready(admin, NAMESPACE)
                return all(
                    _send(api.url, "GET", f"{kimi}/{n}").get("status", {}).get("readyReplicas")
                    for n in names
                )

            return probe

        def caches() -> set[str]:
            listed = _send(api.url, "GET", JOB.collection(NAMESPACE) + "?" + CACHES)["items"]
            return {job["metadata"]["name"] for job in listed}

        wait_for(serving(("w1", "w2")), 60.0, "both deployments serving from one cache")
        (old,) = caches()
        for name in ("w1", "w2"):
            moved = {"spec": {"model": {"source": {"huggingface": {"revision": "v2"}}}}}
            _send(api.url, "PATCH", f"{kimi}/{name}", moved, merge=True)
            wait_for(lambda: len(caches() - {old}) == 1, 60.0, "the new cache")
        wait_for(lambda: old not in caches(), 60.0, "the old cache deleted with its last user")
    admin.close()


Scenario = Callable[[EmbeddedApiServer, set[tuple[str, int]], tuple[CallSite, ...]], None]


def _observe(
    monkeypatch: pytest.MonkeyPatch,
    namespaces: tuple[str, ...],
    *,
    leader_election: bool = True,
    scenario: Scenario = _scenario,
) -> Observed:
    observed = Observed()
    _record_call_sites(monkeypatch, observed.reached)
    sites = client_call_sites()  # what `_scenario` waits for (`_first_reconcile` does not)
    values: dict[str, Any] = {"watchNamespaces": list(namespaces)}
    if not leader_election:
        values["leaderElection"] = {"enabled": False}
    with EmbeddedApiServer() as api:
        upstream = [*child_crds(), upstream_crd("ScaledObject"), *map(upstream_crd, ROUTING_KINDS)]
        api.install_crds([crd(), *upstream])
        config = RunConfig(
            server=api.url,
            token=operator_identity(api, values),
            namespaces=namespaces,
            resync_interval_s=0.3,
            relist_interval_s=0.3,
            discovery_ttl_s=0.3,  # KEDA's removal noticed at once
            workers=2,
            leader_election=(
                # The chart's lease and renew deadline (nothing here waits for them; shorter,
                # a stall of the process past the deadline stopped the operator mid-scenario),
                # a short retry period for the Lease's calls to come at once.
                LeaseConfig(RELEASE_NAMESPACE, LEASE_NAME, "rbac", 15.0, 10.0, 0.2)
                if leader_election
                else None
            ),
        )
        with OperatorThread(config):
            scenario(api, observed.reached, sites)
        for check in api.checks():
            needed = (check.group, check.resource, check.verb)
            if check.group == LEASE.group:
                assert check.namespaced
                observed.lease.add(needed)
            else:
                (observed.namespaced if check.namespaced else observed.cluster).add(needed)
    return observed


@pytest.fixture(scope="module")
def cluster_wide() -> Iterator[Observed]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield _observe(monkeypatch, ())


@pytest.fixture(scope="module")
def namespaced() -> Iterator[Observed]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield _observe(monkeypatch, (NAMESPACE,))


@pytest.fixture(scope="module")
def standalone() -> Iterator[Observed]:
    """Without leader election, the first reconcile only: the operator's code differs from the
    cluster-wide run's only in leader.py's calls (the Lease's), which it then never makes."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield _observe(monkeypatch, (), leader_election=False, scenario=_first_reconcile)


# --- what the chart grants ---------------------------------------------------------------


def granted(rules: list[dict[str, Any]]) -> set[Permission]:
    out = set()
    for rule in rules:
        assert "nonResourceURLs" not in rule, rule
        for value in (*rule["apiGroups"], *rule["resources"], *rule["verbs"]):
            assert "*" not in value, f"wildcard in {rule}"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out |= {(group, resource, verb) for verb in rule["verbs"]}
    return out


@dataclass
class Granted:
    cluster: set[Permission]  # the ClusterRole's (none when watching named namespaces)
    roles: dict[str, set[Permission]]  # each watched namespace's Role's
    lease: set[Permission]  # the leader-election Role's, in the release's namespace


def rbac(values: dict[str, Any], tmp_path: Path) -> Granted:
    """What the chart grants; checks each binding's role and subject."""
    objects = template(values, tmp_path)
    (account,) = of_kind(objects, "ServiceAccount")
    subject = {
        "kind": "ServiceAccount",
        "name": account["metadata"]["name"],
        "namespace": RELEASE_NAMESPACE,
    }
    bindings = of_kind(objects, "ClusterRoleBinding") + of_kind(objects, "RoleBinding")
    by_name = {
        (r["kind"], r["metadata"].get("namespace"), r["metadata"]["name"]): r for r in objects
    }
    for binding in bindings:
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        assert (ref["kind"], namespace, ref["name"]) in by_name, binding
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        assert binding["subjects"] == [subject]
    assert len(bindings) == len(of_kind(objects, "ClusterRole") + of_kind(objects, "Role"))
    cluster = set().union(*(granted(r["rules"]) for r in of_kind(objects, "ClusterRole")))
    roles, lease = {}, set()
    for role in of_kind(objects, "Role"):
        if role["metadata"]["name"].endswith("-leader-election"):
            assert role["metadata"]["namespace"] == RELEASE_NAMESPACE
            lease = granted(role["rules"])
        else:
            roles[role["metadata"]["namespace"]] = granted(role["rules"])
    return Granted(cluster, roles, lease)


def _missing(sites: tuple[CallSite, ...], reached: set[tuple[str, int]]) -> list[str]:
    return [
        str(s)
        for s in sites
        if not any(str(s.path) == f and s.first_line <= line <= s.last_line for f, line in reached)
    ]


@pytest.mark.parametrize("mode", ["cluster_wide", "namespaced"])
def test_scenario_reaches_every_client_call(mode: str, request: pytest.FixtureRequest) -> None:
    observed: Observed = request.getfixturevalue(mode)
    sites = client_call_sites()
    missing = _missing(sites, observed.reached)
    assert not missing, (
        "the RBAC scenario never made these client calls, so the permissions they need are not "
        f"checked: extend _scenario in tests/chart/test_rbac.py: {missing}"
    )


def test_cluster_wide_rbac_is_exactly_what_the_operator_does(
    cluster_wide: Observed, tmp_path: Path
) -> None:
    granted = rbac({}, tmp_path)
    assert granted.roles == {}
    assert granted.cluster == cluster_wide.cluster | cluster_wide.namespaced
    assert granted.lease == cluster_wide.lease


def test_namespaced_rbac_is_exactly_what_the_operator_does(
    namespaced: Observed, tmp_path: Path
) -> None:
    granted = rbac({"watchNamespaces": [NAMESPACE, "other"]}, tmp_path)
    # Nothing cluster-scoped but reading the Nodes (evacuation: docs/maintenance.md).
    assert granted.cluster == namespaced.cluster == {("", "nodes", "list"), ("", "nodes", "watch")}
    assert granted.roles == {NAMESPACE: namespaced.namespaced, "other": namespaced.namespaced}
    assert granted.lease == namespaced.lease


def test_without_leader_election_no_lease_is_granted_or_used(
    standalone: Observed, tmp_path: Path
) -> None:
    granted = rbac({"leaderElection": {"enabled": False}}, tmp_path)
    assert granted.lease == standalone.lease == set()
    # All the rest as with leader election, which the cluster-wide run holds to exactly what the
    # operator does (test_cluster_wide_rbac_is_exactly_what_the_operator_does).
    (elected := tmp_path / "elected").mkdir()
    assert granted.cluster == rbac({}, elected).cluster
    used = standalone.cluster | standalone.namespaced
    assert (LEADER_WORKER_SET.group, "leaderworkersets", "create") in used  # it reconciled
    assert used <= granted.cluster


def test_no_rbac_when_disabled(tmp_path: Path) -> None:
    objects = template({"rbac": {"create": False}}, tmp_path)
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
