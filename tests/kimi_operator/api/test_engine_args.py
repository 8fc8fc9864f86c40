"""The engineArgs deny-list: every spelling vLLM accepts is refused, nothing else is.

The last two tests hold the deny-list and the builders against vLLM 0.33.0's real `serve` parser
(the wheel is installed by `make setup`); the rest runs on the committed snapshot of its options.
"""

import argparse
from typing import Any

import celpy
import pytest
from celpy.adapter import json_to_cel
from celpy.celtypes import ListType

from kimi_operator.api.engine_args import (
    ENGINE_ARG_REFUSALS,
    FORBIDDEN_FLAG_GROUPS,
    MALFORMED_ARGS,
    SPACED_ARGS,
)
from kimi_operator.api.rules import RULES
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.api.vllm_flags import SERVE_FLAGS, SERVE_OPTIONS
from kimi_operator.builders.vllm_args import leader_args, worker_args
from kimi_operator.embedded import cel  # noqa: F401
from tests.support.engine_args import refused_engine_args
from tests.support.specs import edited
from tests.support.vllm_cli import FORBIDDEN_DESTS
from tests.support.vllm_cli import parse as _parse

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)

REFUSED = [
    "--tensor-parallel-size", "--tensor-parallel-size=8", "--tensor_parallel_size", "-tp", "-tp=8",
    "--tensor-parallel", "-t", "--pipeline-parallel-size=2", "-pp", "--data-parallel-size-local",
    "-dpl", "--enable-expert-parallel", "--enable-exp", "-ep", "-e", "-dcp",
    "--enable-lora", "--enable_lora", "--enable-lor", "--lora-modules", "--max-loras=2",
    "--fully-sharded-loras", "--my-new-lora-flag", "--enable-dbo", "--enable-sleep-mode",
    "--enforce-eager", "--enforce_eager", "--kv-cache-dtype=auto", "--mamba-ssm-cache-dtype",
    "--speculative-config", "-sc", "-s", "--speculative-config.num_speculative_tokens=3",
    "--additional-config={}", "--compilation-config.cudagraph_mode", "-cc.mode=0", "-cc", "-c",
    "-O3", "-O", "-Odecode", "-O=0", "--optimization-level", "--nnodes", "-n", "--node-rank=1",
    "-r", "--master-addr", "--master-port", "--headless", "--distributed-executor-backend=ray",
    "--max-num-seqs", "--max-model-len=8", "--gpu-memory-utilization",
    "--device-memory-utilization",
    "--enable-prefix-caching", "--disable-prefix-caching", "--model", "--served-model-name",
    "--revision", "--config", "--config=/x.yaml", "--port", "--host=0.0.0.0", "-n2", "-r1",
    "--tool-call-parser", "--tool-call-parser=kimi_k2", "--enable-auto-tool-choice",
    "--disable-auto-tool-choice", "--enable-auto-tool", "--reasoning-parser",
    "--reasoning_parser=kimi_k3", "--language-model-only", "--no-language-model-only",
]  # fmt: skip
# Disguised flags and hidden characters: refused by MALFORMED_ARGS, whatever flag they hide.
DISGUISED = [
    "\u2010\u2010enable-lora", "\u2212tp", "\ufe63\ufe63enforce-eager", "\uff0d\uff0dheadless",
    "--enable\u2011lora", "--\uff45nable-lora", "--enable-lora\u00a0", "\u00a0--enable-lora",
    " --enable-lora", "\t-tp", "--enable-lora\x00", "--seed\u200b", "\u202e--seed",
    "--seed\n--enable-lora", "--seed;--enable-lora",
    "--seed$(--enable-lora)", "'--enable-lora'", '"--enable-lora"', "\ufeff-O3", "x\x1b[2J",
]  # fmt: skip
# Text that only looks odd: values, not option names.
PLAIN_VALUES = [
    "-1", "-0.5", "{{ messages }}\n{% for m in messages %}", "--chat-template=Ω {{ x }}",
    '{"stop": [";", "$(x)"]}', "--seed=1", "a b", "-qfp8", "",
]  # fmt: skip
ALLOWED = [
    "--trust-remote-code", "--max-num-batched-tokens", "--max-num-batched-tokens=8192", "8",
    "--kv-cache-dtype-skip-layers", "--model-impl", "kimi_k2", "--tool-parser-plugin",
    "--reasoning-parser-plugin", "--chat-template", "--block-size", "--limit-mm-per-prompt",
    "--enable-chunked-prefill", "--disable-log-requests", "--uvicorn-log-level=info",
    "--override-generation-config", '{"temperature": 0.6}', "-q", "--quantization",
    "--api-key", "--seed=0", "--tokenizer-mode", "--e", "--max-l", "-d", "-p",
]  # fmt: skip


