"""The lean watch: which child events refresh an owner, and list+watch against a scripted server
on 127.0.0.1 (410 Gone, dropped streams, resources not served, huge and split lines, a listing's
objects handed on)."""

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp.web
import pytest

from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.resources import LEADER_WORKER_SET
from kimi_operator.k8s.watch import RELIST_S, Watch, owners_to_refresh, refreshing

OWNER = {"kind": "KimiDeployment", "uid": "u-1", "controller": True}


def child(owner: dict[str, Any] | None = None, status: Any = None, version: str = "1") -> Any:
    metadata: dict[str, Any] = {"name": "k3-g0", "resourceVersion": version}
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    obj: dict[str, Any] = {"metadata": metadata}
    if status is not None:
        obj["status"] = status
    return obj


SHARED = {**OWNER, "controller": False}


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"type": "ADDED", "object": child(OWNER)}, []),  # just created: no status yet
        ({"type": "MODIFIED", "object": child(OWNER, {"readyReplicas": 1})}, ["u-1"]),
        ({"type": "ADDED", "object": child(OWNER, {"readyReplicas": 0})}, ["u-1"]),
        ({"type": "DELETED", "object": child(OWNER)}, ["u-1"]),
        ({"type": "BOOKMARK", "object": child(OWNER, {"x": 1})}, []),
        ({"type": "MODIFIED", "object": child({**OWNER, "kind": "Deployment"}, {"x": 1})}, []),
        ({"type": "MODIFIED", "object": child(None, {"x": 1})}, []),
        # A shared weights cache: every deployment using it.
        ({"type": "MODIFIED", "object": child(SHARED, {"x": 1})}, ["u-1"]),
    ],
)
def test_only_status_changes_and_deletions_of_controlled_children_refresh(
    event: dict[str, Any], expected: list[str]
) -> None:
    assert owners_to_refresh(event["type"], event["object"]) == expected


def test_a_shared_cache_refreshes_all_its_users_and_a_controlled_child_only_its_owner() -> None:
    obj = child(SHARED, {"succeeded": 1})
    obj["metadata"]["ownerReferences"].append({**SHARED, "uid": "u-2"})
    assert owners_to_refresh("MODIFIED", obj) == ["u-1", "u-2"]
    obj["metadata"]["ownerReferences"].append({**OWNER, "uid": "u-3"})
    assert owners_to_refresh("MODIFIED", obj) == ["u-3"]


Script = Callable[[aiohttp.web.Request], Awaitable[aiohttp.web.StreamResponse]]


async def stream(request: aiohttp.web.Request, *chunks: bytes) -> aiohttp.web.StreamResponse:
    response = aiohttp.web.StreamResponse()
    await response.prepare(request)
    for chunk in chunks:
        await response.write(chunk)
        await asyncio.sleep(0.01)
    return response


def line(kind: str, obj: Any) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


async def started(app: aiohttp.web.Application) -> tuple[aiohttp.web.AppRunner, int]:
    """`app` served on 127.0.0.1: its runner (to clean up) and port."""
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port: int = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


