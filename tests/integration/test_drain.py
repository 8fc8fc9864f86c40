"""A group leaving drains before it is deleted (docs/group-lifecycle.md, "Leaving"), on the embedded
API server: a stand-in for the leader's vLLM on 127.0.0.1 holds requests and reports them on its
/metrics as vLLM does; the test writes the groups' pods as LeaderWorkerSet and the kubelet would
(the leader's IP 127.0.0.1, its vllm container's `http` port the stand-in's). A scale-down takes
the group out of the Service's and the InferencePool's selection first, keeps it while the
stand-in holds requests, and deletes it once they finish; the grace bounds a drain whose
requests never finish or whose leader never answers; a scale back up cancels the drain."""

import http.server
import threading
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from kimi_operator.builders.meta import LWS_WORKER_INDEX_LABEL, ROUTABLE_LABEL
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.kubelet import group_ready_status
from kimi_operator.embedded.scheduler import lws_pods
from kimi_operator.embedded.upstream import CHILD_KINDS, ROUTING_KINDS
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import (
    COMPUTE_DOMAIN,
    EVENT,
    INFERENCE_POOL,
    KIMI_DEPLOYMENT,
    LEADER_WORKER_SET,
    POD,
    SERVICE,
)
from kimi_operator.rollout import DRAINING_ANNOTATION
from kimi_operator.runner import OperatorThread
from tests.integration.conftest import metrics_of, resyncs
from tests.support.cluster import condition, sample, status_of, wait_for

NS, NAME = "inference", "k3-tp8-dspark"
LEAVING = f"{NAME}-g1"
TIMEOUT_S = 30.0
# Routed through an InferencePool: its selector, beside the Service's, is checked.
pytestmark = pytest.mark.parametrize("installed", [[*CHILD_KINDS, *ROUTING_KINDS]], indirect=True)


class StandIn:
    """The leader's vLLM: POST /hold holds a request until `release`; /metrics reports the
    requests held as vLLM 0.33.0 names them (or answers 503 when `silent`)."""

    def __init__(self) -> None:
        self.held = 0
        self.released = threading.Event()
        self.silent = False
        self.completed = 0
        self._lock = threading.Lock()
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if stand_in.silent:
                    self.send_error(503)
                    return
                with stand_in._lock:
                    held = stand_in.held
                body = (
                    "# TYPE vllm:num_requests_running gauge\n"
                    f'vllm:num_requests_running{{engine="0",model_name="m"}} {float(held)}\n'
                    'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n'
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                with stand_in._lock:
                    stand_in.held += 1
                stand_in.released.wait(TIMEOUT_S)
                with stand_in._lock:
                    stand_in.held -= 1
                    stand_in.completed += 1
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def hold(self, count: int) -> list[threading.Thread]:
        """`count` requests in flight, each a client waiting for its answer."""
        url = f"http://127.0.0.1:{self.port}/hold"

        def send() -> None:
            urllib.request.urlopen(urllib.request.Request(url, b"{}"), timeout=TIMEOUT_S).read()

        threads = [threading.Thread(target=send, daemon=True) for _ in range(count)]
        for thread in threads:
            thread.start()
        wait_for(lambda: self.held == count or None, TIMEOUT_S, f"{count} requests held")
        return threads

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    server = StandIn()
    yield server
    server.close()


def create(client: Client, drain_seconds: int, **spec: Any) -> None:
    doc = sample(NAME)
    doc["spec"] |= {
        "replicas": 2,
        "serving": {"drainSeconds": drain_seconds},
        "routing": {"mode": "InferencePool"},
        **spec,
    }
    client.create(KIMI_DEPLOYMENT, doc)


def start_pods(client: Client, lws: Mapping[str, Any], port: int) -> None:
    """The group's pods as LeaderWorkerSet makes them from its templates and the kubelet reports
    them Ready: the leader on 127.0.0.1, its vLLM on `port`."""
    for index, pod in enumerate(lws_pods(lws)):
        spec = pod.spec
        if index == 0:
            vllm = next(c for c in spec["containers"] if c["name"] == "vllm")
            http_port = next(p for p in vllm["ports"] if p["name"] == "http")
            http_port["containerPort"] = port
        labels = pod.labels | {LWS_WORKER_INDEX_LABEL: str(index)}
        meta = {"name": pod.name, "namespace": NS, "labels": labels}
        client.create(POD, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
        ready = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]
        status = {"phase": "Running", "podIP": "127.0.0.1", "conditions": ready}
        client.patch(POD, NS, pod.name, {"status": status}, subresource="status")
    group = {"status": group_ready_status(lws)}
    client.patch(LEADER_WORKER_SET, NS, lws["metadata"]["name"], group, subresource="status")


def serving(client: Client, port: int, groups: int = 2) -> None:
    """The groups up (two, or `groups` of both roles), their pods Ready, the deployment Ready."""

    def made() -> list[dict[str, Any]] | None:
        found = client.list(LEADER_WORKER_SET, NS)
        return found if len(found) == groups else None

    for lws in wait_for(made, TIMEOUT_S, f"{groups} groups"):
        start_pods(client, lws, port)

    def ready() -> bool | None:
        conditions = status_of(client, NS, NAME).get("conditions") or []  # none before the first
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) or None

    wait_for(ready, TIMEOUT_S, "Ready")


