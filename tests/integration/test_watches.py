"""Watches resumed from a resourceVersion, 410 Gone and bookmarks, as kube-apiserver serves them
(embedded.watches), read with the operator's own client; then the operator's child watch cut
mid-stream: it resumes from its last version, or lists once after 410."""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from kimi_operator.embedded.faults import Fault
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.kubelet import group_ready_status, mark_ready
from kimi_operator.embedded.timeline import Read
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.resources import CONFIG_MAP, LEADER_WORKER_SET
from kimi_operator.k8s.watch import json_lines
from kimi_operator.runner import OperatorThread, RunConfig
from tests.support.cluster import NS, children, create, sample, status_of, wait_for
from tests.support.watches import set_watches

DEFAULT = "default"
STOCK = "k3-tp16-stock"  # no ComputeDomain: only the group's readiness can make it Ready
LWS_NAME = f"{STOCK}-g0"


def config_map(name: str, app: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": DEFAULT, "labels": {"app": app}}}


def version_of(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


@contextmanager
def watching(client: Client, version: str, selector: str = "app=x") -> Iterator[Iterator[Any]]:
    """The events of a watch of the ConfigMaps in `default` from `version`, as they come."""
    with client.watch(CONFIG_MAP, DEFAULT, version=version, label_selector=selector) as stream:
        yield json_lines(stream.chunks())


@pytest.fixture
def reader(api: EmbeddedApiServer) -> Iterator[Client]:
    """A client that gives up on a watch silent for 10 s (a missing event fails, not hangs)."""
    c = Client(load_configuration(api.url), watch_inactivity_s=10)
    yield c
    c.close()


def test_a_watch_from_a_version_gets_the_events_since_in_order_then_live_ones(
    client: Client, reader: Client
) -> None:
    since = version_of(client.create(CONFIG_MAP, config_map("a", "x")))
    client.patch(CONFIG_MAP, DEFAULT, "a", {"data": {"k": "2"}})
    client.create(CONFIG_MAP, config_map("other", "y"))  # not selected
    client.create(CONFIG_MAP, config_map("b", "x"))
    client.delete(CONFIG_MAP, DEFAULT, "a")
    with watching(reader, str(since)) as events:
        replayed = [next(events) for _ in range(3)]
        client.create(CONFIG_MAP, config_map("c", "x"))
        live = next(events)
    seen = [(e["type"], e["object"]["metadata"]["name"]) for e in [*replayed, live]]
    assert seen == [("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a"), ("ADDED", "c")]
    versions = [version_of(e["object"]) for e in [*replayed, live]]
    # A deletion has a version of its own: a watcher's version only moves forward.
    assert since < versions[0] < versions[1] < versions[2] < versions[3]


def test_a_version_older_than_the_history_is_410_gone(
    api: EmbeddedApiServer, client: Client, reader: Client
) -> None:
    set_watches(api, history_window=3)
    first = version_of(client.create(CONFIG_MAP, config_map("a", "x")))
    patched = [
        version_of(client.patch(CONFIG_MAP, DEFAULT, "a", {"data": {"step": str(step)}}))
        for step in range(4)
    ]  # the window keeps the last three events: patched[0] is the newest gone
    with watching(reader, str(first)) as events:
        error = next(events)
    assert error["type"] == "ERROR"
    assert error["object"]["code"] == 410
    assert error["object"]["reason"] == "Expired"
    assert error["object"]["message"] == f"too old resource version: {first} ({patched[0]})"
    with watching(reader, str(patched[1])) as events:  # within the window: resumed
        assert [version_of(next(events)["object"]) for _ in range(2)] == patched[2:]


def test_a_watch_allowing_bookmarks_gets_them_with_the_current_version(
    api: EmbeddedApiServer, client: Client, reader: Client
) -> None:
    set_watches(api, bookmark_interval_s=0.1)
    created = version_of(client.create(CONFIG_MAP, config_map("a", "x")))
    with watching(reader, str(created)) as events:
        client.create(CONFIG_MAP, config_map("unwatched", "y"))  # a newer version, not selected
        newest = version_of(client.get(CONFIG_MAP, DEFAULT, "unwatched") or {})
        bookmark = next(events)
        while version_of(bookmark["object"]) < newest:  # one may have come before the create
            bookmark = next(events)
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["kind"] == "ConfigMap"
    assert version_of(bookmark["object"]) == newest


# --- the operator's child watch ----------------------------------------------------------------


def ready_except_the_group(api: EmbeddedApiServer, client: Client) -> None:
    """Everything Ready but the group (its LeaderWorkerSet starting), and the operator done
    with it (no status write for a second): from then on only the group's own event can make
    the deployment Ready."""
    mark = api.status_mark()
    mark_ready(client, NS, hold=lambda _: True)
    wait_for(lambda: api.status_mark() > mark, 30, "the status after the first marks")
    while api.status_mark() > mark:
        mark = api.status_mark()
        time.sleep(1.0)


def group_ready(client: Client) -> None:
    """The LeaderWorkerSet controller's word: the group is Ready."""
    lws = client.get(LEADER_WORKER_SET, NS, LWS_NAME) or {}
    ready = group_ready_status(lws)
    client.patch(LEADER_WORKER_SET, NS, LWS_NAME, {"status": ready}, subresource="status")


def lws_reads(api: EmbeddedApiServer, since: int) -> list[Read]:
    """The operator's lists and watches of LeaderWorkerSets (cluster-wide; the tests' own are
    in a namespace)."""
    path = f"{LEADER_WORKER_SET.group_version_path}/{LEADER_WORKER_SET.plural}"
    return [read for read in api.reads(since) if read.path == path]


def test_a_cut_child_watch_resumes_from_its_version_and_the_change_reaches_status(
    api: EmbeddedApiServer, client: Client, token: str
) -> None:
    """The LeaderWorkerSet watch is cut in the middle of the event that says the group is Ready:
    the operator watches again from its last version, without listing, and the replayed event
    reports Ready long before the resync (60 s)."""
    config = RunConfig(server=api.url, token=token, resync_interval_s=60, workers=2)
    with OperatorThread(config):
        create(client, sample(STOCK))
        ready_except_the_group(api, client)
        seen = version_of(children(client, STOCK)[f"LeaderWorkerSet/{LWS_NAME}"])
        mark = len(api.reads())
        api.inject(Fault("GET", "/leaderworkersets", drop_watch=True))
        group_ready(client)
        wait_for(
            lambda: status_of(client, NS, STOCK).get("readyReplicas") == 1,
            30,
            "the group's readiness, seen through the resumed watch",
        )
    assert api.injected().get("watch-drop") == 1
    reads = lws_reads(api, mark)
    assert [read.verb for read in reads][:1] == ["watch"]  # no list
    assert int(reads[0].resource_version) == seen  # where the cut stream had got to


def test_a_child_deleted_while_the_watch_was_cut_is_created_again(
    api: EmbeddedApiServer, client: Client, token: str
) -> None:
    """The deletion of a LeaderWorkerSet is the event the cut loses: the resumed watch gets it
    (an object gone is in no listing), and the operator creates the group again within seconds,
    not at the resync (60 s)."""
    config = RunConfig(server=api.url, token=token, resync_interval_s=60, workers=2)
    with OperatorThread(config):
        create(client, sample(STOCK))
        before = children(client, STOCK)[f"LeaderWorkerSet/{LWS_NAME}"]
        api.inject(Fault("GET", "/leaderworkersets", drop_watch=True))
        client.delete(LEADER_WORKER_SET, NS, LWS_NAME)
        wait_for(
            lambda: (
                (client.get(LEADER_WORKER_SET, NS, LWS_NAME) or before)["metadata"]["uid"]
                != before["metadata"]["uid"]
            ),
            30,
            "the group created again after the replayed deletion",
        )
    assert api.injected().get("watch-drop") == 1


def test_a_child_watch_resumed_past_the_history_lists_once(
    api: EmbeddedApiServer, client: Client, token: str
) -> None:
    """The watch goes silent as the group becomes Ready, and the history window (one event)
    moves on meanwhile: the resumed watch gets 410, the operator lists the LeaderWorkerSets once
    and hands them on, and the status says Ready. (Bookmarks every 0.2 s keep the quiet watches
    alive within the inactivity timeout of 4 s, as every minute does in a cluster for 70 s; at 1 s,
    a stall of the process for as long timed the watch out before the silence was injected.)"""
    set_watches(api, bookmark_interval_s=0.2)
    config = RunConfig(
        server=api.url, token=token, resync_interval_s=60, workers=2, watch_inactivity_s=4.0
    )
    with OperatorThread(config):
        create(client, sample(STOCK))
        ready_except_the_group(api, client)
        mark = len(api.reads())
        api.inject(Fault("GET", "/leaderworkersets", drop_watch=True, silent=True))
        set_watches(api, history_window=1)
        group_ready(client)  # the event the silent stream never sends
        moved = {"metadata": {"labels": {"moved": "on"}}}
        client.patch(LEADER_WORKER_SET, NS, LWS_NAME, moved)  # the window has moved past it
        wait_for(lambda: len(lws_reads(api, mark)) >= 3, 30, "the watch resumed, and what followed")
        wait_for(
            lambda: status_of(client, NS, STOCK).get("readyReplicas") == 1,
            10,
            "the group's readiness, seen through the listing after 410",
        )
    assert api.injected().get("watch-silence") == 1
    verbs = [read.verb for read in lws_reads(api, mark)]
    assert verbs[:3] == ["watch", "list", "watch"]  # resumed, 410, listed, watching again
    assert verbs.count("list") == 1
