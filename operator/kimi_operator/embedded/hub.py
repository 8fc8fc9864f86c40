"""A Hugging Face Hub stand-in on 127.0.0.1, serving generated repositories the way the hub does.

It answers the endpoints `huggingface_hub` 2.4 calls to list and fetch a revision (HF_ENDPOINT
pointing here): `GET /api/models/<repo>/revision/<rev>?blobs=true` (the commit and its files with
size, git blob id and LFS SHA-256) and `HEAD|GET /<repo>/resolve/<rev>/<path>` (`X-Repo-Commit`,
`ETag`/`X-Linked-Etag`, `X-Linked-Size`, byte ranges; with `cdn=True` an LFS file's resolve is a
302 to a second server, as the hub's are to its CDN). Branches move with `push`; a private repo
answers 401 without its token; faults (429, 5xx, a connection cut mid-file, a slow file) are
scripted per path. Standard library only: the weights downloader's tests, and anything else that
needs a hub without the internet, use it.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/revision/(?P<rev>[^/?]+)$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_CDN = re.compile(r"^/cdn/(?P<repo>[^/]+/[^/]+)/(?P<rev>[0-9a-f]{40})/(?P<path>.+)$")
_RANGE = re.compile(r"^bytes=(\d+)-$")
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def git_blob_id(data: bytes) -> str:
    """The git SHA-1 the hub reports as `blobId` for a file stored in git (not LFS)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass
class Fault:
    """What the next `times` requests for a file whose path ends with `path` get."""

    path: str
    times: int = 1
    status: int = 0  # answer this status instead of the file
    cut_after: int = -1  # GET: send the headers and this many bytes, then drop the connection
    bytes_per_second: int = 0  # GET: send the file this slowly (stays in force: times is ignored)


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    token: str | None = None  # private: requests need `Authorization: Bearer <token>`


@dataclass(frozen=True)
class Served:
    """One request as the hub saw it (never the token itself)."""

    method: str
    path: str
    status: int
    range_start: int
    authorized: bool


class FakeHub:
    def __init__(self, cdn: bool = False) -> None:
        self.cdn = cdn
        self.repos: dict[str, Repo] = {}
        self.faults: list[Fault] = []
        self.served: list[Served] = []
        self.most_in_flight = 0  # file bodies being sent at once, at most (parallel fetching)
        self._in_flight = 0
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []

    def push(
        self, repo_id: str, files: dict[str, bytes], branch: str = "main", token: str | None = None
    ) -> str:
        """Commit `files` as the whole tree of `branch` (created or moved); returns the commit."""
        repo = self.repos.setdefault(repo_id, Repo(token=token))
        digest = hashlib.sha1(repo_id.encode(), usedforsecurity=False)
        for path in sorted(files):
            digest.update(path.encode() + hashlib.sha256(files[path]).digest())
        commit = digest.hexdigest()
        repo.commits[commit] = dict(files)
        repo.refs[branch] = commit
        return commit

    @property
    def url(self) -> str:
        return self._address(0)

    @property
    def cdn_url(self) -> str:
        return self._address(1)

    def _address(self, index: int) -> str:
        assert len(self._servers) > index, "run the hub (with cdn=True for a CDN) first"
        host, port = self._servers[index].server_address[:2]
        return f"http://{host!s}:{port}"

    @contextmanager
    def running(self) -> Iterator[FakeHub]:
        """Serve the hub (and its CDN) on ports of 127.0.0.1 while in the block."""
        threads = []
        for _ in range(2 if self.cdn else 1):
            server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
            server.daemon_threads = True
            self._servers.append(server)
            threads.append(threading.Thread(target=server.serve_forever, daemon=True))
            threads[-1].start()
        try:
            yield self
        finally:
            for server, thread in zip(self._servers, threads, strict=True):
                server.shutdown()
                server.server_close()
                thread.join()
            self._servers.clear()

    def gets(self, path: str) -> list[Served]:
        """The GETs of a file's bytes (resolve requests), in order."""
        return [s for s in self.served if s.method == "GET" and s.path.endswith("/" + path)]

    def _fault(self, path: str, method: str) -> Fault | None:
        """The fault a request meets: a status hits any request, a cut or slowness a GET's body."""
        with self._lock:
            for fault in self.faults:
                if not path.endswith(fault.path) or (method != "GET" and not fault.status):
                    continue
                if fault.times > 0 or fault.bytes_per_second:
                    if not fault.bytes_per_second:
                        fault.times -= 1
                    return fault
        return None

    @contextmanager
    def _sending(self) -> Iterator[None]:
        with self._lock:
            self._in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self._in_flight)
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    def _record(self, served: Served) -> None:
        with self._lock:
            self.served.append(served)


