"""The one place that talks to the API server.

Every failure becomes an `ApiError` (k8s/errors.py) with the HTTP status (0: no answer) and the
server's Retry-After; the controller decides what to retry (controller/retry.py). A 404 on a read
or a delete is an answer ("not there"), not an error.
"""

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from kimi_operator.k8s.errors import ApiError, NotLeading
from kimi_operator.k8s.ratelimit import TokenBucket
from kimi_operator.k8s.resources import LEASE, Resource

MERGE_PATCH = "application/merge-patch+json"
WATCH_TIMEOUT_S = 300  # the server ends each watch after this; it is resumed from the last version
# A watch with neither event nor bookmark this long is taken for a dead connection and resumed
# (kube-apiserver sends a bookmark about every minute; kopf waits 70 s too).
WATCH_INACTIVITY_S = 70.0
LIST_PAGE_SIZE = 500  # objects per page of a list (limit/continue)
CONNECT_S = 5.0

# A request's body (encoded), query and content type.
Request = tuple[bytes | None, Mapping[str, str] | None, str]
# (verb, kind, HTTP status or 0 for no answer): observed after every request, for metrics.
RequestHook = Callable[[str, str, int], None]
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# With leader election: the seconds a write may still take (what is left of this replica's
# leadership plus the margin before a standby can take over); 0 or less: it may not write.
WriteBudget = Callable[[], float]


def load_configuration(server: str | None = None, token: str | None = None) -> Any:
    """`server` (plain HTTP: the embedded API server; `token`: the bearer token to send, else
    none), in-cluster config, or KUBECONFIG."""
    configuration = k8s_client.Configuration()
    if server is not None:
        configuration.host = server
        if token is not None:
            configuration.api_key = {"authorization": token}
            configuration.api_key_prefix = {"authorization": "Bearer"}
        return configuration
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        k8s_config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return configuration


def classify(verb: str, what: str, status: int, body: bytes, retry_after: str | None) -> ApiError:
    """The error for an HTTP failure, with the server's message and Retry-After."""
    try:
        details = json.loads(body)
        message = details.get("message") or details.get("reason") or ""
    except (ValueError, AttributeError):
        message = body.decode("utf-8", "replace")[:200]
    text = f"{verb} {what}: HTTP {status}: {message}".rstrip(": ")
    delay = float(retry_after) if retry_after and retry_after.isdigit() else None
    return ApiError(text, code=status, retry_after_s=delay)


