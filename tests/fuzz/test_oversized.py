"""Oversized and malicious documents are refused quickly, with one clear line.

BOUND_S is the most CPU time one input may take in-process, counted on this thread (what other
processes of a busy machine, pytest-xdist's other workers among them, do not add to; wall clock
did, past the bound). Measured alone: at most 0.7 s (100,000 engineArgs: 1.3 MB of YAML parsed,
then refused by the value count); `benchmarks/fuzz_inputs.py` reports the slowest of its random
inputs.
"""

import time
from typing import Any

import pytest
import yaml

from kimi_operator.api import constants as c
from kimi_operator.api.validation import UnreadableDocument, check_document
from tests.fuzz.harness import run_cli
from tests.fuzz.strategies import alias_bomb, deep, huge_value, many_engine_args
from tests.support.specs import base, edited

BOUND_S = 5.0

# (case, file text, exit code, what the one line says)
CASES: list[tuple[str, str, int, str]] = [
    ("4-mib-file", huge_value(4 * 1024 * 1024), 2, f"larger than {c.MAX_DOCUMENT_BYTES} bytes"),
    (
        "huge-string",
        huge_value(c.MAX_DOCUMENT_BYTES - 1000),
        1,
        "spec.image: must have at most 512",
    ),
    ("10k-engine-args", many_engine_args(10_000), 1, "at most 64 items, not 10000"),
    ("100k-engine-args", many_engine_args(100_000), 2, f"more than {c.MAX_VALUES} values"),
    ("billion-laughs", alias_bomb(9), 2, f"more than {c.MAX_VALUES} values"),
    ("alias-bomb-12", alias_bomb(12), 2, f"more than {c.MAX_VALUES} values"),
    ("deep-flow-5000", deep(5000, flow=True), 2, "exceeded maximum nesting depth"),
    ("deep-block-1500", deep(1500, flow=False), 2, "exceeded maximum nesting depth"),
    ("deep-40", deep(40, flow=True), 2, f"nested deeper than {c.MAX_DEPTH} levels"),
    ("101-documents", "---\n".join([yaml.safe_dump(base())] * 101), 2, "more than 100 YAML"),
    ("python-tag", "!!python/object/apply:os.system ['id']", 2, "not valid YAML"),
]


def _header(text: str) -> str:
    head = "apiVersion: kimi-operator.io/v1alpha1\nkind: KimiDeployment\nmetadata: {name: k3}\n"
    return text if text.startswith(("apiVersion", "spec:\n  gpus")) else head + text


@pytest.mark.parametrize(
    ("text", "code", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_refused_quickly_with_one_clear_line(text: str, code: int, says: str) -> None:
    data = _header(text).encode()
    start = time.thread_time()
    got, out, err = run_cli(["validate", "-"], data)
    seconds = time.thread_time() - start
    lines = (out + err).splitlines()
    assert got == code, lines[:3]
    assert len(lines) == 1, lines[:3]
    assert says in lines[0]
    assert "Traceback" not in out + err
    assert seconds < BOUND_S, f"{seconds:.2f} s"


def _nested(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    top = node
    for _ in range(levels):
        node["a"] = {}
        node = node["a"]
    return top


def test_validator_refuses_deep_and_shared_structures_without_recursing() -> None:
    """`check_document` (what the operator calls) on structures no YAML file could carry here."""
    deep_doc = edited({"spec.decode": _nested(50_000)})
    with pytest.raises(UnreadableDocument, match=r"spec\.decode(\.a)+: nested deeper than 32"):
        check_document(deep_doc)
    shared: list[Any] = ["lol"] * 10
    for _ in range(9):  # 10**10 values once expanded
        shared = [shared] * 10
    start = time.thread_time()
    with pytest.raises(UnreadableDocument, match="more than 100000 values"):
        check_document(edited({"spec.engineArgs": shared}))
    assert time.thread_time() - start < BOUND_S


@pytest.mark.parametrize("size", [1, 2, 80, 1000])
def test_the_oversized_builders_write_what_pyyaml_writes(size: int) -> None:
    """huge_value and many_engine_args widen one dumped line rather than dump megabytes: the
    text is PyYAML's own, at sizes it dumps quickly (at least one: none writes `''` or `[]`)."""
    doc = base()
    assert huge_value(size) == yaml.safe_dump(
        doc | {"spec": doc["spec"] | {"image": "x" * size}}, width=2**31, sort_keys=False
    )
    assert many_engine_args(size) == yaml.safe_dump(
        doc | {"spec": doc["spec"] | {"engineArgs": ["--seed"] * size}}
    )
