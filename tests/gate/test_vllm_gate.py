"""Differential test against vLLM 0.33.0's own code: what the serving pods run passes vLLM's gate.

For every corpus spec the project accepts: render it, take every `vllm serve` container (the
leader and each worker rank of a group, `$(LWS_...)` references resolved as Kubernetes would),
and in a process of vLLM's own (tests/gate/harness.py: a simulated SM 10.3 platform) parse the
arguments with its `serve` parser, build the engine config (`AsyncEngineArgs.from_cli_args` ->
`create_engine_config`, on small local stand-ins for the K3 checkpoint (tests/support/
k3_checkpoint.py: config, tokenizer, image processor settings) and the DSpark draft) and call its
gate, `specialized_decode_config`
(vllm/models/kimi_k3/nvidia/specialized_decode/runtime/__init__.py). Doctored renders show the
gate, and this test, can fail.
"""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.builders.routing import PICKER_BLOCK_TOKENS
from kimi_operator.builders.vllm_args import DRAFT_DIR, KV_EVENTS_PORT
from tests.support.corpus import CORPUS, prefill
from tests.support.k3_checkpoint import K3_TEXT, write_config, write_k3_checkpoint
from tests.support.pods import expand
from tests.support.specs import edited

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)

pytest.importorskip("vllm", reason="vLLM 0.33.0 is installed by `make setup`")

HARNESS = Path(__file__).with_name("harness.py")
Case = tuple[list[str], dict[str, str]]  # a container's arguments and environment
Batch = tuple[list[Case], list[Any]]  # a test's cases, and what it expects of them
Judged = dict[str, tuple[list[Any], list[dict[str, Any]]]]
LEADER_ADDRESS = "10.0.0.1"
POD_IP = "10.0.0.2"  # status.podIP: only the NIXL side channel's host reads it
DRAFT = {"architectures": ["DSparkDraftModel"], **K3_TEXT, "num_hidden_layers": 1}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("checkpoints")
    return write_k3_checkpoint(root / "k3"), write_config(root / "draft", DRAFT)


def _containers(doc: dict[str, Any]) -> list[tuple[list[str], dict[str, str]]]:
    """(args, env) of every `vllm serve` container of the first group of each role (a role's
    groups differ only in names), references resolved as Kubernetes would (the pod's IP from
    the downward API too); none with replicas 0."""
    report = check_document(doc)
    assert report.deployment is not None, [str(p) for p in report.problems]
    children = build_children(report.deployment, OperatorDefaults())
    first: dict[str, dict[str, Any]] = {}
    for child in children:
        if child["kind"] == "LeaderWorkerSet":
            first.setdefault(_role(child), child["spec"]["leaderWorkerTemplate"])
    out = []
    for template in first.values():
        ranks = [("leaderTemplate", 0)]
        if "workerTemplate" in template:
            ranks += [("workerTemplate", rank) for rank in range(1, template["size"])]
        for role, rank in ranks:
            (vllm,) = template[role]["spec"]["containers"]
            assert vllm["command"] == ["vllm", "serve"]
            refs = {"LWS_LEADER_ADDRESS": LEADER_ADDRESS, "LWS_WORKER_INDEX": str(rank)}
            args = [expand(a, refs) for a in vllm["args"]]
            env = {e["name"]: e.get("value", POD_IP) for e in vllm["env"]}
            out.append((args, env))
    return out


def _role(group: dict[str, Any]) -> str:
    labels = group["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"]
    return str(labels.get("llm-d.ai/role", "aggregated"))


def _kv_transfer(args: list[str]) -> dict[str, Any] | None:
    """What vLLM's KVTransferConfig must say of a container's rendered connector: NIXL with the
    role's producer or consumer side, failing a request whose KV does not load, DS layout."""
    if "--kv-transfer-config" not in args:
        return None
    role = json.loads(args[args.index("--kv-transfer-config") + 1])["kv_role"]
    return {
        "kv_connector": "NixlConnector",
        "kv_role": role,
        "is_kv_producer": role == "kv_producer",
        "is_kv_consumer": role == "kv_consumer",
        "kv_load_failure_policy": "fail",
        "conv_state_layout": "DS",
        "side_channel_port": 5600,
    }


