"""Check a KimiDeployment document and report every problem, each naming the field the user wrote.

`check_document` is what `kimi-operator validate` and the operator's controller call. pydantic stops
running cross-field rules once a field is invalid; to still report *every* problem, the rules whose
inputs are all valid are then run on the defaulted raw document.
"""

import copy
import difflib
import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from kimi_operator.api.constants import API_VERSION, KIND, MAX_DEPTH, MAX_VALUES
from kimi_operator.api.defaulting import apply_defaults, drop_nulls
from kimi_operator.api.problem import Problem, show
from kimi_operator.api.rule import Rule, Violation
from kimi_operator.api.rules import RULES, failed_rules, spec_warnings
from kimi_operator.api.spec import KimiDeployment

Loc = tuple[str | int, ...]


class UnreadableDocument(ValueError):
    """Not a KimiDeployment at all: not a mapping, another apiVersion/kind, or over the size
    bounds (nesting, number of values)."""


@dataclass(frozen=True)
class Report:
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    deployment: KimiDeployment | None = None


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_]+")


def path_of(loc: Loc) -> str:
    """`spec.env[0].name`; a key that is no identifier is quoted, escapes visible: `spec["a\\nb"]`
    (a hostile key cannot break the output line or hide behind invisible characters)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(str(part)):
            out += f"[{json.dumps(str(part))}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def check_document(doc: Any) -> Report:
    if not isinstance(doc, dict):
        raise UnreadableDocument(f"expected a mapping, got {type(doc).__name__}")
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if api_version != API_VERSION or kind != KIND:
        raise UnreadableDocument(
            f"not a {KIND}: apiVersion {show(api_version)}, kind {show(kind)} "
            f"(expected apiVersion {API_VERSION}, kind {KIND})"
        )
    _check_shape(doc)
    data = drop_nulls(doc)
    try:
        deployment = KimiDeployment.model_validate(data)
    except ValidationError as error:
        return Report(problems=_problems(error.errors(include_url=False), data.get("spec")))
    spec = deployment.spec.model_dump(exclude_none=True)
    return Report(warnings=spec_warnings(spec), deployment=deployment)


def _check_shape(doc: dict[str, Any]) -> None:
    """Refuse documents nested deeper than MAX_DEPTH or holding more than MAX_VALUES values.

    Iterative and stopping at the first excess, so it is cheap on anything: validation, defaulting
    and error messages recurse, and a YAML alias bomb (shared sub-lists, expanded billions of times
    by any walk) would otherwise run for hours.
    """
    stack: list[tuple[Loc, Any]] = [((), doc)]
    seen = 0
    while stack:
        loc, value = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise UnreadableDocument(
                f"more than {MAX_VALUES} values (mapping entries, list items and scalars, "
                "YAML aliases expanded); a KimiDeployment has a few hundred"
            )
        if len(loc) > MAX_DEPTH:
            raise UnreadableDocument(
                f"{path_of(loc[: MAX_DEPTH + 1])}: nested deeper than {MAX_DEPTH} levels "
                "(a KimiDeployment's spec has at most 6)"
            )
        if isinstance(value, dict):
            stack += [((*loc, str(k)), v) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [((*loc, i), v) for i, v in enumerate(value)]


def _problems(errors: Sequence[ErrorDetails], raw_spec: Any) -> list[Problem]:
    problems: list[Problem] = []
    field_errors: list[Loc] = []
    rules_ran = False
    for error in errors:
        if error["type"] == "kimi_rules":
            rules_ran = True
            problems += [_rule_problem(v) for v in error["ctx"]["violations"]]
        else:
            field_errors.append(error["loc"])
            problems.append(_field_problem(error))
    if not rules_ran and isinstance(raw_spec, Mapping):
        problems += [_rule_problem(v) for v in _rules_on_valid_parts(raw_spec, field_errors)]
    return problems


def _rule_problem(violation: Violation) -> Problem:
    rule = violation.rule
    what = rule.problem + (rule.hint(violation.got) if rule.hint else "")
    return Problem.in_field(rule.path, what, rule.allowed, got=violation.got)


def _rules_on_valid_parts(
    raw_spec: Mapping[str, Any], field_errors: Iterable[Loc]
) -> list[Violation]:
    """Rules whose inputs have no field error, run on the spec defaulted as the API server does.

    A rule over a whole list (engineArgs, env) runs on the items that have no error of their own.
    """
    from kimi_operator.api.crd import schema_at  # noqa: PLC0415 (only on the error path)

    bad = [loc[1:] for loc in field_errors if loc[:1] == ("spec",)]
    spec = apply_defaults(schema_at(("spec",)) or {}, raw_spec)
    violations = []
    for rule in RULES:
        candidates: list[Mapping[str, Any]] = [spec]
        if rule.reads == ((),) and isinstance(_get(spec, rule.scope), list):
            cut = _without_bad_items(spec, rule.scope, bad)
            candidates = [cut] if cut is not None else []
        elif any(_overlaps(loc, rule.scope + read) for loc in bad for read in rule.reads):
            candidates = _with_each_allowed_value(spec, rule, bad)
        try:
            found = [failed_rules(candidate, [rule]) for candidate in candidates]
        except (KeyError, TypeError, AttributeError):  # an input shape the field errors cover
            continue
        if found and all(found):  # broken whatever the unreadable fields hold
            violations += found[0]
    return violations


def _with_each_allowed_value(
    spec: Mapping[str, Any], rule: Rule, bad: Sequence[Loc]
) -> list[Mapping[str, Any]]:
    """The spec with each combination of allowed values in the rule's unreadable inputs, when
    each is an enum field (`gpus: "16"`); [] when some input cannot be stood in for."""
    from kimi_operator.api.crd import schema_at  # noqa: PLC0415 (only on the error path)

    reads = [rule.scope + read for read in rule.reads]
    wrong = [loc for loc in bad if any(_overlaps(loc, read) for read in reads)]
    enums = [(schema_at(("spec", *loc)) or {}).get("enum") for loc in wrong]
    if not all(enums) or any(loc not in reads for loc in wrong):
        return []
    out: list[Mapping[str, Any]] = []
    for values in itertools.product(*(e for e in enums if e)):
        candidate = copy.deepcopy(dict(spec))
        for loc, value in zip(wrong, values, strict=True):
            *parents, last = loc
            node = _get(candidate, tuple(str(p) for p in parents))
            node[last] = value
        out.append(candidate)
    return out


def _get(spec: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = spec
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _without_bad_items(
    spec: Mapping[str, Any], scope: tuple[str, ...], bad: Iterable[Loc]
) -> dict[str, Any] | None:
    """The spec with the list at `scope` (one level below spec) cut to its items without field
    errors; None when the list itself is wrong (too long)."""
    n = len(scope)
    if any(loc == scope for loc in bad) or n != 1:
        return None
    wrong = {loc[n] for loc in bad if loc[:n] == scope and len(loc) > n}
    items = [item for i, item in enumerate(spec[scope[0]]) if i not in wrong]
    return {**spec, scope[0]: items}


def _overlaps(a: Loc, b: Loc) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _field_problem(error: ErrorDetails) -> Problem:
    from kimi_operator.api.crd import schema_at  # noqa: PLC0415 (only on the error path)

    loc = error["loc"]
    node = schema_at(loc)
    kind = error["type"]
    if kind == "missing":
        return Problem.in_field(path_of(loc), "is required", describe(node), missing=True)
    if kind == "extra_forbidden":
        fields = list((schema_at(loc[:-1]) or {}).get("properties", {}))
        close = difflib.get_close_matches(str(loc[-1]), fields, n=1, cutoff=0.6)
        what = "is not a field here" + (f"; did you mean {close[0]}?" if close else "")
        return Problem.in_field(path_of(loc), what, ", ".join(fields), got=error["input"])
    if kind.endswith("_type"):
        expected = _TYPE_NAMES.get((node or {}).get("type", "object"), "another type")
        what = f"must be {expected}, not {_json_type(error['input'])}"
        return Problem.in_field(path_of(loc), what, describe(node), got=error["input"])
    if kind == "literal_error":
        return Problem.in_field(
            path_of(loc), "is not one of the allowed values", describe(node), got=error["input"]
        )
    what = _SHOULD.sub("must", error["msg"]).replace(" after validation", "")
    return Problem.in_field(path_of(loc), what, describe(node), got=error["input"])


# pydantic's "Input should ...", "String should ...", "List should ...", "Dictionary should ...".
_SHOULD = re.compile(r"^\w+ should")

_TYPE_NAMES = {
    "integer": "an integer",
    "string": "a string",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
}


def _json_type(value: Any) -> str:
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string")):
        if isinstance(value, kind):
            return f"a {name}" if kind is not int else "an integer"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def describe(node: Mapping[str, Any] | None) -> str:
    """What a schema node accepts, in words."""
    if not node:
        return "nothing (unknown field)"
    if "enum" in node:
        return ", ".join(str(v) for v in node["enum"])
    kind = node.get("type", "object")
    words = [_TYPE_NAMES.get(kind, kind)]
    if "minimum" in node or "maximum" in node:
        words.append(f"from {node.get('minimum', '-inf')} to {node.get('maximum', 'inf')}")
    if "pattern" in node:
        words.append(f"matching {node['pattern']}")
    if "maxLength" in node:
        words.append(f"of at most {node['maxLength']} characters")
    if "maxItems" in node:
        words.append(f"of at most {node['maxItems']} items")
    if kind == "object" and node.get("properties"):
        words.append("with fields " + ", ".join(node["properties"]))
    return " ".join(words)
