"""The weights downloader (`python -m kimi_kernels.weights`) against the fake hub on 127.0.0.1.

Real `huggingface_hub` on both sides of a real socket: faults, a private repository, a download
killed with SIGKILL and resumed, a corrupted cache repaired, a branch moved under a cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_kernels.weights import MANIFEST, read_manifest
from kimi_kernels.weights.__main__ import main
from kimi_kernels.weights.layout import DEFAULT_EXCLUDE, DEFAULT_INCLUDE, PARTIAL, selected
from kimi_operator.embedded.hub import FakeHub, Fault

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)

REPO = "moonshotai/Kimi-K3-tiny"
TOKEN = "hf_kimiSECRETtoken0123456789"
BIG = "model-00001-of-00002.safetensors"
BIG_SIZE = 24 << 20  # over huggingface_hub's 10 MiB write chunk, so a killed fetch leaves bytes


def _repo(seed: bytes) -> dict[str, bytes]:
    def noise(n: int) -> bytes:
        block = hashlib.sha256(seed).digest() * 2048  # 64 KiB
        return (block * (n // len(block) + 1))[:n]

    return {
        BIG: noise(BIG_SIZE),
        "model-00002-of-00002.safetensors": noise(300_000)[::-1],
        "model.safetensors.index.json": b'{"weight_map": {}}',
        "config.json": b'{"model_type": "kimi_k3", "seed": "' + seed + b'"}',
        "tokenizer_config.json": b"{}",
        "tiktoken.model": b"tok " + seed,
        "tokenization_kimi.py": b"# remote code\n",
        "original/consolidated.00.safetensors": b"other format",
        "pytorch_model.bin": b"other format",
        "README.md": b"# card",
    }


WANTED = sorted(p for p in _repo(b"") if not p.startswith(("original/", "pytorch", "README")))


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    fake = FakeHub()
    fake.push(REPO, _repo(b"v1"))
    with fake.running():
        yield fake


def _args(hub: FakeHub, dest: Path, *extra: str) -> list[str]:
    return [
        "--repo", REPO, "--dest", str(dest), "--endpoint", hub.url, "--retry-wait", "0.05",
        "--termination-log", str(dest.parent / "termination-log"), *extra,
    ]  # fmt: skip


def _termination(dest: Path) -> dict[str, object]:
    result: dict[str, object] = json.loads((dest.parent / "termination-log").read_text())
    return result


def test_default_filter_is_what_vllm_loads() -> None:
    picked = [p for p in _repo(b"") if selected(p, DEFAULT_INCLUDE, DEFAULT_EXCLUDE)]
    assert sorted(picked) == WANTED


def test_downloads_verifies_and_seals_with_a_manifest(hub: FakeHub, tmp_path: Path) -> None:
    dest = tmp_path / "cache"
    assert main(_args(hub, dest)) == 0
    files = _repo(b"v1")
    manifest = read_manifest(dest)
    assert manifest is not None
    assert manifest.commit == hub.repos[REPO].refs["main"]
    assert [f.path for f in manifest.files] == sorted(WANTED)
    for entry in manifest.files:
        assert (dest / entry.path).read_bytes() == files[entry.path]
        assert entry.sha256 == hashlib.sha256(files[entry.path]).hexdigest()
    assert not (dest / "pytorch_model.bin").exists()
    assert not (dest / "original").exists()
    assert not list((dest / PARTIAL).rglob("*.part"))
    done = _termination(dest)
    assert done["phase"] == "Complete"
    assert done["filesDone"] == done["filesTotal"] == len(WANTED)
    assert done["bytesFetched"] == manifest.total_bytes == sum(len(files[p]) for p in WANTED)


def test_429_5xx_and_a_cut_connection_are_retried(hub: FakeHub, tmp_path: Path) -> None:
    hub.faults += [
        Fault("/revision/main", status=503),
        Fault("config.json", status=429, times=2),
        Fault("tiktoken.model", status=502),
        Fault(BIG, status=500),
        Fault(BIG, cut_after=1 << 20),
    ]
    dest = tmp_path / "cache"
    assert main(_args(hub, dest)) == 0
    statuses = {s.status for s in hub.served}
    assert {429, 500, 502, 503} <= statuses
    assert all(f.times == 0 for f in hub.faults)  # every fault was met
    assert len(hub.gets(BIG)) >= 2  # cut, then fetched again
    assert (dest / BIG).read_bytes() == _repo(b"v1")[BIG]


def test_gives_up_with_the_status_after_the_retries(hub: FakeHub, tmp_path: Path) -> None:
    hub.faults.append(Fault("tiktoken.model", status=503, times=100))
    dest = tmp_path / "cache"
    assert main([*_args(hub, dest), "--retries", "2"]) == 1
    failed = _termination(dest)
    assert failed["phase"] == "Failed"
    assert "tiktoken.model" in str(failed["reason"])
    assert "503" in str(failed["reason"])
    assert read_manifest(dest) is None  # the other files arrived, but the cache is not complete
    assert (dest / BIG).is_file()


def test_private_repo_needs_the_token_and_no_log_line_shows_it(
    hub: FakeHub, tmp_path: Path
) -> None:
    private = "moonshotai/private"
    hub.push(private, _repo(b"p"), token=TOKEN)
    hub.faults += [Fault("config.json", status=503), Fault(BIG, cut_after=4096)]
    env = {**os.environ, "HF_TOKEN": TOKEN, "HF_ENDPOINT": hub.url, "HF_HUB_VERBOSITY": "debug"}
    dest = tmp_path / "cache"
    args = [sys.executable, "-m", "kimi_kernels.weights", *_args(hub, dest)]
    args[args.index(REPO)] = private
    ran = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr
    assert "WARNING" in ran.stderr  # the faults were logged, with their URLs
    for text in (ran.stdout, ran.stderr, (tmp_path / "termination-log").read_text()):
        assert TOKEN not in text
    assert all(s.authorized for s in hub.served if private in s.path)


def test_no_token_for_a_private_repo_fails_with_401(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.push("moonshotai/private", _repo(b"p"), token=TOKEN)
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # not the variable named: only --token-env counts
    dest = tmp_path / "cache"
    args = [*_args(hub, dest), "--token-env", "KIMI_NO_SUCH_VARIABLE"]
    args[args.index(REPO)] = "moonshotai/private"
    assert main(args) == 1
    reason = str(_termination(dest)["reason"])
    assert "401" in reason
    assert "moonshotai/private" in reason


def _partial_size(dest: Path) -> int:
    part = dest / PARTIAL / f"{BIG}.part"
    return part.stat().st_size if part.exists() else 0


def test_a_killed_download_resumes_and_keeps_its_commit(hub: FakeHub, tmp_path: Path) -> None:
    first_commit = hub.repos[REPO].refs["main"]
    slow = Fault(BIG, bytes_per_second=4 << 20)  # the first 10 MiB chunk lands after 2.5 s
    hub.faults.append(slow)
    dest = tmp_path / "cache"
    env = {**os.environ, "HF_ENDPOINT": hub.url}
    command = [sys.executable, "-m", "kimi_kernels.weights", *_args(hub, dest)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while _partial_size(dest) < 10 << 20 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = _partial_size(dest)
    assert 10 << 20 <= kept < BIG_SIZE, "the fetch was not caught mid-file"
    assert read_manifest(dest) is None
    assert _termination(dest)["phase"] == "Downloading"  # the last state a killed pod reports

    hub.faults.remove(slow)
    hub.push(REPO, _repo(b"v2"))  # main moves while the Job is down
    assert main(_args(hub, dest)) == 0
    manifest = read_manifest(dest)
    assert manifest is not None
    assert manifest.commit == first_commit
    assert (dest / "config.json").read_bytes() == _repo(b"v1")["config.json"]
    assert (dest / BIG).read_bytes() == _repo(b"v1")[BIG]
    resumed = hub.gets(BIG)[-1]
    assert resumed.status == 206
    assert resumed.range_start == kept


def test_corrupt_and_truncated_files_are_fetched_again(hub: FakeHub, tmp_path: Path) -> None:
    dest = tmp_path / "cache"
    assert main(_args(hub, dest)) == 0
    flipped = bytearray((dest / BIG).read_bytes())
    flipped[12345] ^= 0xFF
    (dest / BIG).write_bytes(bytes(flipped))  # same size, wrong content
    (dest / "config.json").write_bytes(b"{")  # truncated (a git file: checked by its blob id)
    before = len(hub.served)

    hub.faults.append(Fault(BIG, status=503, times=100))
    assert main([*_args(hub, dest), "--retries", "1"]) == 1
    assert not (dest / MANIFEST).exists()  # a cache found damaged is not complete until repaired

    hub.faults.clear()
    assert main(_args(hub, dest)) == 0
    refetched = {s.path.rsplit("/", 1)[-1] for s in hub.served[before:] if s.method == "GET"}
    assert refetched == {BIG, "config.json"}
    assert (dest / BIG).read_bytes() == _repo(b"v1")[BIG]
    assert (dest / "config.json").read_bytes() == _repo(b"v1")["config.json"]
    assert read_manifest(dest) is not None


def test_a_complete_cache_ignores_a_moved_branch_and_refuses_another_revision(
    hub: FakeHub, tmp_path: Path
) -> None:
    dest = tmp_path / "cache"
    assert main(_args(hub, dest)) == 0
    commit = hub.repos[REPO].refs["main"]
    hub.push(REPO, _repo(b"v2"))
    hub.served.clear()
    assert main(_args(hub, dest)) == 0
    assert not [s for s in hub.served if REPO in s.path]  # nothing listed, nothing fetched
    manifest = read_manifest(dest)
    assert manifest is not None
    assert manifest.commit == commit

    assert main([*_args(hub, dest), "--revision", "v2-branch"]) == 1
    reason = str(_termination(dest)["reason"])
    assert f"holds {REPO}@{commit}" in reason
    assert "use another cache" in reason


def test_bad_arguments_exit_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--repo", REPO, "--dest", "/tmp/x", "--jobs", "0"])
    assert exited.value.code == 2
    assert "--jobs: must be at least 1 (got 0)" in capsys.readouterr().err


def test_files_are_fetched_in_parallel(hub: FakeHub, tmp_path: Path) -> None:
    shards = (BIG, "model-00002-of-00002.safetensors")
    hub.faults += [Fault(name, bytes_per_second=8 << 20) for name in shards]
    assert main([*_args(hub, tmp_path / "one"), "--jobs", "1"]) == 0
    assert hub.most_in_flight == 1
    assert main([*_args(hub, tmp_path / "two"), "--jobs", "2"]) == 0
    assert hub.most_in_flight == 2  # the small shard streamed while the big one did


def test_a_second_run_on_the_same_cache_is_refused(hub: FakeHub, tmp_path: Path) -> None:
    dest = tmp_path / "cache"
    (dest / ".kimi-weights").mkdir(parents=True)
    with (dest / ".kimi-weights" / "lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert main(_args(hub, dest)) == 1
    assert str(_termination(dest)["reason"]) == f"another download is running on {dest}"
    assert main(_args(hub, dest)) == 0


def test_plan_reports_commit_and_size_and_writes_nothing(hub: FakeHub, tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    args = ["--repo", REPO, "--endpoint", hub.url, "--termination-log", str(log), "--plan"]
    assert main(args) == 0
    plan = json.loads(log.read_text())
    assert plan["phase"] == "Planned"
    assert plan["commit"] == hub.repos[REPO].refs["main"]
    assert plan["filesTotal"] == len(WANTED)
    assert plan["bytesTotal"] == sum(len(_repo(b"v1")[p]) for p in WANTED)
    assert not [s for s in hub.served if "/resolve/" in s.path]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["termination-log"]


def test_dest_is_required_without_plan(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--repo", REPO])
    assert exited.value.code == 2
    assert "--dest is required (except with --plan)" in capsys.readouterr().err


def test_needs_nothing_of_the_operator_nor_torch() -> None:
    """The Job runs it in the serving image: no kopf, Kubernetes client, kimi_operator, torch."""
    probe = (
        "import sys, kimi_kernels.weights.__main__; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'kopf', 'kubernetes', 'kimi_operator', 'torch', 'vllm'}))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert ran.stdout.strip() == "[]"


def test_lfs_files_come_from_the_cdn_without_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = FakeHub(cdn=True)
    hub.push("moonshotai/private", _repo(b"p"), token=TOKEN)
    hub.faults.append(Fault(BIG, cut_after=1 << 20))  # on the CDN: resumed there with a Range
    dest = tmp_path / "cache"
    with hub.running():
        args = [*_args(hub, dest), "--token-env", "KIMI_TEST_TOKEN"]
        args[args.index(REPO)] = "moonshotai/private"
        monkeypatch.setenv("KIMI_TEST_TOKEN", TOKEN)
        assert main(args) == 0
    cdn = [s for s in hub.served if s.path.startswith("/cdn/")]
    assert {s.path.rsplit("/", 1)[-1] for s in cdn} == {
        p for p in WANTED if p.endswith(".safetensors")
    }
    assert not any(s.authorized for s in cdn)
    assert len([s for s in cdn if s.path.endswith(BIG) and s.method == "GET"]) >= 2  # cut, again
    assert all(s.authorized for s in hub.served if "/resolve/" in s.path)
    assert (dest / BIG).read_bytes() == _repo(b"p")[BIG]
