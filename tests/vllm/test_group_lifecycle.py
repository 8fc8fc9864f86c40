"""A group's life on vLLM's CPU build (docs/group-lifecycle.md).

The start-up caches, measured (docs/group-lifecycle.md, "What the caches
save"): three starts of the compiled server, every cache under one root as the pods render it
(builders/lifecycle.py, `cache_env`), each start with a temp folder of its own so that nothing
warm hides there. The second start, warm, is faster than the first; a third with one setting
vLLM hashes changed (VLLM_ENGINE_READY_TIMEOUT_S, which the operator derives from the start-up
budget) makes vLLM compile into a new folder. Ratios of one run: the machine's speed cancels.

The drain: a server given the operator's --shutdown-timeout finishes a request in flight after
SIGTERM (what the kubelet sends a leaving pod's vLLM); with 0 the request gets no further token.

Its own servers, one at a time, not the session's: about 1-2 minutes each on two CPUs.
"""

import json
import os
import re
import signal
import tempfile
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kimi_operator.api.validation import check_document
from kimi_operator.builders.lifecycle import cache_env, drain_flags
from kimi_operator.dev.cpu_vllm import MODEL_NAME, CpuServer, side_by_side
from kimi_operator.embedded.processes import free_port
from tests.support.specs import edited
from tests.vllm.conftest import require_cpu_vllm

# The operator's value for the default 90-minute budget, and a budget changed by 100 s.
READY_TIMEOUT_S = "5100"
CHANGED_READY_TIMEOUT_S = "5200"


def _start(root: Path, log: Path, ready_timeout_s: str) -> float:
    """Seconds from process start to /health, the caches under `root`."""
    env = {e["name"]: e["value"] for e in cache_env(str(root))}
    env["VLLM_ENGINE_READY_TIMEOUT_S"] = ready_timeout_s
    with tempfile.TemporaryDirectory(prefix="kimi-tmp-") as tmp, log.open("ab") as out:
        env |= {"TMPDIR": tmp, "TEMP": tmp, "TMP": tmp}
        server = CpuServer(free_port(), free_port(), log=out, compiled=True, env=env)
        with server:
            return server.start_s


def _compile_folders(root: Path) -> set[str]:
    """vLLM's compile cache folders, named by a hash of config, code and hashed environment (its
    AOT artifacts in torch_aot_compile/<hash>, the rest in <hash>)."""
    base = root / "vllm" / "torch_compile_cache"
    hashed = re.compile(r"^[0-9a-f]{10,}$")
    return {
        str(p.relative_to(base)) for p in base.rglob("*") if p.is_dir() and hashed.match(p.name)
    }


def test_a_warm_cache_root_starts_faster_and_a_hashed_setting_misses(tmp_path: Path) -> None:
    require_cpu_vllm()
    root, log = tmp_path / "cache", tmp_path / "vllm.log"
    cold = _start(root, log, READY_TIMEOUT_S)
    first = _compile_folders(root)
    assert first, f"vLLM wrote no compile cache under {root}: {sorted(root.rglob('*'))[:20]}"
    filled = {p.name for p in root.iterdir() if any(p.iterdir())}
    warm = _start(root, log, READY_TIMEOUT_S)
    assert _compile_folders(root) == first  # the same hash: it loaded, compiled nothing new
    changed = _start(root, log, CHANGED_READY_TIMEOUT_S)
    new = _compile_folders(root) - first
    print(
        f"\nstart-up with every cache under one root: cold {cold:.1f} s, warm {warm:.1f} s "
        f"(warm/cold {warm / cold:.2f}), VLLM_ENGINE_READY_TIMEOUT_S changed {changed:.1f} s "
        f"(changed/cold {changed / cold:.2f}, changed/warm {changed / warm:.2f}); caches filled: "
        f"{sorted(filled)}"
    )
    assert warm < cold, log.read_text(errors="replace")[-3000:]
    assert new, first  # the hashed setting missed: compiled into folders of its own
    assert changed > warm


# Long enough to be in flight when SIGTERM comes (the tiny model decodes tens of tokens a second
# on one CPU thread: seconds of them), inside the server's 4,096-token context.
TOKENS = 500
STALL_S = 20


@dataclass
class Streamed:
    tokens: int = 0  # completion tokens, as the last usage chunk counted them
    finish: str = ""  # the finish reason ("" when the stream broke before one)
    error: str = ""


def _stream(root: str, first: threading.Event, out: Streamed) -> None:
    """One streamed completion into `out`; `first` set at its first chunk (or its end)."""
    body = {
        "model": MODEL_NAME,
        "prompt": "the",
        "max_tokens": TOKENS,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        f"{root}/v1/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    try:
        # A drained stream never pauses this long; an aborted one stalls for good (vLLM kills the
        # engine and leaves the connection open until the client or the kubelet gives up).
        with urllib.request.urlopen(request, timeout=STALL_S) as response:
            for line in response:
                text = line.decode().strip()
                if not text.startswith("data: {"):
                    continue
                chunk = json.loads(text[len("data: ") :])
                first.set()
                if chunk.get("usage"):
                    out.tokens = int(chunk["usage"]["completion_tokens"])
                for choice in chunk.get("choices") or []:
                    out.finish = choice.get("finish_reason") or out.finish
    except OSError as error:  # the connection cut: an aborted request
        out.error = str(error)
    finally:
        first.set()


def test_sigterm_finishes_the_request_in_flight_only_with_a_drain(tmp_path: Path) -> None:
    """Two servers side by side, as the pods render them with drainSeconds 120 and 0; each gets
    SIGTERM once its stream has begun."""
    require_cpu_vllm()
    servers, drains = [], (120, 0)
    for drain_seconds in drains:
        report = check_document(edited({"spec.serving.drainSeconds": drain_seconds}))
        assert report.deployment is not None
        flags = drain_flags(report.deployment.spec.serving)  # as the pods render it
        log = (tmp_path / f"vllm-{drain_seconds}.log").open("ab")
        servers.append(CpuServer(free_port(), free_port(), threads=1, log=log, args=flags))
    with side_by_side(servers):
        streams = [(threading.Event(), Streamed()) for _ in servers]
        readers = [
            threading.Thread(target=_stream, args=(server.root, first, out))
            for server, (first, out) in zip(servers, streams, strict=True)
        ]
        for reader, server, (first, _) in zip(readers, servers, streams, strict=True):
            reader.start()
            assert first.wait(120), "no token streamed"
            assert server.process is not None
            os.kill(server.process.pid, signal.SIGTERM)  # the container's main process only
        for reader, server in zip(readers, servers, strict=True):
            reader.join(300)
            assert server.process is not None
            server.process.wait(300)
    drained, aborted = (out for _, out in streams)
    print(f"\ndrain 120 s: {drained}\ndrain 0 s: {aborted}")
    assert (drained.tokens, drained.finish, drained.error) == (TOKENS, "length", ""), drained
    assert (aborted.tokens, aborted.finish) != (TOKENS, "length"), aborted