def leader(client: Client) -> dict[str, Any]:
    found = client.get(POD, NS, f"{LEAVING}-0")
    assert found is not None
    return found


def selects(selector: Mapping[str, str], pod: Mapping[str, Any]) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def selectors(client: Client) -> list[Mapping[str, str]]:
    """The Service's selector and the InferencePool's."""
    service = client.get(SERVICE, NS, NAME)
    pool = client.get(INFERENCE_POOL, NS, NAME)
    assert service is not None
    assert pool is not None
    return [service["spec"]["selector"], pool["spec"]["selector"]["matchLabels"]]


def scale(client: Client, replicas: int) -> None:
    client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"replicas": replicas}})


def out_of_routing(client: Client) -> dict[str, Any] | None:
    pod = leader(client)
    return pod if pod["metadata"]["labels"].get(ROUTABLE_LABEL) == "false" else None


def gone(client: Client) -> bool | None:
    return client.get(LEADER_WORKER_SET, NS, LEAVING) is None or None


def events(client: Client, reason: str) -> list[str] | None:
    """The messages of the deployment's Normal Events of `reason` (None: none yet)."""
    found = [
        e["message"]
        for e in client.list(EVENT, NS)
        if e["reason"] == reason and e["type"] == "Normal"
    ]
    return found or None


def deleted_at(api: EmbeddedApiServer, path_part: str, name: str) -> list[int]:
    return [
        i
        for i, w in enumerate(api.writes())
        if w.method == "DELETE" and path_part in w.path and w.name == name and not w.refused
    ]


def test_a_scale_down_drains_the_group_before_it_deletes_it(
    api: EmbeddedApiServer, client: Client, operator: OperatorThread, stand_in: StandIn
) -> None:
    create(client, drain_seconds=600)  # the grace never decides here: the requests do
    serving(client, stand_in.port)
    assert all(selects(s, leader(client)) for s in selectors(client))
    requests = stand_in.hold(2)
    scale(client, 1)
    pod = wait_for(lambda: out_of_routing(client), TIMEOUT_S, "the leaving leader unlabelled")
    # Out of the Service's endpoints and the InferencePool's selection; the group still there.
    assert not any(selects(s, pod) for s in selectors(client))
    assert all(selects(s, client.get(POD, NS, f"{NAME}-g0-0") or {}) for s in selectors(client))
    group = client.get(LEADER_WORKER_SET, NS, LEAVING)
    assert group is not None
    assert DRAINING_ANNOTATION in group["metadata"]["annotations"]

    def draining() -> dict[str, Any] | None:
        progressing = condition(status_of(client, NS, NAME), "Progressing")
        return progressing if "2 requests in flight" in progressing["message"] else None

    progressing = wait_for(draining, TIMEOUT_S, "Progressing to say the group drains")
    assert (progressing["status"], progressing["reason"]) == ("True", "Draining")
    resyncs(metrics_of(operator), 3)  # reconciles (each prunes) while the requests run
    assert client.get(LEADER_WORKER_SET, NS, LEAVING) is not None
    assert client.get(COMPUTE_DOMAIN, NS, LEAVING) is not None  # its pods still use it
    assert stand_in.held == 2
    stand_in.released.set()
    for thread in requests:
        thread.join(TIMEOUT_S)
    assert stand_in.completed == 2  # every request in flight answered
    wait_for(lambda: gone(client), TIMEOUT_S, "the drained group deleted")
    # Its pods terminate on the IMEX channel: the domain stays until they are gone (there is no
    # kubelet here to end them: deleted by hand, as once their grace ended).
    resyncs(metrics_of(operator), 2)
    assert client.get(COMPUTE_DOMAIN, NS, LEAVING) is not None
    for pod in client.list(POD, NS):
        if pod["metadata"]["name"].startswith(f"{LEAVING}-"):
            client.delete(POD, NS, pod["metadata"]["name"])
    wait_for(lambda: client.get(COMPUTE_DOMAIN, NS, LEAVING) is None or None, TIMEOUT_S)
    patched = [
        i
        for i, w in enumerate(api.writes())
        if w.method == "PATCH" and "/pods/" in w.path and w.name == f"{LEAVING}-0"
    ]
    (deleted,) = deleted_at(api, "/leaderworkersets/", LEAVING)
    assert patched
    assert patched[0] < deleted  # out of routing first
    (started,) = wait_for(lambda: events(client, "DrainStarted"), TIMEOUT_S)
    assert started == f"{LEAVING} out of routing, draining for up to 600 s"
    drained = wait_for(lambda: events(client, "Drained"), TIMEOUT_S)
    assert drained == [f"{LEAVING} drained: no request in flight"]
    wait_for(
        lambda: (
            condition(status_of(client, NS, NAME), "Progressing")["reason"] == "Reconciled" or None
        ),
        TIMEOUT_S,
        "Reconciled",
    )


