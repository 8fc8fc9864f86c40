"""The API server's checks of a custom object, as far as they can run here.

No kube-apiserver can run on these machines, so tests emulate what it does with the generated CRD:
drop nulls, apply structural defaults, validate the OpenAPI v3 schema (with unknown fields refused,
as `kubectl apply`'s strict field validation does), then evaluate every `x-kubernetes-validations`
CEL rule with cel-python at the node it is attached to.
"""

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import celpy
from jsonschema import Draft4Validator

from kimi_operator.api.defaulting import apply_defaults, drop_nulls


@dataclass(frozen=True)
class CelRule:
    path: tuple[str, ...]
    rule: str
    message: str
    program: Any


def strict_schema(schema: Any) -> Any:
    """Refuse unknown fields: what `kubectl apply` (fieldValidation=Strict) gets from the server.

    `metadata` is the API server's own ObjectMeta, checked elsewhere: left open here, as are
    objects that preserve unknown fields or declare `additionalProperties`.
    """
    if isinstance(schema, dict):
        out = {k: v if k == "metadata" else strict_schema(v) for k, v in schema.items()}
        preserve = out.get("x-kubernetes-preserve-unknown-fields")
        open_object = preserve or "additionalProperties" in out
        if out.get("type") == "object" and "properties" in out and not open_object:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict_schema(v) for v in schema]
    return schema


def _cel_rules(schema: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[CelRule]:
    env = celpy.Environment()
    for entry in schema.get("x-kubernetes-validations", []):
        program = env.program(env.compile(entry["rule"]))
        yield CelRule(path, entry["rule"], entry["message"], program)
    for name, prop in schema.get("properties", {}).items():
        yield from _cel_rules(prop, (*path, name))


class ApiServer:
    def __init__(self, crd: dict[str, Any]) -> None:
        self.schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        self.validator = Draft4Validator(strict_schema(self.schema))
        self.rules = list(_cel_rules(self.schema))

    def admit(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as it would be stored: nulls dropped, defaults applied."""
        return apply_defaults(self.schema, drop_nulls(copy.deepcopy(obj)))

    def errors(self, obj: dict[str, Any]) -> list[str]:
        stored = self.admit(obj)
        errors = [
            ".".join(str(p) for p in e.absolute_path) + ": " + e.message
            for e in self.validator.iter_errors(stored)
        ]
        for rule in self.rules:
            value: Any = stored
            for key in rule.path:
                value = value.get(key) if isinstance(value, dict) else None
            if value is None:
                continue
            try:
                ok = rule.program.evaluate({"self": celpy.json_to_cel(value)})
            except celpy.CELEvalError as error:
                errors.append(f"{'.'.join(rule.path)}: rule evaluation error: {error.args[0]}")
                continue
            if not ok:
                errors.append(rule.message)
        return errors
