"""Issue 59: on a CPU with AMX tiles vLLM's CPU build runs its attention on them, and a worker
that used them before anything in it had asked Linux for them died of SIGILL: the first batch of
1-4 tokens reaches the attention with no oneDNN call before it (oneDNN is what asks, lazily), a
longer one does not. Every process of the server now asks at its start (cpu_site/
sitecustomize.py). On a machine without AMX these pass on the path it has ("vec"): the servers
below are the same servers, the check is that nothing changed there.
"""

import json
import urllib.error
import urllib.request
from pathlib import Path

from kimi_operator.dev.cpu_vllm import (
    MODEL_NAME,
    PYTHON,
    SITE,
    CpuServer,
    attention_isa,
    cpu_features,
    environment,
)
from kimi_operator.embedded.processes import free_port
from tests.support.amx_probe import run as amx_probe
from tests.vllm.conftest import require_cpu_vllm

# Fresh servers, one after the other: the failure came with each new worker process, and on an
# AMX machine before the fix every one of these died at its first request.
STARTS = 3
TOKENS = 8


def test_the_attention_path_vllm_picks_runs_only_where_every_process_holds_its_tiles() -> None:
    """vLLM's own choice (`_get_attn_isa`) under the server's environment, in a process started
    as the API server is and in one spawned as its workers are: "amx" only where both hold the
    tiles, else "vec" and nothing asked; pytest's header names the same path."""
    require_cpu_vllm()
    report = amx_probe(str(PYTHON), environment(metrics_port=1, threads=1), "--isa")
    assert report["isa"] == attention_isa(cpu_features()), report
    assert report["torch_amx"] == (report["isa"] == "amx"), report
    for process in (report["process"], report["spawn"]):
        assert process["sitecustomize"] == str(SITE / "sitecustomize.py")
        assert process["permitted"] == (report["isa"] == "amx"), report


def _first_completion(root: str) -> dict[str, int]:
    """The server's first request: a one-token prompt (its first batch: 1 token, the case that
    took no oneDNN path before the attention)."""
    body = {
        "model": MODEL_NAME,
        "prompt": "the",
        "max_tokens": TOKENS,
        "ignore_eos": True,
        "temperature": 0,
    }
    request = urllib.request.Request(
        f"{root}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        usage: dict[str, int] = json.loads(response.read())["usage"]
    return usage


def test_fresh_servers_in_a_row_each_answer_their_first_one_token_prompt(tmp_path: Path) -> None:
    require_cpu_vllm()
    amx = attention_isa(cpu_features()) == "amx"
    for start in range(STARTS):
        log = tmp_path / f"vllm-{start}.log"
        with log.open("wb") as stream:
            server = CpuServer(free_port(), free_port(), threads=1, log=stream)
            with server:
                try:
                    usage = _first_completion(server.root)
                except urllib.error.URLError as error:  # HTTP 500: the engine died
                    tail = log.read_text(errors="replace")[-4000:]
                    raise AssertionError(f"start {start + 1}: {error}; its log:\n{tail}") from None
        text = log.read_text(errors="replace")
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (1, TOKENS), usage
        assert "died unexpectedly" not in text, text[-4000:]
        assert "AMX tiles refused" not in text, text[-4000:]
        # API server, engine core, worker (and multiprocessing's helpers): one line each.
        assert (text.count("kimi sitecustomize: AMX tiles granted") >= 3) == amx, text[-4000:]
