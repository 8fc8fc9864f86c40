"""spec.observability.tracing on the real server: vLLM's CPU build, started with the tracing flags
and environment the operator renders for a deployment, sends its spans to an OTLP receiver here;
`kimi-operator bench` sends each request with a traceparent, and every sampled request, and no
other, has an `llm_request` span in its trace with the tokens bench counted and latencies within
what bench measured (the server's clock starts later and stops sooner)."""

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_operator.api.owned_env import TRACING_ENV
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.cli import main
from kimi_operator.dev.cpu_vllm import CpuServer
from kimi_operator.embedded.processes import free_port
from tests.kimi_operator.builders.cases import CASES, deployment
from tests.support.otlp_receiver import Receiver, Span
from tests.support.pods import expand
from tests.vllm.conftest import require_cpu_vllm

NAME = "k3-tp16-latency"  # the sample's deployment
TRACING_NAMES = frozenset(e.name for e in TRACING_ENV)
# The pod's fields as the kubelet would fill them (the downward API).
POD = {"metadata.name": f"{NAME}-g0-0", "spec.nodeName": "gb300-tray-07"}
REQUESTS = 16
# Spans leave in batches: one every 100 ms (the SDK's default is 5 s), and a quiet second after
# the last expected span says no stray one follows.
BATCH_DELAY_MS = "100"
SETTLE_S = 1.0
SPANS_TIMEOUT_S = 30.0
CLIENT_SLACK_S = 0.05  # the client's clock starts before the server's and stops after it


def _requests(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s["name"] == "llm_request"]


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    require_cpu_vllm()
    with Receiver() as received:
        yield received


def _rendered(endpoint: str) -> tuple[list[str], dict[str, str]]:
    """The tracing flags and variables the operator renders on a decode leader's vLLM for a
    deployment tracing to `endpoint` over OTLP/HTTP, roots never sampled (the receiver must see
    only what a caller's traceparent asked for)."""
    doc, _ = CASES["k3-tp16-latency"]
    tracing = {"endpoint": endpoint, "protocol": "http/protobuf", "samplingRatio": 0}
    doc = doc | {"spec": doc["spec"] | {"observability": {"tracing": tracing}}}
    kd = deployment(doc)
    assert kd.metadata.name == NAME
    (group,) = [c for c in build_children(kd, OperatorDefaults()) if c["kind"] == "LeaderWorkerSet"]
    leader = group["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    (vllm,) = leader["spec"]["containers"]
    labels = leader["metadata"]["labels"]
    fields = POD | {f"metadata.labels['{k}']": v for k, v in labels.items()}
    env: dict[str, str] = {}
    for entry in vllm["env"]:
        if entry["name"] in TRACING_NAMES:
            source = entry.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            env[entry["name"]] = fields[source] if source else expand(entry["value"], env)
    args = vllm["args"]
    at = args.index("--otlp-traces-endpoint")
    return args[at : at + 2], env


@pytest.fixture(scope="module")
def traced(receiver: Receiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CpuServer]:
    args, env = _rendered(receiver.url)
    log_path = tmp_path_factory.mktemp("vllm-traced") / "server.log"
    with log_path.open("wb") as log:
        server = CpuServer(
            port=free_port(),
            metrics_port=free_port(),
            threads=1,
            log=log,
            args=args,
            env=env | {"OTEL_BSP_SCHEDULE_DELAY": BATCH_DELAY_MS},
        )
        try:
            server.__enter__()
        except RuntimeError as error:
            pytest.fail(f"{error}; its log:\n{log_path.read_text(errors='replace')[-4000:]}")
        try:
            yield server
        finally:
            server.stop()


def _spans_of(receiver: Receiver, expected: int) -> list[Span]:
    """The llm_request spans once `expected` have come and a quiet second followed."""
    receiver.wait_for(lambda spans: len(_requests(spans)) >= expected, SPANS_TIMEOUT_S)
    time.sleep(SETTLE_S)
    return _requests(receiver.received())


def test_sampled_requests_and_only_those_have_vllms_span_with_what_bench_measured(
    traced: CpuServer, receiver: Receiver, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    argv = [
        "bench", "--endpoint", f"{traced.root}/v1", "--requests", str(REQUESTS),
        "--concurrency", "4", "--prompt-tokens", "16", "--output-tokens", "8", "--warmup", "0",
        "--traceparent-sampling", "0.5", "--output", str(out), "--no-progress",
    ]  # fmt: skip
    assert main(argv) == 0
    records = json.loads((out / "results.json").read_text())["requests"]
    assert len(records) == REQUESTS
    sampled = {r["trace_id"]: r for r in records if r["trace_sampled"]}
    assert 0 < len(sampled) < REQUESTS  # both kinds (each a 1 in 65,536 chance to miss)
    spans = _spans_of(receiver, len(sampled))
    # Parent-based: the sampled traceparents' requests, each once; nothing else (the rendered
    # ratio 0 leaves every root span, vLLM's start-up ones included, unsampled).
    assert sorted(s["trace_id"] for s in spans) == sorted(sampled)
    assert {s["trace_id"] for s in receiver.received()} == set(sampled)
    for span in spans:
        record, attributes = sampled[span["trace_id"]], span["attributes"]
        assert attributes["gen_ai.usage.completion_tokens"] == record["output_tokens"]
        assert attributes["gen_ai.usage.prompt_tokens"] == record["prompt_tokens"]
        ttft = attributes["gen_ai.latency.time_to_first_token"]
        e2e = attributes["gen_ai.latency.e2e"]
        assert 0 < ttft <= record["ttft_s"] + CLIENT_SLACK_S
        assert ttft <= e2e <= record["e2e_s"] + CLIENT_SLACK_S
        assert attributes["gen_ai.latency.time_in_queue"] <= ttft
        resource = span["resource"]
        assert resource["service.name"] == f"{NAME}-decode"
        assert resource["kimi.deployment"] == NAME
        assert resource["kimi.role"] == "aggregated"
        assert resource["kimi.group"] == f"{NAME}-g0"
        assert resource["k8s.node.name"] == POD["spec.nodeName"]