async def watch_against(
    lists: list[Script],
    watches: list[Script],
    *,
    wanted: int,
    watches_wanted: int = 1,
    token: str | None = None,
    with_items: bool = False,
    inactivity_s: float = 70.0,
    waits: list[float] | None = None,
) -> tuple[list[str], list[dict[str, str]], list[aiohttp.web.Request]]:
    """Run a child watch against a server answering its lists and watches in turn (the last
    answer repeats) until `wanted` owners were refreshed and `watches_wanted` watches made; the
    owners, the watches' query parameters and every request. `with_items`: a watch that hands
    whole objects on, listed ones too; then "TYPE name" of each object instead of owners.
    `waits`: the watch's waits are recorded there, and not waited."""
    requests: list[aiohttp.web.Request] = []

    async def serve(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        requests.append(request)
        turn = watches if request.query.get("watch") == "true" else lists
        done = sum(1 for r in requests if (r.query.get("watch") == "true") == (turn is watches))
        return await turn[min(done, len(turn)) - 1](request)

    app = aiohttp.web.Application()
    app[STOPPING] = asyncio.Event()
    app.router.add_get("/{tail:.*}", serve)
    runner, port = await started(app)
    configuration = load_configuration(f"http://127.0.0.1:{port}")
    if token is not None:
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
    owners: list[str] = []

    def watches_made() -> int:
        return sum(1 for r in requests if r.query.get("watch") == "true")

    def handed(event_type: str | None, obj: Mapping[str, Any]) -> None:
        owners.append(f"{event_type} {obj['metadata']['name']}")

    watch = Watch(
        Client(configuration, watch_inactivity_s=inactivity_s),
        LEADER_WORKER_SET,
        "inference",
        handed if with_items else refreshing(owners.append),
        label_selector="" if with_items else "app.kubernetes.io/managed-by=kimi-operator",
        with_items=with_items,
        retry_s=0.05,
        not_served_retry_s=0.05,
    )
    if waits is not None:
        watch._stopping = Recorded(waits)  # its waits, on no clock
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    try:
        async with asyncio.timeout(10):
            while len(owners) < wanted or watches_made() < watches_wanted:
                await asyncio.sleep(0.01)
    finally:
        watch.stop()  # interrupts a watch stream the server holds open
        await asyncio.to_thread(thread.join, 10)
        app[STOPPING].set()
        await runner.cleanup()
    assert not thread.is_alive()
    queries = [dict(r.query) for r in requests if r.query.get("watch") == "true"]
    return owners, queries, requests


class Recorded(threading.Event):
    """A stop event whose timed waits are recorded (`waits`) and return at once."""

    def __init__(self, waits: list[float]) -> None:
        super().__init__()
        self.waits = waits

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is None:
            return super().wait()
        self.waits.append(timeout)
        return self.is_set()


def listed(version: str, *items: Any) -> Script:
    async def answer(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        limit = int(request.query.get("limit", len(items)))
        listing = {"metadata": {"resourceVersion": version}, "items": list(items[:limit])}
        return aiohttp.web.json_response(listing)

    return answer


def watched(*chunks: bytes) -> Script:
    async def answer(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        return await stream(request, *chunks)

    return answer


STOPPING = aiohttp.web.AppKey("stopping", asyncio.Event)


async def hang(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
    """A watch with nothing to say, open until the test ends."""
    response = await stream(request, b"")
    await request.app[STOPPING].wait()
    return response


def owner(uid: str) -> dict[str, Any]:
    return {**OWNER, "uid": uid}


def test_lists_then_watches_from_its_version_and_relists_after_gone() -> None:
    gone = line("ERROR", {"kind": "Status", "code": 410, "message": "too old"})
    owners, queries, _ = asyncio.run(
        watch_against(
            [listed("5"), listed("9")],
            [
                watched(line("MODIFIED", child(owner("a"), {"r": 1}, "7")), gone),
                watched(line("MODIFIED", child(owner("b"), {"r": 1}, "11"))),  # then ends
                hang,
            ],
            wanted=3,
            watches_wanted=3,
        )
    )
    assert owners == ["a", "a", "b"]  # a's child, missing from the listing after 410: deleted
    # Watch from the list's version; after 410, list again; after the stream ended, resume from
    # the last version seen.
    assert [q.get("resourceVersion") for q in queries[:3]] == ["5", "9", "11"]
    assert all(q["labelSelector"] == "app.kubernetes.io/managed-by=kimi-operator" for q in queries)
    assert all(q["allowWatchBookmarks"] == "true" for q in queries)


def test_waits_while_the_resource_is_not_served_then_watches() -> None:
    async def not_served(_: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        return aiohttp.web.json_response({"kind": "Status", "code": 404}, status=404)

    owners, _, requests = asyncio.run(
        watch_against(
            [not_served, not_served, listed("3")],
            [watched(line("DELETED", child(owner("a")))), hang],
            wanted=1,
        )
    )
    assert owners == ["a"]
    lists = [r for r in requests if r.query.get("watch") != "true"]
    assert len(lists) >= 3
    assert all(
        r.path == "/apis/leaderworkerset.x-k8s.io/v1/namespaces/inference/leaderworkersets"
        for r in requests
    )


def test_lines_split_across_writes_and_long_and_credentials() -> None:
    big = child(owner("big"), {"conditions": [{"message": "x" * 300_000}]}, "8")
    encoded = line("MODIFIED", big)
    pieces = [encoded[i : i + 7000] for i in range(0, len(encoded), 7000)]
    owners, _, requests = asyncio.run(
        watch_against(
            [listed("1")],
            [
                watched(b"\n", *pieces, line("BOOKMARK", {"metadata": {"resourceVersion": "9"}})),
                hang,
            ],
            wanted=1,
            token="s3cret",
        )
    )
    assert owners == ["big"]
    assert {r.headers.get("Authorization") for r in requests} == {"Bearer s3cret"}


def test_a_broken_stream_is_retried() -> None:
    owners, _, _ = asyncio.run(
        watch_against(
            [listed("1")],
            [
                watched(b'{"type": "MODIFIED", "obj'),
                watched(b"not json\n"),
                watched(line("MODIFIED", child(owner("a"), {"r": 1}, "4"))),
                hang,
            ],
            wanted=1,
            watches_wanted=3,
        )
    )
    assert owners == ["a"]


def named(name: str, version: str) -> Any:
    return {"metadata": {"name": name, "resourceVersion": version}}


def test_a_watch_of_whole_objects_hands_each_listing_on_then_the_events() -> None:
    """The KimiDeployment watch: the listed objects (type None, as after a restart), every
    event but bookmarks, and after 410 Gone the new listing's objects again."""
    gone = line("ERROR", {"kind": "Status", "code": 410, "message": "too old"})
    handed, queries, requests = asyncio.run(
        watch_against(
            [listed("5", named("a", "4"), named("b", "5")), listed("9", named("b", "8"))],
            [
                watched(
                    line("BOOKMARK", {"metadata": {"resourceVersion": "6"}}),
                    line("MODIFIED", named("a", "7")),
                    line("DELETED", named("a", "8")),
                    gone,
                ),
                watched(line("ADDED", named("c", "10"))),
                hang,
            ],
            wanted=6,
            with_items=True,
        )
    )
    assert handed == ["None a", "None b", "MODIFIED a", "DELETED a", "None b", "ADDED c"]
    lists = [dict(r.query) for r in requests if r.query.get("watch") != "true"]
    assert all(q["limit"] == "500" for q in lists)  # every object, a page at a time
    assert [q.get("resourceVersion") for q in queries[:2]] == ["5", "9"]


def test_a_child_watch_lists_one_object_for_the_version_only() -> None:
    owners, _, requests = asyncio.run(
        watch_against(
            [listed("3", child(owner("x"), {"r": 1}, "2"))],
            [watched(line("MODIFIED", child(owner("a"), {"r": 1}, "4"))), hang],
            wanted=1,
        )
    )
    assert owners == ["a"]  # the listed child refreshes nothing
    lists = [dict(r.query) for r in requests if r.query.get("watch") != "true"]
    assert lists
    assert all(q["limit"] == "1" for q in lists)


def lists_of(requests: list[aiohttp.web.Request]) -> list[dict[str, str]]:
    return [dict(r.query) for r in requests if r.query.get("watch") != "true"]


def test_a_dropped_stream_resumes_from_the_last_version_without_listing_again() -> None:
    owners, queries, requests = asyncio.run(
        watch_against(
            [listed("5")],
            [
                watched(line("MODIFIED", child(owner("a"), {"r": 1}, "7")), b"not json\n"),
                watched(line("MODIFIED", child(owner("b"), {"r": 1}, "9"))),
                hang,
            ],
            wanted=2,
            watches_wanted=3,
        )
    )
    assert owners == ["a", "b"]
    assert [q.get("resourceVersion") for q in queries[:3]] == ["5", "7", "9"]
    assert len(lists_of(requests)) == 1  # a list only at the start: none on a dropped stream


def test_a_silent_stream_is_taken_for_dead_and_resumed() -> None:
    """No event nor bookmark within the inactivity timeout: the connection is presumed dead (a
    read timeout, not the 5 minutes the server's own timeout would take) and the watch resumes
    from its version."""

    async def silent(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        response = await stream(request, b"")
        await asyncio.sleep(3)  # longer than the inactivity timeout; then a late end
        return response

    owners, queries, requests = asyncio.run(
        watch_against(
            [listed("5")],
            [silent, watched(line("MODIFIED", child(owner("a"), {"r": 1}, "6"))), hang],
            wanted=1,
            watches_wanted=2,
            inactivity_s=0.3,
        )
    )
    assert owners == ["a"]
    assert [q.get("resourceVersion") for q in queries[:2]] == ["5", "5"]
    assert len(lists_of(requests)) == 1


def test_children_listed_again_after_gone_are_handed_on() -> None:
    """A child that became Ready while the watch was too far behind (410) refreshes its owner
    from the new listing, not at the next resync."""
    gone = line("ERROR", {"kind": "Status", "code": 410, "message": "too old"})
    owners, _, requests = asyncio.run(
        watch_against(
            [
                listed("5", child(owner("a"), {"r": 1}, "4")),
                listed("9", child(owner("b"), {"readyReplicas": 1}, "8")),
            ],
            [watched(gone), hang],
            wanted=1,
            watches_wanted=2,
        )
    )
    assert owners == ["b"]  # the first listing (for the version) refreshes nothing
    limits = [q["limit"] for q in lists_of(requests)]
    assert limits[:2] == ["1", "500"]


def test_a_watch_whose_handler_raises_dies_saying_so() -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("a bug in a handler")

    async def run() -> Watch:
        async def serve(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
            if request.query.get("watch") == "true":
                return await stream(request, line("MODIFIED", child(owner("a"), {"r": 1}, "6")))
            return await listed("5")(request)

        app = aiohttp.web.Application()
        app.router.add_get("/{tail:.*}", serve)
        runner, port = await started(app)
        watch = Watch(
            Client(load_configuration(f"http://127.0.0.1:{port}")),
            LEADER_WORKER_SET,
            "inference",
            broken,
        )
        thread = threading.Thread(target=watch.run, daemon=True)
        thread.start()
        await asyncio.to_thread(thread.join, 10)
        await runner.cleanup()
        assert not thread.is_alive()
        return watch

    watch = asyncio.run(run())
    assert isinstance(watch.failed, RuntimeError)


def test_410s_in_a_row_relist_after_a_jittered_delay_that_doubles() -> None:
    """client-go's reflector backs off before it lists again; listing at once, a server whose
    history is too short for the watch would be listed in a tight loop."""
    gone = line("ERROR", {"kind": "Status", "code": 410, "message": "too old"})
    changed = line("MODIFIED", child(owner("a"), {"r": 1}, "13"))
    waits: list[float] = []
    owners, _, requests = asyncio.run(
        watch_against(
            [listed("5"), listed("9"), listed("12")],
            [watched(gone), watched(gone), watched(changed), hang],
            wanted=1,
            watches_wanted=4,
            waits=waits,
        )
    )
    assert owners == ["a"]
    assert len(lists_of(requests)) == 3
    first, second = waits[:2]
    assert RELIST_S <= first < 2 * RELIST_S
    assert 2 * RELIST_S <= second < 4 * RELIST_S


def test_a_child_deleted_during_the_gap_is_handed_on_as_deleted() -> None:
    """A child seen before a 410 and missing from the listing after it went away meanwhile:
    its owner is refreshed now (client-go's Replace), not at the next resync."""
    gone = line("ERROR", {"kind": "Status", "code": 410, "message": "too old"})
    seen = line("MODIFIED", child(owner("a"), {"readyReplicas": 1}, "6"))
    other = {"metadata": {"name": "other", "resourceVersion": "8"}}
    owners, _, _ = asyncio.run(
        watch_against(
            [listed("5"), listed("9", other)],
            [watched(seen, gone), hang],
            wanted=2,
            watches_wanted=2,
            waits=[],
        )
    )
    assert owners == ["a", "a"]  # its status changed, then it was found gone