def _local(args: list[str], checkpoints: tuple[str, str]) -> list[str]:
    """The weights (a mounted folder or a Hugging Face repo) as the local config folders."""
    k3, draft = checkpoints
    out = [k3, *args[1:]]
    if "--speculative-config" in out:
        i = out.index("--speculative-config") + 1
        speculative = json.loads(out[i])
        assert speculative["model"] in (DRAFT_DIR, "moonshotai/Kimi-K3")
        out[i] = json.dumps(speculative | {"model": draft})
    return out


def _outcomes(cases: list[Case]) -> list[dict[str, Any]]:
    """Per case, the harness's verdict and what vLLM's config code made of the KV settings."""
    payload = json.dumps([{"args": a, "env": e} for a, e in cases])
    done = subprocess.run(
        [sys.executable, str(HARNESS)], input=payload, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return outcomes


def _accepted(checkpoints: tuple[str, str]) -> Batch:
    """Every container of every accepted corpus spec (context: label and expected outcome each),
    then the doctored renders (context: label and what catches each)."""
    cases: list[Case] = []
    context: list[Any] = []
    for name, edits in ((name, edits) for name, edits, valid in CORPUS if valid):
        doc = edited(edits)
        backend = check_document(doc).deployment
        assert backend is not None
        for i, (args, env) in enumerate(_containers(doc)):
            cases.append((_local(args, checkpoints), env))
            gate = "pass" if backend.spec.decode.backend == "latency_specialized" else "stock"
            context.append(
                (f"{name}/container{i}", {"verdict": gate, "kv_transfer": _kv_transfer(args)})
            )
    doctored = _doctored(
        _local(_containers(edited(DSPARK))[0][0], checkpoints),
        _local(_containers(edited({}))[0][0], checkpoints),
    )
    cases += [(args, env) for _, args, env, _ in doctored]
    context += [(label, caught_by) for label, _, _, caught_by in doctored]
    return cases, context


def test_accepted_specs_pass_vllms_gate_and_doctored_renders_do_not(judged: Judged) -> None:
    context, outcomes = judged["accepted"]
    corpus = [(c, o) for c, o in zip(context, outcomes, strict=True) if isinstance(c[1], dict)]
    wrong = [
        (label, outcome)
        for (label, want), outcome in corpus
        if {key: outcome[key] for key in want} != want
    ]
    assert len(corpus) > 150
    assert sum(want["kv_transfer"] is not None for (_, want), _ in corpus) >= 10  # both roles
    assert wrong == []
    doctored = [(c, o) for c, o in zip(context, outcomes, strict=True) if isinstance(c[1], str)]
    assert len(doctored) > 5
    for (label, caught_by), outcome in doctored:
        assert caught_by in outcome["verdict"], (label, outcome)


DSPARK = {"spec.speculative": {"draftSource": {"pvc": {"claimName": "w", "subPath": "draft"}}}}
V2_ENV = {"VLLM_USE_V2_MODEL_RUNNER": "1", "NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "1"}


def _doctored(
    args: list[str], plain: list[str]
) -> list[tuple[str, list[str], dict[str, str], str]]:
    """(what, args, env, what vLLM's verdict says) for renders the operator never makes, from a
    leader with DSpark drafts (`args`) and one without (`plain`)."""

    def swap(flag: str, value: str) -> list[str]:
        i = args.index(flag) + 1
        return [*args[:i], value, *args[i + 1 :]]

    spec = json.loads(args[args.index("--speculative-config") + 1])
    gate = "refused: ValueError: Kimi K3 specialized decode does not support"
    return [
        ("as rendered", args, V2_ENV, "pass"),
        (
            "PIECEWISE graphs",
            swap("--compilation-config", '{"cudagraph_mode":"PIECEWISE"}'),
            V2_ENV,
            f"{gate} deployments without FULL decode CUDA graphs",
        ),
        ("V1 runner", plain, V2_ENV | {"VLLM_USE_V2_MODEL_RUNNER": "0"}, f"{gate} the V1 model"),
        (  # with drafts, vLLM's config code stops it before the gate
            "V1 runner, DSpark",
            args,
            V2_ENV | {"VLLM_USE_V2_MODEL_RUNNER": "0"},
            "Model Runner V1 does not support: dspark",
        ),
        (
            "9 draft tokens",
            swap("--speculative-config", json.dumps(spec | {"num_speculative_tokens": 9})),
            V2_ENV,
            f"{gate} more than 7 speculative tokens",
        ),
        # vLLM checks no KV cache dtype: its fast path's FP8 MLA rows are a fact the operator
        # adds (the kvCache.dtype rule refuses `auto` with latency_specialized).
        ("KV auto", swap("--kv-cache-dtype", "auto"), V2_ENV, "pass"),
        (  # vLLM's config code stops it: K3's attention heads are not divisible by 12
            "TP 12",
            swap("--tensor-parallel-size", "12"),
            V2_ENV,
            "Total number of attention heads (16) must be divisible by tensor parallel size (12)",
        ),
        ("no decode_backend", swap("--additional-config", "{}"), V2_ENV, "stock"),
        (  # vLLM's parser checks the connector's role against KVTransferConfig's
            "NIXL, unknown role",
            [*plain, "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"both"}'],
            V2_ENV,
            "kv_role |   Input should be 'kv_producer', 'kv_both' or 'kv_consumer'",
        ),
        (
            "NIXL, no role",  # KVTransferConfig.__post_init__
            [*plain, "--kv-transfer-config", '{"kv_connector":"NixlConnector"}'],
            V2_ENV,
            "Please specify kv_role when kv_connector is set",
        ),
    ]


OFFLOADED = [(name, edits) for name, edits, valid in CORPUS if valid and "cpuOffload" in str(edits)]
EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512,expandable_segments:True"}


def _tier_gib(edits: dict[str, Any]) -> int:
    """perGPU x gpus, read from the corpus edits (whole GiB, `NGi`)."""
    per_gpu = edits["spec.kvCache.cpuOffload"]["perGPU"]
    assert per_gpu.endswith("Gi")
    gpus: int = edits.get("spec.gpus", 16)
    return int(per_gpu[:-2]) * gpus


def _offloaded(checkpoints: tuple[str, str]) -> Batch:
    """Every container of the corpus specs with a CPU tier (context: name and tier GiB each),
    then its first leader with the expandable-segments allocator and with prefix caching off."""
    cases, context = [], []
    for name, edits in OFFLOADED:
        for args, env in _containers(edited(edits)):
            cases.append((_local(args, checkpoints), env))
            context.append((name, _tier_gib(edits)))
    leader, env = cases[0]
    no_prefix = [
        "--no-enable-prefix-caching" if a == "--enable-prefix-caching" else a for a in leader
    ]
    return [*cases, (leader, env | EXPANDABLE), (no_prefix, env)], context


def test_the_cpu_tier_is_vllms_native_offloading_connector_with_the_hybrid_manager_on(
    judged: Judged,
) -> None:
    """What vLLM's config code (config/vllm.py, `_post_init_kv_transfer_config`) builds from the
    rendered flags of every rank: the OffloadingConnector holding the whole group's tier, and the
    hybrid KV cache manager (K3's KDA state beside its MLA KV) left on, since that connector
    supports it. Doctored: the expandable-segments allocator is refused by vLLM, prefix caching off
    is not (the operator's rule: docs/rules.md)."""
    expected, outcomes = judged["offloaded"]
    assert len(expected) >= 20
    for (name, gib), outcome in zip(expected, outcomes, strict=False):
        assert outcome["verdict"] in ("pass", "stock"), (name, outcome)
        kv = outcome["kv"]
        assert kv["connector"] == {
            "name": "OffloadingConnector",
            "role": "kv_both",
            "extra": {"cpu_bytes_to_use": gib * 2**30},
        }, name
        assert kv["hybrid_manager_off"] is False, name
        assert kv["prefix_caching"] is True, name
    refused, unchecked = outcomes[len(expected) :]
    assert "OffloadingConnector is incompatible with PYTORCH_CUDA_ALLOC_CONF" in refused["verdict"]
    assert unchecked["verdict"] == "pass"
    assert unchecked["kv"]["prefix_caching"] is False


def _replaced(checkpoints: tuple[str, str]) -> Batch:
    """A prefill role's leader with the tier's flags added."""
    args, env = _containers(edited(prefill()))[0]
    connector = json.loads(args[args.index("--kv-transfer-config") + 1])["kv_connector"]
    tier = ["--kv-offloading-size", "64", "--kv-offloading-backend", "native"]
    return [(_local(args, checkpoints) + tier, env)], [connector]


def test_the_cpu_tier_would_replace_a_roles_nixl_connector(judged: Judged) -> None:
    """Why spec.prefill with kvCache.cpuOffload is refused (docs/rules.md): given a rendered role's
    NixlConnector and the tier's --kv-offloading-size, vLLM's config code keeps only the
    offloading connector, with role kv_both, and raises nothing."""
    [rendered], [outcome] = judged["replaced"]
    assert rendered == "NixlConnector"
    assert outcome["verdict"] in ("pass", "stock"), outcome
    assert outcome["kv_transfer"] is None
    assert outcome["kv"]["connector"]["name"] == "OffloadingConnector"
    assert outcome["kv"]["connector"]["role"] == "kv_both"


def _source(module: str) -> str:
    """A vLLM module's source, found without importing it (importing vLLM's submodules here would
    settle its platform for every later test of this process: tests/gate/harness.py's reason)."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.find_spec("vllm")  # a top-level package is found, not imported
    assert spec is not None
    assert spec.origin is not None
    parts = module.split(".")[1:]
    return Path(spec.origin).parent.joinpath(*parts[:-1], f"{parts[-1]}.py").read_text()


def _class_bases(source: str) -> dict[str, list[str]]:
    import ast  # noqa: PLC0415

    return {
        node.name: [ast.unparse(base) for base in node.bases]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
    }


def test_only_the_native_backend_serves_a_hybrid_model() -> None:
    """vLLM turns the hybrid KV cache manager off for a connector without SupportsHMA
    (config/vllm.py), and K3's KDA layers cannot run without it. The lmcache backend's connector,
    LMCacheMPConnector (config/vllm.py), is lmcache's own class when that package is installed
    (absent here) and else the wheel's LMCacheMPConnectorUpstream, read from its source: no
    SupportsHMA, and an error for more than one KV cache group."""
    connectors = "vllm.distributed.kv_transfer.kv_connector.v1"
    loaded = set(sys.modules)
    lmcache = _source(f"{connectors}.lmcache_mp_connector")
    # Read, not imported: an import here once broke a later test's vLLM ("Failed to infer
    # device type" in tests/kimi_operator/builders/test_agent_parsers.py).
    assert set(sys.modules) == loaded
    native = _class_bases(_source(f"{connectors}.offloading_connector"))["OffloadingConnector"]
    assert "SupportsHMA" in native
    assert "SupportsHMA" not in _class_bases(lmcache)["LMCacheMPConnectorUpstream"]
    assert "LMCacheMPConnector only works without hybrid kv cache manager" in lmcache


def _precise(checkpoints: tuple[str, str]) -> Batch:
    """Every container of the corpus specs with precise prefix scoring."""
    precise = [edited(edits) for _, edits, valid in CORPUS if valid and "Precise" in str(edits)]
    cases = [(_local(args, checkpoints), env) for doc in precise for args, env in _containers(doc)]
    return cases, [len(precise)]


def test_precise_scoring_publishes_kv_events_in_blocks_the_picker_can_hash(judged: Judged) -> None:
    """vLLM's config takes the rendered KV events config (ZMQ, the topic the picker's filter
    takes), and the picker's block size divides the block size vLLM's config code gives the cache
    (the simulated platform's; docs/kv-cache.md says what the GPU-side check adds)."""
    [specs], outcomes = judged["precise"]
    assert specs >= 2
    for outcome in outcomes:
        events = outcome["kv"]["events"]
        assert events["enabled"] is True
        assert events["publisher"] == "zmq"
        assert events["endpoint"] == f"tcp://*:{KV_EVENTS_PORT}"
        assert events["topic"] == "kv@leader@moonshotai/Kimi-K3"
        assert outcome["kv"]["block_size"] % PICKER_BLOCK_TOKENS == 0


# Each test's cases, judged in one process of vLLM's (importing vLLM costs tens of seconds of CPU:
# once, not once a test).
BATCHES = {
    "accepted": _accepted,
    "offloaded": _offloaded,
    "replaced": _replaced,
    "precise": _precise,
}


@pytest.fixture(scope="module")
def judged(checkpoints: tuple[str, str]) -> Judged:
    """By batch: its context (what its test expects) and the harness's outcome of each case."""
    batches = {name: build(checkpoints) for name, build in BATCHES.items()}
    outcomes = _outcomes([case for cases, _ in batches.values() for case in cases])
    out, start = {}, 0
    for name, (cases, context) in batches.items():
        out[name] = (context, outcomes[start : start + len(cases)])
        start += len(cases)
    assert start == len(outcomes)
    return out