class Client:
    """A thin JSON client over the `kubernetes` package's connection handling (auth, TLS)."""

    def __init__(
        self,
        configuration: Any,
        *,
        timeout_s: float = 15.0,
        discovery_ttl_s: float = 30.0,
        pool_size: int = 32,
        on_request: RequestHook | None = None,
        rate_limit: TokenBucket | None = None,
        watch_inactivity_s: float = WATCH_INACTIVITY_S,
        page_size: int = LIST_PAGE_SIZE,
    ) -> None:
        configuration.connection_pool_maxsize = pool_size
        self._api = k8s_client.ApiClient(configuration)
        self.host: str = configuration.host
        self._pool: urllib3.PoolManager = self._api.rest_client.pool_manager
        self._read_s = timeout_s
        self._timeout = urllib3.Timeout(connect=CONNECT_S, read=timeout_s)
        # Bookmarks keep a live watch talking; silence this long is a dead connection.
        self._watch_timeout = urllib3.Timeout(connect=CONNECT_S, read=watch_inactivity_s)
        self._rate_limit, self._page_size = rate_limit, page_size
        self._discovery_ttl_s = discovery_ttl_s
        self._discovered: dict[str, tuple[float, frozenset[str]]] = {}
        self._discovering = threading.Lock()
        self._on_request = on_request
        # Asked before every write but to the Lease (the election's own): with leader election,
        # how long this replica may still write (controller/leader.py). None: no election.
        self.write_budget: WriteBudget | None = None

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]

    def _send(  # noqa: PLR0917 (a private helper: what, method, path, request, stream)
        self,
        what: tuple[str, Resource],
        method: str,
        path: str,
        request: Request,
        stream: bool,
        timeout_s: float | None = None,
    ) -> urllib3.BaseHTTPResponse:
        """The response to one request; `what` is (verb, resource), for metrics, messages and
        the write budget; `stream`: its body not read yet; `timeout_s`: the whole request's
        bound, instead of the client's timeouts. A write is refused (`NotLeading`) when the
        budget is spent, and never outlasts it."""
        (verb, resource), (body, query, content_type) = what, request
        kind, election = resource.kind, resource == LEASE
        if self._rate_limit is not None and not election:  # renewals never wait their turn
            self._rate_limit.wait()
        timeout = self._watch_timeout if stream else self._timeout
        if timeout_s is not None:
            timeout = urllib3.Timeout(total=timeout_s)
        # After the wait for a token, right before sending: a lease may lapse while a write
        # queues behind a burst (or its process is frozen there).
        budget = self.write_budget
        if method in WRITE_METHODS and not election and budget is not None:
            left = budget()
            if left <= 0:
                raise NotLeading(f"{verb} {kind} {path}: refused: this replica is not the leader")
            # No request outlives the leadership by more than the margin (docs/architecture.md).
            cap = left if timeout_s is None else min(left, timeout_s)
            timeout = urllib3.Timeout(connect=CONNECT_S, read=self._read_s, total=cap)
        headers = {"Accept": "application/json", "Content-Type": content_type}
        self._api.update_params_for_auth(headers, None, ["BearerToken"], path, method, body)
        url = self.host + path + (f"?{urlencode(query)}" if query else "")
        # Straight to the connection pool the kubernetes package configured (TLS, proxy): its
        # request layers walk and re-encode every body once more.
        try:
            response = self._pool.request(
                method,
                url,
                body=body,
                headers=headers,
                timeout=timeout,
                # No retrying inside urllib3: it would sleep out a 429's or 503's Retry-After on
                # GET and DELETE in the reconcile thread, unseen by the status and the metrics.
                retries=False,
                preload_content=not stream,
            )
        except (urllib3.exceptions.HTTPError, OSError) as error:
            self._observe(verb, kind, 0)
            raise ApiError(f"{verb} {kind} {path}: {error}", code=0) from None
        self._observe(verb, kind, response.status)
        return response

    def _request(
        self,
        verb: str,
        resource: Resource,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        missing_ok: bool = False,
        exists_ok: bool = False,
        decode: bool = True,
        timeout_s: float | None = None,
    ) -> Any:
        """The decoded JSON answer ({} unless `decode`); None for a 404 when `missing_ok`, a 409
        when `exists_ok`."""
        encoded = None if body is None else json.dumps(body).encode()
        request = (encoded, query, content_type)
        response = self._send((verb, resource), method, path, request, False, timeout_s)
        status, data = response.status, response.data
        if (status == 404 and missing_ok) or (status == 409 and exists_ok):
            return None
        if status >= 300:
            retry_after = response.headers.get("Retry-After")
            raise classify(verb, f"{resource.kind} {path}", status, data, retry_after)
        return json.loads(data) if data and decode else {}

    def _observe(self, verb: str, kind: str, status: int) -> None:
        if self._on_request is not None:
            self._on_request(verb, kind, status)

    def served(self, resource: Resource) -> bool:
        """Whether the cluster serves `resource` (its CRD is installed); cached for a while so that
        installing a CRD later is noticed. One thread asks at a time: a burst of reconciles
        finding the cache stale waits for one answer rather than asking once each."""
        path = resource.group_version_path
        with self._discovering:
            cached = self._discovered.get(path)
            now = time.monotonic()
            if cached is None or cached[0] < now:
                answer = self._request("discover", resource, "GET", path, missing_ok=True)
                plurals = frozenset(r.get("name", "") for r in (answer or {}).get("resources", []))
                cached = self._discovered[path] = (now + self._discovery_ttl_s, plurals)
        return resource.plural in cached[1]

    def get(
        self, resource: Resource, namespace: str, name: str, *, timeout_s: float | None = None
    ) -> dict[str, Any] | None:
        path = resource.item(namespace, name)
        found: dict[str, Any] | None = self._request(
            "get", resource, "GET", path, missing_ok=True, timeout_s=timeout_s
        )
        return found

    def list(
        self, resource: Resource, namespace: str | None = None, *, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        """Every object of `resource` in `namespace` (or in all namespaces) with the labels."""
        found = self._pages(resource, namespace, label_selector, missing_ok=False)
        assert found is not None  # a 404 raised
        return found.items

    def create(
        self, resource: Resource, body: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        path = resource.collection(body["metadata"].get("namespace", ""))
        created: dict[str, Any] = self._request(
            "create", resource, "POST", path, body=body, timeout_s=timeout_s
        )
        return created

    def create_if_absent(self, resource: Resource, body: Mapping[str, Any]) -> bool:
        """Whether it was created (False: one of that name exists already). The answer is not
        decoded: a new object holds what was sent (decoding the answers was about 8% of the
        operator's CPU in a profiled burst of 200 new deployments)."""
        path = resource.collection(body["metadata"].get("namespace", ""))
        answer = self._request(
            "create", resource, "POST", path, body=body, exists_ok=True, decode=False
        )
        return answer is not None

    def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str = "",
    ) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386) of the object or of its `subresource`."""
        path = resource.item(namespace, name) + (f"/{subresource}" if subresource else "")
        patched: dict[str, Any] = self._request(
            "patch", resource, "PATCH", path, body=dict(patch), content_type=MERGE_PATCH
        )
        return patched

    def replace(
        self, resource: Resource, body: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """PUT the whole object. With `metadata.resourceVersion` it is a compare-and-swap: a
        409 `ApiError` when the object changed since that version was read."""
        meta = body["metadata"]
        path = resource.item(meta["namespace"], meta["name"])
        replaced: dict[str, Any] = self._request(
            "replace", resource, "PUT", path, body=dict(body), timeout_s=timeout_s
        )
        return replaced

    def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        *,
        propagation: str = "Background",
        precondition: Mapping[str, str] | None = None,
    ) -> bool:
        """False when it was already gone. What it owns goes too, in the background by default
        (a Job's default for a plain DELETE is to orphan its pods); `propagation`: Foreground or
        Orphan, as `kubectl delete --cascade` sends them (in a DeleteOptions body, as kubectl
        does). `precondition` (`apply.preconditions`): only the object as it was read, else a 409
        `ApiError`."""
        options: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": propagation,
        }
        if precondition is not None:
            options["preconditions"] = dict(precondition)
        path = resource.item(namespace, name)
        answer = self._request("delete", resource, "DELETE", path, body=options, missing_ok=True)
        return answer is not None

    def listing(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        limit: int | None = None,
    ) -> "Listing | None":
        """The collection's resourceVersion, where a watch starts, and its objects (all of
        them, page by page, or the first `limit`); None when `resource` is not served (its CRD
        not installed)."""
        return self._pages(resource, namespace, label_selector, missing_ok=True, limit=limit)

    def _pages(
        self,
        resource: Resource,
        namespace: str | None,
        label_selector: str,
        *,
        missing_ok: bool,
        limit: int | None = None,
    ) -> "Listing | None":
        """A list read in pages of `page_size` (limit and continue, as client-go's pager); the
        version is the first page's, the snapshot the later pages continue. An expired continue
        token is a 410 `ApiError`."""
        path = _collection_path(resource, namespace)
        selector = {"labelSelector": label_selector} if label_selector else {}
        version, token = "", ""
        items: list[dict[str, Any]] = []
        while True:
            query = {
                "limit": str(limit or self._page_size),
                **selector,
                **({"continue": token} if token else {}),
            }
            answer = self._request(
                "list", resource, "GET", path, query=query, missing_ok=missing_ok
            )
            if answer is None:
                return None
            meta = answer.get("metadata") or {}
            version = version or str(meta.get("resourceVersion", ""))
            items += answer.get("items") or []
            token = meta.get("continue") or ""
            if limit is not None or not token:
                return Listing(version, items)

    def watch(
        self, resource: Resource, namespace: str | None, *, version: str, label_selector: str = ""
    ) -> "WatchStream":
        """The collection's changes from `version`, with bookmarks, until the server ends the
        watch (WATCH_TIMEOUT_S). A 410 (`version` too old: list again) is an `ApiError`."""
        query = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_S),
            **({"labelSelector": label_selector} if label_selector else {}),
            **({"resourceVersion": version} if version else {}),
        }
        path = _collection_path(resource, namespace)
        what = f"watch {resource.kind} {path}"
        request = (None, query, "application/json")
        response = self._send(("watch", resource), "GET", path, request, True)
        if response.status >= 300:
            data = response.read()
            response.release_conn()
            retry_after = response.headers.get("Retry-After")
            raise classify("watch", f"{resource.kind} {path}", response.status, data, retry_after)
        return WatchStream(response, what)


@dataclass(frozen=True)
class Listing:
    version: str
    items: list[dict[str, Any]]


def _collection_path(resource: Resource, namespace: str | None) -> str:
    return resource.collection(namespace or "")


class WatchStream:
    """A watch's answer: its body in chunks as they arrive. `interrupt`, from another thread,
    ends a read that waits for the next one."""

    def __init__(self, response: urllib3.BaseHTTPResponse, what: str) -> None:
        self._response = response
        self._what = what

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self._response.close()

    def chunks(self) -> Iterator[bytes]:
        try:
            yield from self._response.stream(64 * 1024)
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise ApiError(f"{self._what}: {error}", code=0) from None

    def interrupt(self) -> None:
        with contextlib.suppress(ValueError, RuntimeError, OSError):  # closed or released already
            self._response.shutdown()
