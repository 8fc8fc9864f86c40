"""A group's life on vLLM's CPU build (docs/group-lifecycle.md).

The start-up caches: two starts of the compiled server, every cache under one root as the pods
render it (builders/lifecycle.py, `cache_env`), each start with its own ports and temp folder. The
second finds the folder the first compiled into, named by vLLM's hash, and makes no other: a pod
that starts after another on the shared volume uses its graphs. That a setting vLLM hashes misses
is shown on vLLM 0.33.0's own key (tests/kimi_operator/builders/test_compile_cache_key.py); what
each start takes is measured by benchmarks/compile_cache.py, not asserted here.

The drain: a server given the operator's --shutdown-timeout finishes a request in flight after
SIGTERM (what the kubelet sends a leaving pod's vLLM); with 0 the request gets no further token.

Its own servers, not the session's: about 1-2 minutes each on two CPUs.
"""

import json
import os
import signal
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kimi_operator.api.validation import check_document
from kimi_operator.builders.lifecycle import drain_flags
from kimi_operator.dev.cpu_vllm import (
    MODEL_NAME,
    CpuServer,
    compile_folders,
    compiled_start,
    side_by_side,
)
from kimi_operator.embedded.processes import free_port
from tests.support.specs import edited
from tests.vllm.conftest import require_cpu_vllm


def test_a_second_start_uses_the_folder_the_first_compiled_into(tmp_path: Path) -> None:
    require_cpu_vllm()
    root = tmp_path / "cache"
    with (tmp_path / "vllm.log").open("ab") as log:
        cold = compiled_start(root, log)
        first = compile_folders(root)
        assert first, f"vLLM wrote no compile cache under {root}: {sorted(root.rglob('*'))[:20]}"
        warm = compiled_start(root, log)
    assert compile_folders(root) == first
    print(f"\ncompiled starts, every cache under one root: first {cold:.1f} s, second {warm:.1f} s")


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