@pytest.mark.parametrize("arg", REFUSED)
def test_refused(arg: str) -> None:
    assert refused_engine_args([arg]), arg


@pytest.mark.parametrize("arg", ALLOWED + PLAIN_VALUES)
def test_allowed(arg: str) -> None:
    assert refused_engine_args([arg]) == []


@pytest.mark.parametrize(
    ("arg", "field"),
    [
        ("--tool-call-parser=hermes", "toolCalling"),
        ("--no-enable-auto-tool-choice", "toolCalling"),
        ("--reasoning-parser", "reasoning"),
        ("--no-language-model-only", "multimodal"),
    ],
)
def test_agent_endpoint_flags_are_refused_naming_the_serving_field(arg: str, field: str) -> None:
    ((_, group),) = refused_engine_args([arg])
    assert "spec.serving" in group.reason, group.reason
    assert f"{field} (" in group.reason, group.reason


@pytest.mark.parametrize("arg", DISGUISED)
def test_disguised_flags_and_hidden_characters_are_refused(arg: str) -> None:
    assert MALFORMED_ARGS in [group for _, group in refused_engine_args([arg])], arg


@pytest.mark.parametrize("arg", ["--port 9000", "--trust-remote-code --enable-lora", "-tp 8"])
def test_an_option_and_its_value_in_one_item_is_told_apart(arg: str) -> None:
    assert SPACED_ARGS in [group for _, group in refused_engine_args([arg])]


def test_every_group_refuses_all_its_spellings_and_names_one_reason() -> None:
    for group in FORBIDDEN_FLAG_GROUPS:
        assert group.flags
        assert all(refused_engine_args([f]) == [(f, group)] for f in group.flags), group.label


CEL = celpy.Environment()  # with embedded.cel's string literals expanded once (imported above)


@pytest.mark.parametrize(
    "rule", [r for r in RULES if r.scope == ("engineArgs",) and r.cel], ids=lambda r: r.problem[:40]
)
def test_cel_rule_gives_the_python_verdict(rule: Any) -> None:
    """The CRD's rule text itself (escaping of the pattern into a CEL string included)."""
    program = CEL.program(CEL.compile(rule.cel))
    for arg in REFUSED + ALLOWED + DISGUISED + PLAIN_VALUES:
        assert bool(program.evaluate({"self": json_to_cel([arg])})) == rule.check([arg]), arg


@pytest.mark.parametrize("group", ENGINE_ARG_REFUSALS, ids=lambda g: g.label)
def test_cel_matches_gives_the_python_verdict(group: Any) -> None:
    program = CEL.program(CEL.compile("self.map(a, a.matches(p))"))
    args = REFUSED + ALLOWED + DISGUISED + PLAIN_VALUES
    verdicts = program.evaluate({"self": json_to_cel(args), "p": json_to_cel(group.pattern)})
    assert isinstance(verdicts, ListType)
    assert [bool(v) for v in verdicts] == [bool(group.regex.search(a)) for a in args]


@pytest.mark.parametrize("sample", ["minimal", "dspark-hf-dcp-tp8"])
def test_builders_emit_only_flags_vllm_knows(sample: str) -> None:
    kd = _deployment(sample)
    for args in (leader_args(kd.spec), worker_args(kd.spec)):
        flags = [a.split("=")[0] for a in args if a.startswith("-")]
        assert set(flags) <= SERVE_FLAGS, set(flags) - SERVE_FLAGS


def _deployment(sample: str) -> KimiDeployment:
    edits: dict[str, Any] = {}
    if sample == "dspark-hf-dcp-tp8":
        edits = {
            "spec.gpus": 8,
            "spec.model.source": {"huggingface": {"repo": "moonshotai/Kimi-K3", "revision": "r1"}},
            "spec.speculative": {
                "draftSource": {"pvc": {"claimName": "w"}},
                "numSpeculativeTokens": 3,
            },
            "spec.decode": {"contextParallelSize": 8, "cudaGraphMode": "FULL"},
            "spec.kvCache": {"enablePrefixCaching": False, "maxModelLen": 65536,
                             "mambaCacheDtype": "bfloat16", "mambaSsmCacheDtype": "float32"},
            "spec.engineArgs": ["--trust-remote-code"],
        }  # fmt: skip
    return KimiDeployment.model_validate(edited(edits))


