"""Hypothesis strategies for hostile input: random specs, random YAML, oversized documents and
engineArgs that try to smuggle refused flags past the deny-list.

`tests/fuzz/` and `benchmarks/fuzz_inputs.py` draw from the same strategies.
"""

import copy
from collections.abc import Callable
from typing import Any

import yaml
from hypothesis import strategies as st

from kimi_operator.api import constants as c
from kimi_operator.api.crd import spec_schema
from kimi_operator.api.engine_args import FORBIDDEN_FLAG_GROUPS
from tests.support.specs import base

Path = tuple[str | int, ...]

# Characters that look like an ASCII hyphen or space, or are invisible (format characters).
LOOK_ALIKE_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2212\ufe63\uff0d\u00ad\u02d7\u2043"
INVISIBLE = "\u00a0\u200b\u200c\u200d\u2060\ufeff\u202e\u2028\u3000"
SHELL_TEXT = [
    "; rm -rf /", "$(id)", "`id`", "&& curl evil", "| sh", "> /etc/passwd", "$HF_TOKEN",
    "$(HF_TOKEN)", "'", '"', "\\", "\n--enable-lora", "*", "~root", "{a,b}",
]  # fmt: skip
FORBIDDEN = sorted({flag for group in FORBIDDEN_FLAG_GROUPS for flag in group.flags})
ALLOWED_FLAGS = ["--trust-remote-code", "--max-num-batched-tokens=8192", "--seed", "0", "-q"]

TEXT = st.one_of(
    st.text(max_size=20),
    st.sampled_from(SHELL_TEXT),
    st.text(alphabet=LOOK_ALIKE_DASHES + INVISIBLE + "-=ab \t\x00\x1b", max_size=12),
)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), TEXT, st.sampled_from([8, 16, 4, "16"])
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def _paths(node: dict[str, Any], path: Path = ()) -> list[Path]:
    """Every field path of the spec schema, list items as index 0."""
    found = [path]
    for name, prop in node.get("properties", {}).items():
        found += _paths(prop, (*path, name))
    if "items" in node:
        found += _paths(node["items"], (*path, 0))
    return found


SPEC_PATHS = _paths(spec_schema())


def set_path(doc: Any, path: Path, value: Any) -> Any:
    """`doc` with `value` at `path`, creating mappings and lists on the way (a copy)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        items = list(doc) if isinstance(doc, list) else []
        items = items or [{}]
        items[0] = set_path(items[0], rest, value)
        return items
    out = dict(doc) if isinstance(doc, dict) else {}
    out[head] = set_path(out.get(head), rest, value)
    return out


@st.composite
def smuggled_flags(draw: st.DrawFn) -> str:
    """A refused flag disguised: look-alike dashes, invisible characters, quotes, attached values,
    shell syntax, case changes."""
    flag = draw(st.sampled_from(FORBIDDEN))
    value = draw(st.sampled_from(["", "=1", "=8", "2", " 8", "={}"]))
    disguise = draw(
        st.sampled_from(
            [
                lambda f: f,
                lambda f: f.replace("-", draw(st.sampled_from(LOOK_ALIKE_DASHES)), 1),
                lambda f: f + draw(st.sampled_from(INVISIBLE)),
                lambda f: draw(st.sampled_from(INVISIBLE)) + f,
                lambda f: f"'{f}'",
                lambda f: f'"{f}"',
                lambda f: f"--trust-remote-code {f}",
                lambda f: f"$({f})",
                lambda f: f"; {f}",
                lambda f: f.upper(),
                lambda f: f.replace("-", "\uff0d"),
            ]
        )
    )
    out: str = disguise(flag) + value
    return out


ENGINE_ARGS = st.lists(
    st.one_of(st.sampled_from(FORBIDDEN + ALLOWED_FLAGS), smuggled_flags(), TEXT), max_size=6
)


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid spec with one to four random edits: a field of the schema set to a random value,
    hostile engineArgs, or an unknown field."""
    spec: Any = copy.deepcopy(base()["spec"])
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["field", "field", "engineArgs", "env", "unknown"]))
        if kind == "field":
            spec = set_path(spec, draw(st.sampled_from(SPEC_PATHS)), draw(JSON))
        elif kind == "engineArgs":
            spec = set_path(spec, ("engineArgs",), draw(ENGINE_ARGS))
        elif kind == "env":
            name = draw(st.sampled_from(["A", "NCCL_DEBUG", "VLLM_USE_V2_MODEL_RUNNER"]) | TEXT)
            spec = set_path(spec, ("env",), [{"name": name, "value": draw(TEXT)}])
        else:
            spec = set_path(spec, (draw(TEXT),), draw(JSON))
    return spec  # type: ignore[no-any-return]