def _lfs(path: str) -> bool:
    return path.endswith(LFS_SUFFIXES)


def _sibling(path: str, data: bytes) -> dict[str, object]:
    entry: dict[str, object] = {"rfilename": path, "size": len(data), "blobId": git_blob_id(data)}
    if _lfs(path):
        entry["lfs"] = {
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "pointerSize": 134,
        }
    return entry


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the hub records requests in `served` instead."""

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def _answer(self, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            fault = hub._fault(path, self.command)
            if fault is not None and fault.status:
                self._error(path, fault.status, "", "Slow down" if fault.status == 429 else "Oops")
                return
            api, resolve, cdn = _API.match(path), _RESOLVE.match(path), _CDN.match(path)
            match = api or resolve or cdn
            repo = hub.repos.get(match["repo"]) if match else None
            if match is None or repo is None:
                self._error(path, 404, "RepoNotFound", "Repository not found")
                return
            authorized = repo.token is None or self.headers.get("Authorization") == (
                f"Bearer {repo.token}"
            )
            if not authorized and cdn is None:  # a CDN address is signed: it needs no token
                self._error(path, 401, "RepoNotFound", "Invalid username or password.")
                return
            rev = unquote(match["rev"])
            commit = repo.refs.get(rev, rev)
            if commit not in repo.commits:
                self._error(path, 404, "RevisionNotFound", "Invalid rev id")
                return
            files = repo.commits[commit]
            if api is not None:
                info = {
                    "id": match["repo"],
                    "sha": commit,
                    "private": repo.token is not None,
                    "siblings": [_sibling(p, d) for p, d in sorted(files.items())],
                }
                self._send(
                    path,
                    200,
                    json.dumps(info).encode(),
                    body=body,
                    headers={"X-Repo-Commit": commit},
                )
                return
            data = files.get(match["path"])
            if data is None:
                self._error(path, 404, "EntryNotFound", "Entry not found")
                return
            if hub.cdn and cdn is None and _lfs(match["path"]):
                location = f"{hub.cdn_url}/cdn/{match['repo']}/{commit}/{match['path']}"
                self._redirect(path, commit, data, location)
                return
            self._file(path, commit, match["path"], data, body=body, fault=fault)

        def _redirect(self, path: str, commit: str, data: bytes, location: str) -> None:
            """An LFS file on the hub: 302 to the CDN, its size and SHA-256 in X-Linked-*."""
            hub._record(Served(self.command, path, 302, 0, "Authorization" in self.headers))
            sha = hashlib.sha256(data).hexdigest()
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("X-Repo-Commit", commit)
            self.send_header("X-Linked-Etag", f'"{sha}"')
            self.send_header("X-Linked-Size", str(len(data)))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _file(
            self, path: str, commit: str, name: str, data: bytes, *, body: bool, fault: Fault | None
        ) -> None:
            headers = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
            if _lfs(name):
                sha = hashlib.sha256(data).hexdigest()
                headers |= {"ETag": f'"{sha}"', "X-Linked-Etag": f'"{sha}"'}
                headers["X-Linked-Size"] = str(len(data))
            else:
                headers["ETag"] = f'"{git_blob_id(data)}"'
            start, status = 0, 200
            ranged = _RANGE.match(self.headers.get("Range", ""))
            if ranged and body:
                start, status = int(ranged[1]), 206
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            payload = data[start:]
            hub._record(Served(self.command, path, status, start, "Authorization" in self.headers))
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if not body:
                return
            if fault is not None and fault.cut_after >= 0:
                self.wfile.write(payload[: fault.cut_after])
                self.wfile.flush()
                self.close_connection = True
                return
            step = max(fault.bytes_per_second // 20, 1) if fault and fault.bytes_per_second else 0
            with hub._sending():
                if not step:
                    self.wfile.write(payload)
                    return
                for offset in range(0, len(payload), step):
                    self.wfile.write(payload[offset : offset + step])
                    self.wfile.flush()
                    time.sleep(0.05)

        def _error(self, path: str, status: int, code: str, message: str) -> None:
            hub._record(Served(self.command, path, status, 0, "Authorization" in self.headers))
            payload = json.dumps({"error": message}).encode()
            headers = {"X-Error-Message": message} | ({"X-Error-Code": code} if code else {})
            if status == 429:
                headers["Retry-After"] = "0"
            self._send(
                path, status, payload, body=self.command != "HEAD", headers=headers, record=False
            )

        def _send(
            self,
            path: str,
            status: int,
            payload: bytes,
            *,
            body: bool,
            headers: dict[str, str],
            record: bool = True,
        ) -> None:
            if record:
                hub._record(Served(self.command, path, status, 0, "Authorization" in self.headers))
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if body:
                self.wfile.write(payload)

    return Handler
