"""Our reading of engineArgs (api/vllm_parse.py, on the snapshot in api/vllm_flags.py) against
vLLM 0.33.0's real `vllm serve` parser: the same verdict on every corpus spec, on every option
with values of every kind, and the snapshot is what the wheel's parser says."""

import json
from pathlib import Path
from typing import Any

import pytest

from kimi_operator.api import vllm_flags, vllm_parse
from kimi_operator.api.validation import check_document
from tests.support.corpus import CORPUS, PARSER_ONLY
from tests.support.repo import load_script
from tests.support.specs import edited
from tests.support.vllm_cli import stops_at_start

MODEL = "/models/weights"  # the operator's first argument: vLLM's positional model
# vLLM prints its help and exits 0, or reads a file: both refused by the spec's rules anyway.
SKIPPED = {*vllm_flags.SERVE_OPTIONS["help"], *vllm_flags.SERVE_OPTIONS["config"]}
# Beyond the corpus: argparse's corners.
EXTRA: list[list[str]] = [
    ["--seed", "1", "--seed", "2"], ["--served-model-name=a", "b"], ["--api-key", "a", "b"],
    ["--api-key"], ["--max-num-batched-tokens", "1.5K"], ["--max-num-batched-tokens", "2k"],
    ["--hf-overrides.a.b", "1", "--hf-overrides.a.c=x"], ["--hf-overrides.a"], ["-asc2"],
    ["--chat-template", "-x y"], ["--chat-template", "--"], ["--"], ["-"], ["-1"], ["--seed=-1"],
    ["--enable-chunked-prefill=no"], ["--no-enable-chunked-prefill"], ["--hf-token"],
    ["--hf-token", "x"], ["--max-num-batched-tokens", " 8192 "], ["-q", "fp8", "x"],
    ["--trust_remote_code"], ["--dtype", "BFLOAT16"], ["--moe-backend", "Auto"],
]  # fmt: skip


def _corpus() -> list[list[str]]:
    lists = [edits.get("spec.engineArgs") for _, edits, _ in CORPUS] + [a for _, a in PARSER_ONLY]
    found = [a for a in lists if isinstance(a, list) and all(isinstance(x, str) for x in a)]
    return [a for a in found + EXTRA if not SKIPPED & {x.partition("=")[0] for x in a}]


@pytest.mark.parametrize("args", _corpus(), ids=lambda a: json.dumps(a)[:60])
def test_every_corpus_engine_args_gets_vllms_verdict(vllm_parser: Any, args: list[str]) -> None:
    vllm_refuses = stops_at_start(vllm_parser, [MODEL, *args])
    ours = vllm_parse.problems(args)
    assert bool(ours) == vllm_refuses, ours
    if vllm_refuses:  # and so the whole spec is refused
        assert check_document(edited({"spec.engineArgs": args})).problems


SAMPLES = ["abc", "1", "0", "-1", "1.5", "8k", "8K", "1.5K", "{}", '{"a": 1}', "[1]", "None", ""]
SAMPLES += ["auto", "AUTO", "Auto-X", "true"]


def _cases() -> list[tuple[str, str]]:
    cases = []
    for dest, takes in vllm_flags.SERVE_TAKES.items():
        # --config reads a file; --lora-modules' own action reads name=path pairs (and every LoRA
        # flag is refused by the spec's rules).
        if takes.nargs == "0" or dest in ("config", "lora_modules"):
            continue
        flag = vllm_flags.SERVE_OPTIONS[dest][0]
        values = SAMPLES + [str(c) for c in takes.choices or () if c is not None]
        if takes.kind == "config":  # a JSON object's fields are vLLM's dataclass's business
            values = [v for v in values if not v.startswith("{")]
        cases += [(flag, v) for v in values]
    return cases


def test_every_option_reads_values_as_vllm_does(vllm_parser: Any) -> None:
    mismatches = []
    for flag, value in _cases():
        vllm_refuses = stops_at_start(vllm_parser, [MODEL, flag, value])
        ours = vllm_parse.problems([flag, value])
        if bool(ours) != vllm_refuses:
            mismatches.append((flag, value, ours))
    assert mismatches == []


@pytest.mark.usefixtures("vllm_parser")  # vLLM importable
def test_the_committed_snapshot_is_the_wheels() -> None:
    module = load_script(Path("scripts/snapshot_vllm_flags.py"))
    generated: dict[str, Any] = {}
    exec(module.render(), generated)
    assert generated["VLLM_VERSION"] == vllm_flags.VLLM_VERSION
    assert generated["SERVE_OPTIONS"] == vllm_flags.SERVE_OPTIONS
    assert {d: tuple(t) for d, t in generated["SERVE_TAKES"].items()} == {
        d: tuple(t) for d, t in vllm_flags.SERVE_TAKES.items()
    }


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--max-num-batch-tokens", "8192"], "did you mean --max-num-batched-tokens?"),
        # The closest option is one the spec owns: the field to set, not the option.
        (["--tp=8"], "the closest option, -tp, may not be set here: the tensor-parallel size is "),
        (
            ["--tensor-paralel-size=4"],
            "--tensor-paralel-size=4: the closest option, --tensor-parallel-size, may not be set "
            "here: the tensor-parallel size is spec.gpus",
        ),
        (["--max-num-batched-tokens", "abc"], "--max-num-batched-tokens abc: not a valid integer"),
        (["--dtype", "bf16"], "--dtype bf16: not one of the allowed values (auto, bfloat16"),
        (["--port 9000"], "one flag or value per list item"),
    ],
)
def test_messages_say_what_to_write(args: list[str], said: str) -> None:
    problems = [str(p) for p in check_document(edited({"spec.engineArgs": args})).problems]
    assert len(problems) == 1, problems
    assert said in problems[0]
    assert "did you mean -tp" not in problems[0]
    assert "did you mean --tensor-parallel-size" not in problems[0]
    assert "(options --" not in problems[0]  # the CEL rules' split by first letter is internal
