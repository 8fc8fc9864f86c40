"""One run of the downloader: resolve once, check what is there, fetch the rest in parallel, seal.

Progress goes where a pod without API access can put it: log lines, and the termination-message
file, rewritten after every file, so the kubelet reports the last state even of a killed run.
"""

from __future__ import annotations

import fcntl
import json
import logging
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kimi_kernels.weights.fetch import FetchError, Hub, fetch, resolve
from kimi_kernels.weights.layout import (
    MANIFEST,
    STATE_DIR,
    Manifest,
    ManifestFile,
    RemoteFile,
    Target,
    mismatch,
    read_target,
    write_manifest,
    write_target,
)

log = logging.getLogger("kimi_kernels.weights")
TERMINATION_MESSAGE_LIMIT = 4096  # bytes the kubelet keeps


@dataclass(frozen=True)
class Request:
    repo: str
    revision: str
    dest: Path
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    jobs: int


@dataclass
class Progress:
    """Counts shared by the worker threads; `report` writes them out."""

    termination_log: Path | None
    target: Target | None = None
    phase: str = "Resolving"
    files_done: int = 0
    bytes_done: int = 0
    bytes_fetched: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def file_done(self, remote: RemoteFile, fetched: bool) -> None:
        with self._lock:
            self.files_done += 1
            self.bytes_done += remote.size
            self.bytes_fetched += remote.size if fetched else 0
            self.report()

    def report(self, reason: str = "") -> None:
        message = {"phase": self.phase, "filesDone": self.files_done, "bytesDone": self.bytes_done}
        if self.target is not None:
            message |= {
                "repo": self.target.repo,
                "commit": self.target.commit,
                "filesTotal": len(self.target.files),
                "bytesTotal": self.target.total_bytes,
                "bytesFetched": self.bytes_fetched,
            }
        if reason:
            message["reason"] = reason[:1000]
        text = json.dumps(message)
        log.info("progress: %s", text)
        if self.termination_log is not None:
            # In place, not renamed: the kubelet's termination-message file is a bind-mounted file.
            self.termination_log.write_text(text[:TERMINATION_MESSAGE_LIMIT])


def target_for(hub: Hub, request: Request) -> Target:
    """The commit this cache holds: the one resolved by the first run, whatever the branch does."""
    kept = read_target(request.dest)
    if kept is None:
        target = resolve(hub, request.repo, request.revision, request.include, request.exclude)
        write_target(request.dest, target)
        log.info("%s@%s is commit %s", target.repo, target.revision, target.commit)
        return target
    if kept.repo != request.repo or request.revision not in (kept.revision, kept.commit):
        raise FetchError(
            f"{request.dest} holds {kept.repo}@{kept.commit} (resolved from {kept.revision!r}); "
            f"it cannot take {request.repo}@{request.revision}: use another cache"
        )
    log.info(
        "resuming %s@%s (commit %s, resolved by an earlier run)",
        kept.repo,
        kept.revision,
        kept.commit,
    )
    return kept


@contextmanager
def _only_run(dest: Path) -> Iterator[None]:
    """One run per cache: a Job pod replaced while the old one still writes must not interleave."""
    (dest / STATE_DIR).mkdir(parents=True, exist_ok=True)
    with (dest / STATE_DIR / "lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            raise FetchError(f"another download is running on {dest}") from error
        yield


def run(hub: Hub, request: Request, progress: Progress) -> Manifest:
    """Make `request.dest` a complete, verified cache of the request; returns its manifest."""
    with _only_run(request.dest):
        return _run(hub, request, progress)


def _run(hub: Hub, request: Request, progress: Progress) -> Manifest:
    target = progress.target = target_for(hub, request)
    (request.dest / MANIFEST).unlink(missing_ok=True)  # incomplete until every file checks out
    _check_space(request.dest, target)
    progress.phase = "Verifying"
    progress.report()
    present: dict[str, str] = {}
    with ThreadPoolExecutor(request.jobs) as pool:
        for remote, sha256 in zip(
            target.files, pool.map(lambda r: _verified(request.dest, r), target.files), strict=True
        ):
            if sha256:
                present[remote.path] = sha256
                progress.file_done(remote, fetched=False)
        missing = sorted((r for r in target.files if r.path not in present), key=lambda r: -r.size)
        progress.phase = "Downloading"
        progress.report()

        def one(remote: RemoteFile) -> str:
            sha256 = fetch(hub, request.dest, target, remote)
            progress.file_done(remote, fetched=True)
            return sha256

        present.update(zip((r.path for r in missing), pool.map(one, missing), strict=True))
    manifest = Manifest(
        repo=target.repo,
        revision=target.revision,
        commit=target.commit,
        total_bytes=target.total_bytes,
        files=tuple(ManifestFile(f.path, f.size, present[f.path]) for f in target.files),
    )
    write_manifest(request.dest, manifest)
    progress.phase = "Complete"
    progress.report()
    return manifest


def _verified(dest: Path, remote: RemoteFile) -> str:
    """The SHA-256 of a present, correct file; "" for a missing one, or a wrong one (removed)."""
    path = dest / remote.path
    if not path.is_file():
        return ""
    problem, sha256 = mismatch(path, remote)
    if problem is None:
        return sha256
    log.warning("%s: %s; fetching it again", remote.path, problem)
    path.unlink()
    return ""


def _check_space(dest: Path, target: Target) -> None:
    """Fail before fetching when the volume cannot hold what is still missing."""
    needed = sum(f.size for f in target.files if not (dest / f.path).is_file())
    free = shutil.disk_usage(dest).free
    if needed > free:
        raise FetchError(
            f"{dest} has {free} bytes free, {target.repo}@{target.commit[:12]} needs {needed} "
            "more:"
            " give the cache a larger size"
        )