# --- against vLLM 0.33.0's real parser (the vllm_parser fixture: tests/support/vllm_cli.py) ---


class _Crashes(argparse.Action):
    def __call__(self, *_: Any, **__: Any) -> None:
        raise IndexError("list index out of range")


def test_only_the_usage_error_counts_as_vllms_refusal() -> None:
    """A parser that crashes has refused nothing (the case must not be skipped); argparse's usage
    error (exit status 2) is a refusal."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--crash", action=_Crashes, nargs=0)
    parser.add_argument("--number", type=int)
    assert _parse(parser, ["--number", "2"]) == {"crash": None, "number": 2}
    assert _parse(parser, ["--number", "two"]) is None
    with pytest.raises(IndexError):
        _parse(parser, ["--crash"])
    with pytest.raises(SystemExit):
        _parse(parser, ["--help"])  # exits 0: no refusal either


def test_snapshot_is_the_real_parser(vllm_parser: Any) -> None:
    real: dict[str, set[str]] = {}
    for flag, action in vllm_parser._option_string_actions.items():
        real.setdefault(action.dest, set()).add(flag)
    assert {d: tuple(sorted(f)) for d, f in real.items()} == SERVE_OPTIONS


def test_no_spelling_or_prefix_reaches_a_forbidden_setting(vllm_parser: Any) -> None:
    """Each vLLM option and each of its prefixes: if vLLM sets a forbidden setting, we refuse."""
    defaults = _parse(vllm_parser, ["m"])
    assert defaults is not None
    forbidden = FORBIDDEN_DESTS
    bypasses, false_refusals = [], []
    for action in vllm_parser._actions:
        value = (
            []
            if action.nargs == 0
            else [str(next(iter(action.choices), "2")) if action.choices else "2"]
        )
        for option in action.option_strings:
            shortest = 3 if option.startswith("--") else 2
            for end in range(shortest, len(option) + 1):
                token = option[:end]
                # `-n2`: argparse attaches a value to a single-dash option.
                attached = [[token + value[0]]] if value and not option.startswith("--") else []
                for argv in [[token, *value], *attached]:
                    try:
                        parsed = _parse(vllm_parser, ["m", *argv])
                    except (Exception, SystemExit):
                        # vLLM stops otherwise than with its usage error (`--help` exits 0, a
                        # `--config` file it cannot read raises): some other value may get
                        # through, so only our own refusal makes it safe.
                        if not refused_engine_args(argv[:1]):
                            bypasses.append(argv[0])
                        continue
                    if parsed is None:
                        continue  # vLLM itself refuses (ambiguous or invalid): no way around
                    changed = {k for k, v in parsed.items() if v != defaults.get(k)}
                    if changed & forbidden and not refused_engine_args(argv[:1]):
                        bypasses.append(argv[0])
                refused = bool(refused_engine_args([token]))
                if token == option and refused and action.dest not in forbidden:
                    false_refusals.append(token)
    assert bypasses == []
    assert false_refusals == []


@pytest.mark.parametrize("sample", ["minimal", "dspark-hf-dcp-tp8"])
def test_vllm_parses_the_built_command_lines(vllm_parser: Any, sample: str) -> None:
    spec = _deployment(sample).spec
    address = "10.0.0.1"
    for role, args in (("leader", leader_args(spec)), ("worker", worker_args(spec))):
        concrete = [
            a.replace("$(LWS_LEADER_ADDRESS)", address).replace("$(LWS_WORKER_INDEX)", "1")
            for a in args
        ]
        parsed = _parse(vllm_parser, concrete)
        assert parsed is not None, (role, concrete)
        assert parsed["tensor_parallel_size"] == spec.gpus
        assert parsed["decode_context_parallel_size"] == spec.decode.context_parallel_size
        assert parsed["max_num_seqs"] == spec.decode.max_num_seqs
        assert parsed["kv_cache_dtype"] == spec.kv_cache.dtype
        assert parsed["enable_prefix_caching"] is spec.kv_cache.enable_prefix_caching
        assert parsed["gpu_memory_utilization"] == pytest.approx(0.9)
        assert parsed["additional_config"] == {"decode_backend": spec.decode.backend}
        assert parsed["headless"] is (role == "worker")
        if spec.nodes_per_group > 1:
            assert (parsed["nnodes"], parsed["master_addr"]) == (spec.nodes_per_group, address)
            assert parsed["node_rank"] == (0 if role == "leader" else 1)
        if spec.speculative:
            assert parsed["speculative_config"]["method"] == "dspark"
            assert parsed["speculative_config"]["num_speculative_tokens"] == 3