@pytest.mark.parametrize("leader_answers", [True, False], ids=["requests-never-end", "silent"])
@pytest.mark.usefixtures("operator")
def test_the_grace_bounds_a_drain(client: Client, stand_in: StandIn, leader_answers: bool) -> None:
    """drainSeconds 6: a group whose requests never finish, or whose leader never answers (in
    flight unknown), is deleted once the grace passed, not before it was out of routing."""
    create(client, drain_seconds=6)
    serving(client, stand_in.port)
    stand_in.hold(1)
    stand_in.silent = not leader_answers
    scale(client, 1)
    wait_for(lambda: out_of_routing(client), TIMEOUT_S, "the leaving leader unlabelled")
    wanted = "1 requests in flight" if leader_answers else "unknown requests in flight"
    wait_for(
        lambda: wanted in condition(status_of(client, NS, NAME), "Progressing")["message"] or None,
        TIMEOUT_S,
        "the drain's count in Progressing",
    )
    wait_for(lambda: gone(client), TIMEOUT_S, "the group deleted after its grace")
    assert stand_in.held == 1  # deleted with its request still held: the grace decided


@pytest.mark.usefixtures("operator")
def test_a_decode_group_behind_the_routing_sidecar_is_not_drained_by_vllms_count(
    client: Client, operator: OperatorThread, stand_in: StandIn
) -> None:
    """A bug once: behind llm-d's routing sidecar (spec.prefill), a decode leader's vLLM counts
    no request still in its remote prefill, so a group whose vLLM said 0 was deleted with
    requests in the sidecar. The sidecar exposes no count: the group waits its whole grace."""
    create(client, drain_seconds=600, prefill={"replicas": 1})
    serving(client, stand_in.port, groups=3)  # two decode groups and a prefill group
    scale(client, 1)
    wait_for(lambda: out_of_routing(client), TIMEOUT_S, "the leaving decode leader unlabelled")
    resyncs(metrics_of(operator), 3)  # reconciles (each prunes): vLLM says 0 all along
    assert stand_in.held == 0
    assert client.get(LEADER_WORKER_SET, NS, LEAVING) is not None
    progressing = condition(status_of(client, NS, NAME), "Progressing")
    assert "unknown requests in flight" in progressing["message"], progressing


def test_a_scale_back_up_cancels_the_drain(
    api: EmbeddedApiServer, client: Client, operator: OperatorThread, stand_in: StandIn
) -> None:
    create(client, drain_seconds=600)
    serving(client, stand_in.port)
    before = client.get(LEADER_WORKER_SET, NS, LEAVING)
    assert before is not None
    stand_in.hold(1)
    scale(client, 1)
    wait_for(lambda: out_of_routing(client), TIMEOUT_S, "the leaving leader unlabelled")
    scale(client, 2)

    def back() -> dict[str, Any] | None:
        group = client.get(LEADER_WORKER_SET, NS, LEAVING)
        pod = leader(client)
        routed = pod["metadata"]["labels"].get(ROUTABLE_LABEL) == "true"
        unmarked = group is not None and DRAINING_ANNOTATION not in group["metadata"].get(
            "annotations", {}
        )
        return pod if routed and unmarked else None

    pod = wait_for(back, TIMEOUT_S, "the group back in routing")
    assert all(selects(s, pod) for s in selectors(client))
    resyncs(metrics_of(operator), 2)
    after = client.get(LEADER_WORKER_SET, NS, LEAVING)
    assert after is not None
    assert after["metadata"]["uid"] == before["metadata"]["uid"]  # never deleted
    assert deleted_at(api, "/leaderworkersets/", LEAVING) == []
    assert wait_for(lambda: events(client, "DrainCancelled"), TIMEOUT_S) == [
        f"{LEAVING} wanted again: back in routing"
    ]
    wait_for(
        lambda: (
            condition(status_of(client, NS, NAME), "Progressing")["reason"] == "Reconciled" or None
        ),
        TIMEOUT_S,
        "Reconciled",
    )
