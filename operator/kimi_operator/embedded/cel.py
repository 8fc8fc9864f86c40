"""A CRD's `x-kubernetes-validations` (CEL rules), evaluated at admission as kube-apiserver does:
each rule where it is attached, on every value there (each list item, each map value), with
`oldSelf` (transition rules) only on an update where the old value can be correlated (object
properties and map values, not list items), and a failure worded as the API server words it:
`<field>: Invalid value: "<schema type>": <message>`.

cel-python stands in for cel-go: kube-apiserver's extension libraries (quantity, url, ...) and
its cost limits are not there (docs/embedded-api-server.md). It interprets a rule in about 15 ms
where cel-go takes microseconds, so the verdicts of a node's rules are remembered by the value's
JSON (rules without oldSelf are pure), and rules are not run on a value an update left unchanged
(their failures would be let be: ratcheting).
"""

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import celpy
import celpy.evaluation
import lark
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from kimi_operator.embedded.schema import FieldError, Path, field_path, show

NO_OLD = object()  # no old value to correlate with: transition rules are skipped
VERDICTS_KEPT = 4096  # values remembered per node
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\['([^']*)'\]|\[(\d+)\]")
_EXPAND_STRING_LITERAL = celpy.evaluation.celstr


@functools.lru_cache(maxsize=1024)
def _string_literal(text: str) -> celpy.celtypes.StringType:
    return _EXPAND_STRING_LITERAL(lark.Token("STRING_LIT", text))


def _remembered_string_literal(token: lark.Token) -> celpy.celtypes.StringType:
    """cel-python expands a string literal's escapes each time the literal is evaluated, a
    character at a time through a generator: the CRD's vLLM flag patterns (up to 7 KB, matched
    against every argument) spent a third of a rule's time there. A literal's value is its
    text's alone (an immutable str): expanded once."""
    return _string_literal(token.value)


celpy.evaluation.celstr = _remembered_string_literal
# cel-python's evaluator casts at every step of a rule (`cast(Tuple[Result, Result], ...)`): each
# builds a typing alias of its `Result`, a union of 15 types, hashed anew every time, for a cast
# that returns its argument: 29% of the rules' time in a py-spy profile of test_one_verdict (its
# CPU 13.2 s before, 9.9 s after). Those subscripts in the evaluator's code now read `object`;
# the aliases the module built on import keep the union.
celpy.evaluation.Result = object  # type: ignore[assignment]  # cel-python declares it a union


@dataclass(frozen=True)
class Rule:
    text: str
    program: Any  # celpy.Runner
    message: str
    message_program: Any | None
    relative: Path  # fieldPath, as steps from the node the rule is on
    reason: str
    transition: bool  # refers to oldSelf


@dataclass
class Node:
    """The rules of one schema node and the nodes below it that have rules."""

    type: str
    rules: list[Rule] = field(default_factory=list)
    properties: dict[str, "Node"] = field(default_factory=dict)
    items: "Node | None" = None
    values: "Node | None" = None  # additionalProperties
    # (rule, message) of each rule without oldSelf that fails, by the JSON of the value
    verdicts: dict[str, list[tuple[Rule, str]]] = field(default_factory=dict)


def _relative(path: str) -> Path:
    steps: list[str | int] = []
    for name, quoted, index in _STEP.findall(path):
        steps.append(int(index) if index else (name or quoted))
    return tuple(steps)


_ENVIRONMENT = celpy.Environment()


@functools.cache
def _program(text: str) -> Any:
    """A CEL expression's program, parsed once per process: every embedded API server installs
    the CRDs (the operator's and Gateway API's hold ~380 rules), and parsing them again for each
    server took 0.55 s of its CPU (0.04 s with them parsed once). A program is the parsed tree;
    each evaluation makes an evaluator of its own."""
    return _ENVIRONMENT.program(_ENVIRONMENT.compile(text))


