"""The KV hand-over of spec.prefill for real, on vLLM's CPU build (0.32.0, not the 0.33.0 the
operator targets): a prefill and a decode server on loopback with the operator's rendered
kv-transfer settings and variables, the connector swapped for one that runs without GPUs
(ExampleConnector: KV blocks through a shared folder; NIXL needs its own wheels and spins a CPU
per server: docs/disaggregation.md),
and requests sent the way llm-d's routing sidecar sends them (pkg/sidecar/proxy/connector_nixlv2.go
at v0.10.0): the prefill with `kv_transfer_params.do_remote_decode`, one output token and no
streaming, then the request itself to the decode server with the `kv_transfer_params` the prefill
returned. The decode server must take the prompt from the hand-over, not compute it, and answer
what the prefill server answers alone.

Own servers, not the session's: two, each with a connector, started side by side; about a minute
on 2 CPUs."""

import json
import random
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kimi_operator.bench.profiles import WORDS
from kimi_operator.builders.disaggregation import Serving, handover_env, kv_transfer_flags
from kimi_operator.dev.cpu_vllm import HOST, MODEL_NAME, CpuServer, side_by_side
from kimi_operator.embedded.processes import free_port
from tests.vllm.conftest import require_cpu_vllm

PROMPT_WORDS = 1200
OUTPUT_TOKENS = 16
ROLES: tuple[Serving, ...] = ("prefill", "decode")


def role_settings(serving: Serving, folder: Path) -> tuple[tuple[str, ...], dict[str, str]]:
    """The operator's flags and variables of a role, NIXL swapped for ExampleConnector and the
    pod's IP (the side channel's host, from the downward API) for loopback."""
    flag, rendered = kv_transfer_flags(serving)
    config = json.loads(rendered)
    assert config.pop("kv_connector") == "NixlConnector"
    config = {
        "kv_connector": "ExampleConnector",
        "kv_connector_extra_config": {"shared_storage_path": str(folder)},
        **config,
    }
    env = {e["name"]: e.get("value", HOST) for e in handover_env(serving)}
    return (flag, json.dumps(config)), env


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CpuServer, CpuServer]]:
    require_cpu_vllm()
    folder = tmp_path_factory.mktemp("kv-handover")
    logs = tmp_path_factory.mktemp("logs")
    made = []
    for serving in ROLES:
        args, env = role_settings(serving, folder)
        log = (logs / f"{serving}.log").open("wb")
        made.append(
            CpuServer(
                port=free_port(),
                metrics_port=free_port(),
                threads=1,
                log=log,
                args=list(args),
                env=dict(env),
            )
        )
    try:
        with side_by_side(made):
            yield made[0], made[1]
    except RuntimeError as error:
        logs_text = {s: (logs / f"{s}.log").read_text(errors="replace")[-4000:] for s in ROLES}
        pytest.fail(f"{error}; their logs:\n{logs_text}")


def _post(server: CpuServer, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{server.root}/v1/completions",
        data=json.dumps({"model": MODEL_NAME, "temperature": 0, **body}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def _prompt_tokens_by_source(server: CpuServer) -> dict[str, float]:
    with urllib.request.urlopen(f"{server.root}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {
        sample.labels["source"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "vllm:prompt_tokens_by_source"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def test_the_decode_server_takes_the_prompt_from_the_prefill_server(
    servers: tuple[CpuServer, CpuServer],
) -> None:
    prefill, decode = servers
    prompt = " ".join(random.Random(39).choices(WORDS, k=PROMPT_WORDS))
    before = _prompt_tokens_by_source(decode)

    # What the sidecar sends the prefill group: its own kv_transfer_params, one token, no stream.
    prefilled = _post(
        prefill,
        {
            "prompt": prompt,
            "max_tokens": 1,
            "stream": False,
            "kv_transfer_params": {
                "do_remote_decode": True,
                "do_remote_prefill": False,
                "remote_engine_id": None,
                "remote_block_ids": None,
                "remote_host": None,
                "remote_port": None,
            },
        },
    )
    prompt_tokens = prefilled["usage"]["prompt_tokens"]
    assert prompt_tokens > 1000

    # Then the request itself, to its own vLLM, with what the prefill returned.
    handed = {"kv_transfer_params": prefilled["kv_transfer_params"]}
    decoded = _post(
        decode,
        {"prompt": prompt, "max_tokens": OUTPUT_TOKENS, "ignore_eos": True}
        | {k: v for k, v in handed.items() if v is not None},
    )
    after = _prompt_tokens_by_source(decode)
    moved = {source: after[source] - before.get(source, 0.0) for source in after}
    # ExampleConnector hands over the whole blocks of the prompt but its last token (the decode
    # side computes that one, as NIXL does for hybrid models): less than a block is computed.
    assert decode.settings is not None
    assert decode.settings.block_size is not None
    block = decode.settings.block_size
    assert moved["external_kv_transfer"] >= prompt_tokens - block, (moved, block)
    assert moved["local_compute"] <= block, (moved, block)
    assert moved["external_kv_transfer"] + moved["local_compute"] == prompt_tokens

    # The same answer as the prefill server gives alone (greedy).
    alone = _post(prefill, {"prompt": prompt, "max_tokens": OUTPUT_TOKENS, "ignore_eos": True})
    assert decoded["choices"][0]["text"] == alone["choices"][0]["text"]
