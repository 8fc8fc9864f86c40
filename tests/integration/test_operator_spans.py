"""The operator's own reconciles as spans (kimi_operator/spans.py, docs/observability.md), sent
over OTLP/HTTP to a receiver on 127.0.0.1 by the operator running against the embedded API
server: every reconcile a trace, its observe, decide, act and status steps under it with the
deployment, its generation and the outcome; a rollout held back says on what. And off unless
asked: no exporter made, nothing sent, even with the SDK's variables set."""

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from kimi_operator.embedded.faults import Fault
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT
from kimi_operator.runner import OperatorThread, RunConfig
from tests.integration.conftest import RESYNC_S
from tests.support.cluster import condition, reconciled, sample, status_of, wait_for
from tests.support.groups import images, kubelet
from tests.support.otlp_receiver import Receiver, Span

NS, NAME = "inference", "k3-tp8-dspark"
OLD, NEW = "registry/vllm-kimi:1", "registry/vllm-kimi:2"
STEPS = ["observe", "decide", "act", "status"]
TIMEOUT_S = 60.0


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as received:
        yield received


@pytest.fixture
def traced(api: EmbeddedApiServer, token: str, receiver: Receiver) -> Iterator[OperatorThread]:
    config = RunConfig(
        server=api.url,
        token=token,
        resync_interval_s=RESYNC_S,
        workers=2,
        traces_endpoint=receiver.url,
    )
    with OperatorThread(config) as operator:
        yield operator


def _steps(spans: list[Span], root: Span) -> list[Span]:
    """The spans right under `root`, in the order they started."""
    under = [s for s in spans if s["parent_span_id"] == root["span_id"]]
    assert {s["trace_id"] for s in under} <= {root["trace_id"]}
    return sorted(under, key=lambda s: s["start"])


def _step(spans: list[Span], root: Span, name: str) -> dict[str, Any]:
    (found,) = [s for s in _steps(spans, root) if s["name"] == name]
    attributes: dict[str, Any] = found["attributes"]
    return attributes


def test_a_reconcile_is_a_trace_and_a_rollout_held_back_says_on_what(
    api: EmbeddedApiServer, client: Client, receiver: Receiver, traced: OperatorThread
) -> None:
    doc = sample()
    doc["spec"].update(replicas=2, image=OLD)
    client.create(KIMI_DEPLOYMENT, doc)
    groups = [f"{NAME}-g0", f"{NAME}-g1"]
    # The groups on the new image never become Ready: the rollout rewrites g0 and holds g1.
    with kubelet(api, NS, hold=lambda group: NEW in str(group)):
        wait_for(
            lambda: (
                images(client, NS) == dict.fromkeys(groups, OLD)
                and status_of(client, NS, NAME).get("readyReplicas") == 2
            ),
            TIMEOUT_S,
            "both groups Ready",
        )
        client.patch(KIMI_DEPLOYMENT, NS, NAME, {"spec": {"image": NEW}})
        wait_for(
            lambda: (
                condition(status_of(client, NS, NAME), "Progressing")["reason"] == "RollingOut"
                and images(client, NS) == {groups[0]: NEW, groups[1]: OLD}
            ),
            TIMEOUT_S,
            "the rollout holding g1",
        )
        traced.stop()  # sends the spans still queued
    spans = receiver.received()
    roots = [s for s in spans if s["name"] == "reconcile"]
    assert roots
    for root in roots:
        assert root["parent_span_id"] == ""
        assert root["resource"]["service.name"] == "kimi-operator"
        attributes = root["attributes"]
        assert (attributes["k8s.namespace.name"], attributes["kimi.deployment"]) == (NS, NAME)
        # A reconcile that read the deployment went through every step (none failed here).
        assert [s["name"] for s in _steps(spans, root)] == STEPS, attributes

    first = min(roots, key=lambda s: s["start"])
    assert first["attributes"]["kimi.reconcile.trigger"] == "create"
    assert first["attributes"]["kimi.generation"] == 1
    assert first["attributes"]["kimi.reconcile.result"] == "reconciled"
    observed = _step(spans, first, "observe")
    assert (observed["kimi.observe.first"], observed["kimi.observe.groups"]) == (True, [])
    assert {f"LeaderWorkerSet/{g}" for g in groups} <= set(
        _step(spans, first, "act")["kimi.act.created"]
    )
    assert _step(spans, first, "status")["kimi.status.written"] is True

    def held(root: Span) -> bool:
        reason = _step(spans, root, "status")["kimi.progressing.reason"]
        return bool(root["attributes"].get("kimi.generation") == 2 and reason == "RollingOut")

    waiting = [r for r in roots if held(r)]
    assert waiting, "no reconcile of generation 2 saw the rollout held back"
    decided = _step(spans, waiting[-1], "decide")
    assert decided["kimi.rollout.held"] == [groups[1]]
    assert (decided["kimi.rollout.rolling"], decided["kimi.rollout.updated"]) == (True, 1)
    status = _step(spans, waiting[-1], "status")
    assert status["kimi.progressing.message"].startswith("1 of 2 groups updated")
    assert (status["kimi.progressing"], status["kimi.ready.reason"]) == ("True", "GroupsNotReady")


def test_a_status_write_that_fails_is_an_error_that_says_what_it_would_have_written(
    api: EmbeddedApiServer, client: Client, receiver: Receiver, traced: OperatorThread
) -> None:
    """The status step's attributes are set before its write: a write refused (here a 500, once)
    leaves the step an error that still says what the status was to say (they were lost, and a
    reader of the step's attributes failed, when a busy machine's write met a conflict)."""
    api.inject(Fault("PATCH", f"/kimideployments/{NAME}/status", 500))
    client.create(KIMI_DEPLOYMENT, sample())
    wait_for(lambda: reconciled(client, 1, NAME, NS), TIMEOUT_S, "the status written at last")
    traced.stop()
    spans = receiver.received()
    failed = [s for s in spans if s["name"] == "status" and s["error"]]
    assert len(failed) == 1, [s["attributes"] for s in spans if s["name"] == "status"]
    attributes = failed[0]["attributes"]
    assert attributes["kimi.status.written"] is True
    assert (attributes["kimi.ready"], attributes["kimi.ready.reason"]) == (
        "False",
        "GroupsNotReady",
    )
    assert attributes["kimi.progressing.reason"]  # what a rollout waits on, said though unwritten


def test_off_unless_asked(
    api: EmbeddedApiServer,
    client: Client,
    token: str,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An operator without a traces endpoint makes no exporter and sends nothing, though the
    SDK's own variables name the receiver (only `kimi-operator run` reads them, as its flag's
    default)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.url)
    made: list[object] = []
    original = OTLPSpanExporter.__init__

    def counted(self: OTLPSpanExporter, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(OTLPSpanExporter, "__init__", counted)
    config = RunConfig(server=api.url, token=token, resync_interval_s=RESYNC_S, workers=2)
    with OperatorThread(config) as operator:
        assert operator.controller.tracing is None
        client.create(KIMI_DEPLOYMENT, sample())
        wait_for(lambda: reconciled(client, 1, NAME, NS), TIMEOUT_S, "the first status")
    assert made == []
    assert receiver.received() == []