def _rule(entry: Mapping[str, Any]) -> Rule:
    try:
        program = _program(entry["rule"])
        expression = entry.get("messageExpression")
        message_program = _program(expression) if expression else None
    except CELParseError as error:
        raise ValueError(f"x-kubernetes-validations rule {entry['rule']!r}: {error}") from None
    return Rule(
        text=entry["rule"],
        program=program,
        message=entry.get("message") or f"failed rule: {entry['rule']}",
        message_program=message_program,
        relative=_relative(entry.get("fieldPath", "")),
        reason=entry.get("reason", "FieldValueInvalid"),
        transition=re.search(r"\boldSelf\b", entry["rule"]) is not None,
    )


def compile_rules(schema: Mapping[str, Any]) -> Node | None:
    """The rules under `schema` as a tree; None when there are none."""
    node = Node(type=schema.get("type", "object" if "properties" in schema else ""))
    node.rules = [_rule(entry) for entry in schema.get("x-kubernetes-validations", [])]
    for name, sub in schema.get("properties", {}).items():
        child = compile_rules(sub)
        if child is not None:
            node.properties[name] = child
    if isinstance(schema.get("items"), Mapping):
        node.items = compile_rules(schema["items"])
    if isinstance(schema.get("additionalProperties"), Mapping):
        node.values = compile_rules(schema["additionalProperties"])
    if node.rules or node.properties or node.items or node.values:
        return node
    return None


def evaluate(node: Node, value: Any, old: Any = NO_OLD, path: Path = ()) -> list[FieldError]:
    """Every rule under `node` that `value` (and `old`, on an update) fails."""
    errors: list[FieldError] = []
    _evaluate(node, value, old, path, errors)
    return errors


def _evaluate(node: Node, value: Any, old: Any, path: Path, errors: list[FieldError]) -> None:
    if value is None:
        return
    if node.rules and (old is NO_OLD or old != value):
        errors += [_error(node, rule, path, message) for rule, message in _verdicts(node, value)]
    transitions = [rule for rule in node.rules if rule.transition]
    if transitions and old is not NO_OLD:
        activation = {"self": json_to_cel(value), "oldSelf": json_to_cel(old)}
        for rule in transitions:
            failure = _failure(rule, activation)
            if failure is not None:
                errors.append(_error(node, rule, path, failure))
    if isinstance(value, dict):
        olds = old if isinstance(old, dict) else {}
        for key, item in value.items():
            child = node.properties.get(key, node.values)
            if child is not None:
                _evaluate(child, item, olds.get(key, NO_OLD), (*path, key), errors)
    elif isinstance(value, list) and node.items is not None:
        for i, item in enumerate(value):
            _evaluate(node.items, item, NO_OLD, (*path, i), errors)


def _verdicts(node: Node, value: Any) -> list[tuple[Rule, str]]:
    """(rule, message) of each rule without oldSelf that `value` fails."""
    key = json.dumps(value, sort_keys=True, separators=(",", ":"))
    found = node.verdicts.get(key)
    if found is None:
        activation = {"self": json_to_cel(value)}
        failures = (
            (rule, _failure(rule, activation)) for rule in node.rules if not rule.transition
        )
        found = [(rule, message) for rule, message in failures if message is not None]
        if len(node.verdicts) >= VERDICTS_KEPT:
            node.verdicts.clear()
        node.verdicts[key] = found
    return found


def _failure(rule: Rule, activation: dict[str, Any]) -> str | None:
    """None when the rule holds; else the message to give."""
    try:
        result = rule.program.evaluate(activation)
    except CELEvalError as error:
        result = error
    if isinstance(result, CELEvalError):
        return f"{result.args[0]} evaluating rule: {rule.text}"
    if result:
        return None
    if rule.message_program is not None:
        try:
            return str(rule.message_program.evaluate(activation))
        except CELEvalError:
            return rule.message
    return rule.message


def _error(node: Node, rule: Rule, path: Path, message: str) -> FieldError:
    where = field_path((*path, *rule.relative))
    body = {
        "FieldValueForbidden": f"Forbidden: {message}",
        "FieldValueRequired": f"Required value: {message}",
        "FieldValueDuplicate": f"Duplicate value: {show(node.type)}: {message}",
    }.get(rule.reason, f"Invalid value: {show(node.type)}: {message}")
    return FieldError(where, rule.reason, body, path)
