"""Talking to the hub with `huggingface_hub`: the revision's file list, and one file's bytes.

`huggingface_hub` retries a 429 and resumes a connection cut mid-file within one call; a kill ends
that. Here a file is fetched into `partial/<path>.part`, appended to with a `Range` request on the
next attempt or the next run, and a 5xx or a failed check costs one of `retries` attempts. A file
the hub serves from Xet storage goes through `hf_xet` (chunked, deduplicated) when it is installed.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx2
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.file_download import http_get, xet_get
from huggingface_hub.utils._headers import build_hf_headers
from huggingface_hub.utils._runtime import is_xet_available

from kimi_kernels.weights.layout import PARTIAL, RemoteFile, Target, mismatch, selected

log = logging.getLogger("kimi_kernels.weights")
RETRIED_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_TRANSIENT = (httpx2.TransportError, OSError)


class FetchError(Exception):
    """A failure that another attempt will not fix (auth, not found) or that used every attempt."""


@dataclass(frozen=True)
class Hub:
    endpoint: str
    token: str | None
    retries: int
    retry_wait_s: float

    @property
    def auth(self) -> str | bool:
        """The token, or False: huggingface_hub reads None as "use HF_TOKEN or a stored login"."""
        return self.token or False

    @property
    def attempts(self) -> range:
        return range(1, self.retries + 1)

    def wait(self, what: str, attempt: int, error: Exception) -> None:
        """Log a transient failure and sleep before the next attempt, or raise after the last."""
        if isinstance(error, HfHubHTTPError) and error.response.status_code not in RETRIED_STATUS:
            raise FetchError(f"{what}: {error}") from error
        if attempt >= self.retries:
            raise FetchError(f"{what}: {error} (after {attempt} attempts)") from error
        delay = self.retry_wait_s * 2 ** (attempt - 1)
        log.warning(
            "%s: %s; attempt %d of %d in %.1fs", what, error, attempt + 1, self.retries, delay
        )
        time.sleep(delay)


def resolve(
    hub: Hub, repo: str, revision: str, include: tuple[str, ...], exclude: tuple[str, ...]
) -> Target:
    """The commit `revision` names now, and its files that `include`/`exclude` select."""
    api = HfApi(endpoint=hub.endpoint, token=hub.auth)
    what = f"listing {repo}@{revision}"
    for attempt in hub.attempts:
        try:
            info = api.model_info(repo, revision=revision, files_metadata=True)
            break
        except (HfHubHTTPError, *_TRANSIENT) as error:
            hub.wait(what, attempt, error)
    if info.sha is None or info.siblings is None:
        raise FetchError(f"{what}: the hub's answer has no commit or no file list")
    files = tuple(
        RemoteFile(
            path=s.rfilename,
            size=s.lfs.size if s.lfs is not None else (s.size or 0),
            sha256=s.lfs.sha256 if s.lfs is not None else None,
            blob_id=s.blob_id,
        )
        for s in info.siblings
        if selected(s.rfilename, include, exclude)
    )
    if not files:
        raise FetchError(f"{what}: no file matches include {list(include)} minus {list(exclude)}")
    return Target(repo=repo, revision=revision, commit=info.sha, files=files)


def fetch(hub: Hub, dest: Path, target: Target, remote: RemoteFile) -> str:
    """Fetch `remote` into `dest` and verify it; returns its SHA-256."""
    final = dest / remote.path
    part = dest / PARTIAL / f"{remote.path}.part"
    part.parent.mkdir(parents=True, exist_ok=True)
    what = f"{remote.path}@{target.commit[:12]}"
    for attempt in hub.attempts:
        try:
            _download(hub, target, remote, part)
            problem, sha256 = mismatch(part, remote)
            if problem is None:
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(part, final)
                return sha256
            part.unlink()
            raise OSError(f"fetched file failed its check ({problem}); fetching it again")
        except (HfHubHTTPError, *_TRANSIENT) as error:
            hub.wait(what, attempt, error)
    raise AssertionError("unreachable: the last attempt raises")


def _download(hub: Hub, target: Target, remote: RemoteFile, part: Path) -> None:
    url = hf_hub_url(target.repo, remote.path, revision=target.commit, endpoint=hub.endpoint)
    headers = build_hf_headers(token=hub.auth)
    have = part.stat().st_size if part.exists() else 0
    if have > remote.size:
        part.unlink()
        have = 0
    if have == remote.size:
        return
    if is_xet_available():
        meta = get_hf_file_metadata(url, token=hub.auth, endpoint=hub.endpoint)
        if meta.xet_file_data is not None:
            # Xet reconstructs the whole file (deduplicated chunks); a partial one is not reused.
            xet_get(
                incomplete_path=part,
                xet_file_data=meta.xet_file_data,
                headers=headers,
                expected_size=remote.size,
                displayed_filename=remote.path,
            )
            return
        if urlsplit(meta.location).netloc != urlsplit(url).netloc:
            headers.pop("authorization", None)  # a signed CDN address: the token stays with the hub
        url = meta.location
    if have:
        log.info("%s: resuming at byte %d of %d", remote.path, have, remote.size)
    with part.open("ab") as f:
        http_get(url, f, resume_size=have, headers=headers, expected_size=remote.size)
        f.flush()
        os.fsync(f.fileno())