@st.composite
def documents(draw: st.DrawFn) -> Any:
    """Mostly KimiDeployments with random specs; sometimes random top-level values."""
    kind = draw(st.sampled_from(["spec", "spec", "spec", "header", "metadata", "random"]))
    doc: dict[str, Any] = base()
    if kind == "random":
        return draw(JSON)
    doc["spec"] = draw(specs())
    if kind == "header":
        doc[draw(st.sampled_from(["apiVersion", "kind"]))] = draw(JSON)
    elif kind == "metadata":
        doc["metadata"] = draw(JSON)
    return doc


def alias_bomb(levels: int, width: int = 9) -> str:
    """A "billion laughs": `width ** levels` values once aliases are expanded, in a few hundred
    bytes."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    header = "apiVersion: kimi-operator.io/v1alpha1\nkind: KimiDeployment\nmetadata: {name: k3}\n"
    return header + "spec:\n  gpus: 16\n  bomb:\n" + "".join(f"    {line}\n" for line in lines)


def deep(levels: int, flow: bool) -> str:
    if flow:
        return "spec: " + "[" * levels + "]" * levels + "\n"
    return "spec:\n" + "".join("  " * (i + 1) + "a:\n" for i in range(levels)) + "  " * levels + "b"


def huge_value(size: int) -> str:
    """The base spec with an image of `size` (>= 1) x's, as `yaml.safe_dump(..., width=2**31,
    sort_keys=False)` writes it: dumped with one x, then the line widened (PyYAML's emitter scans
    each character in Python: seconds for megabytes, at every test collection)."""
    text = yaml.safe_dump(set_path(base(), ("spec", "image"), "x"), width=2**31, sort_keys=False)
    return _repeat_line(text, "image: x", lambda line: line.replace("x", "x" * size))


def many_engine_args(count: int) -> str:
    """The base spec with `count` (>= 1) engineArgs `--seed`, as `yaml.safe_dump` writes it:
    dumped with one, then its line repeated (the emitter would take seconds for 100,000)."""
    text = yaml.safe_dump(set_path(base(), ("spec", "engineArgs"), ["--seed"]))
    return _repeat_line(text, "- --seed", lambda line: line * count)


def _repeat_line(text: str, stripped: str, grow: Callable[[str], str]) -> str:
    (line,) = [line for line in text.splitlines(keepends=True) if line.strip() == stripped]
    return text.replace(line, grow(line), 1)


OVERSIZED = st.one_of(
    st.integers(2, 12).map(alias_bomb),
    st.builds(deep, st.integers(30, 5000), st.booleans()),
    st.sampled_from([1000, 100_000, c.MAX_DOCUMENT_BYTES + 1, 4 * 1024 * 1024]).map(huge_value),
    st.sampled_from([65, 10_000, 100_000]).map(many_engine_args),
    st.integers(2, 300).map(lambda n: "---\n".join([yaml.safe_dump(base())] * n)),
)
TRICKY_YAML = st.sampled_from(
    [
        "!!python/object/apply:os.system ['echo pwned']",
        "spec: !!binary aGVsbG8=",
        "a: &a {b: 1}\nc: {<<: *a}",
        "{[1, 2]: 3}",
        "a: 1\na: 2",
        "spec: {gpus: 2001-12-14}",
        "\ufeffapiVersion: v1",
        "apiVersion: kimi-operator.io/v1alpha1\nkind: KimiDeployment\n\tspec: {}",
        "%YAML 9.9\n---\na: 1",
        "*undefined",
        "",
        "---\n---\n",
        "a: !!set {b, c}",
        "apiVersion: kimi-operator.io/v1alpha1\nkind: KimiDeployment\nmetadata: {name: k3}\n"
        "spec: {1: a, null: b, true: c, 1.5: d, 2001-12-14: e}",
    ]
)


def _mangle(text: str, cut: int, insert: str) -> str:
    cut = cut % (len(text) + 1)
    return text[:cut] + insert + text[cut:]


YAML_TEXTS = st.one_of(
    documents().map(lambda d: yaml.safe_dump(d, allow_unicode=True)),
    documents()
    .map(lambda d: yaml.safe_dump(d, allow_unicode=True))
    .flatmap(lambda t: st.builds(_mangle, st.just(t), st.integers(0, 10**6), TEXT)),
    TRICKY_YAML,
    OVERSIZED,
    st.text(max_size=200),
)
# Bytes as a file holds them: UTF-8 of the texts above, or anything at all.
YAML_BYTES = st.one_of(YAML_TEXTS.map(lambda t: t.encode("utf-8", "surrogatepass")), st.binary())
# What one fuzz case feeds: a file to the CLI, or a parsed document to the validator.
INPUTS = st.one_of(
    YAML_BYTES.map(lambda b: ("cli", b)),
    documents().map(lambda d: ("value", d)),
)
