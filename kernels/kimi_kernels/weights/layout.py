"""What a weights cache holds on disk, and how a file is checked against the hub's metadata.

`<dest>/<path>` are the repository's files at one commit (vLLM loads `<dest>` as the model
directory); `<dest>/.kimi-weights/` is the downloader's: `target.json` (the repo, the revision asked
for, the commit it resolved to and the file list, written once so that a resumed download keeps
that commit even if the branch moved), `partial/` (files being fetched) and `manifest.json`, written
last: a cache is complete exactly when it has a manifest.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

STATE_DIR = ".kimi-weights"
MANIFEST = f"{STATE_DIR}/manifest.json"
TARGET = f"{STATE_DIR}/target.json"
PARTIAL = f"{STATE_DIR}/partial"

# What vLLM loads from a Hugging Face checkpoint: safetensors weights, the JSON configs and index,
# tokenizer files (Kimi's tokenizer is tiktoken plus remote code, hence *.py) and chat templates.
DEFAULT_INCLUDE = (
    "*.safetensors",
    "*.json",
    "*.py",
    "*.jinja",
    "tokenizer*",
    "*.tiktoken",
    "tiktoken.model",
    "vocab.txt",
    "merges.txt",
)
# Other formats' copies of the same weights (Meta-style consolidated checkpoints).
DEFAULT_EXCLUDE = ("original/*",)
_CHUNK = 8 << 20


@dataclass(frozen=True)
class RemoteFile:
    """A file of the commit as the hub lists it: an LFS file has a SHA-256, a git file a blob id."""

    path: str
    size: int
    sha256: str | None
    blob_id: str | None


@dataclass(frozen=True)
class Target:
    repo: str
    revision: str
    commit: str
    files: tuple[RemoteFile, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class ManifestFile:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    repo: str
    revision: str
    commit: str
    total_bytes: int
    files: tuple[ManifestFile, ...]


def selected(path: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> bool:
    def matches(patterns: tuple[str, ...]) -> bool:
        return any(fnmatch.fnmatchcase(path, p) for p in patterns)

    return matches(include) and not matches(exclude)


def digest(path: Path, git_blob: bool) -> tuple[str, str]:
    """(SHA-256, git blob SHA-1 or "") of a file, read once; the SHA-1 only when asked for."""
    sha256 = hashlib.sha256()
    blob = hashlib.sha1(b"blob %d\0" % path.stat().st_size, usedforsecurity=False)
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            sha256.update(chunk)
            if git_blob:
                blob.update(chunk)
    return sha256.hexdigest(), blob.hexdigest() if git_blob else ""


def mismatch(path: Path, remote: RemoteFile) -> tuple[str | None, str]:
    """Why `path` is not `remote` (None when it is), and its SHA-256 ("" when not read)."""
    size = path.stat().st_size
    if size != remote.size:
        return f"size {size}, the hub lists {remote.size}", ""
    git_file = remote.sha256 is None and remote.blob_id is not None
    sha256, blob_id = digest(path, git_blob=git_file)
    if remote.sha256 is not None and sha256 != remote.sha256:
        return f"SHA-256 {sha256}, the hub lists {remote.sha256}", sha256
    if git_file and blob_id != remote.blob_id:
        return f"git blob {blob_id}, the hub lists {remote.blob_id}", sha256
    return None, sha256


def write_atomically(path: Path, text: str) -> None:
    """Write, fsync, rename: a reader sees the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_target(dest: Path, target: Target) -> None:
    write_atomically(dest / TARGET, json.dumps(asdict(target), indent=1))


def read_target(dest: Path) -> Target | None:
    path = dest / TARGET
    if not path.is_file():
        return None
    raw = json.loads(path.read_text())
    files = tuple(RemoteFile(**f) for f in raw.pop("files"))
    return Target(files=files, **raw)


def write_manifest(dest: Path, manifest: Manifest) -> None:
    write_atomically(dest / MANIFEST, json.dumps(asdict(manifest), indent=1))


def read_manifest(dest: Path) -> Manifest | None:
    """The manifest of a complete cache, None while the cache is incomplete."""
    path = dest / MANIFEST
    if not path.is_file():
        return None
    raw = json.loads(path.read_text())
    files = tuple(ManifestFile(**f) for f in raw.pop("files"))
    return Manifest(files=files, **raw)
