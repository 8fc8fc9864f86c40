"""What kube-apiserver does to an object of a CRD before it stores it: the structural schema
(embedded.schema) and the CEL rules (embedded.cel) of the CRD, and the answer it gives when they
refuse the object.

On an update, a failure at a value the update did not change is let be (validation ratcheting,
on by default since Kubernetes 1.30), so that an object stored before a stricter CRD can still be
written, its status first of all.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kimi_operator.embedded import cel
from kimi_operator.embedded.schema import FieldError, annotated, default, prune, validate

_MISSING = object()
# Errors after which kube-apiserver runs no CEL rule, saying so (its hasBlockingErr).
BLOCKING = frozenset({"FieldValueTypeInvalid", "FieldValueNotSupported"})
NOT_CHECKED = FieldError(
    "<nil>",
    "FieldValueInvalid",
    'Invalid value: "null": some validation rules were not checked because the object was '
    "invalid; correct the existing errors to complete validation",
    (),
)


class Refused(Exception):
    """The API server's Status answer: `status` (HTTP code), `reason`, `message`, `details`."""

    def __init__(self, status: int, reason: str, message: str, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.status, self.reason, self.message, self.details = status, reason, message, details


def _at(value: Any, path: tuple[str | int, ...]) -> Any:
    """The value at `path`; _MISSING when there is none."""
    for step in path:
        found = value.get(step, _MISSING) if isinstance(value, dict) else _MISSING
        if isinstance(value, list) and isinstance(step, int) and step < len(value):
            found = value[step]
        if found is _MISSING:
            return _MISSING
        value = found
    return value


def _changed(
    errors: list[FieldError], old: Mapping[str, Any] | None, new: Mapping[str, Any]
) -> list[FieldError]:
    """The errors an update is refused for: those at values it changed (ratcheting)."""
    if old is None:
        return errors
    return [e for e in errors if _at(old, e.node) != _at(new, e.node)]


@dataclass(frozen=True)
class Admitted:
    obj: dict[str, Any]
    warnings: list[str]  # unknown fields pruned (the API server's Warning headers)


class CustomResource:
    """One served version of a CRD, as the API server checks its objects."""

    def __init__(self, crd: Mapping[str, Any], version: Mapping[str, Any]) -> None:
        self.kind: str = crd["spec"]["names"]["kind"]
        self.group: str = crd["spec"]["group"]
        self.version: str = version["name"]
        self.schema = annotated((version.get("schema") or {}).get("openAPIV3Schema") or {})
        self.rules = cel.compile_rules(self.schema)
        # The scale subresource's paths (specReplicasPath, ...), when the version has one.
        self.scale: dict[str, str] | None = (version.get("subresources") or {}).get("scale")

    @classmethod
    def of(cls, crd: Mapping[str, Any], api_version: str) -> "CustomResource":
        """The CRD's version that serves `api_version` (`group/version`)."""
        for version in crd["spec"]["versions"]:
            if f"{crd['spec']['group']}/{version['name']}" == api_version:
                return cls(crd, version)
        raise ValueError(f"CRD {crd['metadata']['name']} does not serve {api_version}")

    def refusals(self, obj: Mapping[str, Any]) -> list[str]:
        """Why creating `obj` as `kubectl apply` does (strict) is refused, a line per cause; []
        when it is stored."""
        try:
            self.admit(obj, old=None, strict=True)
        except Refused as refused:
            causes = refused.details.get("causes") or []
            return [f"{c['field']}: {c['message']}" for c in causes] or [refused.message]
        return []

    def admit(
        self, obj: Mapping[str, Any], *, old: Mapping[str, Any] | None, strict: bool
    ) -> Admitted:
        """The object as it is stored: pruned, defaulted; `Refused` (400 with `strict` for an
        unknown field, 422 for invalid values) when the API server refuses it."""
        unknown: list[str] = []
        # A JSON document: copied by a JSON round trip, a few times faster than deepcopy.
        pruned = prune(self.schema, json.loads(json.dumps(obj)), (), unknown)
        name = (obj.get("metadata") or {}).get("name", "")
        if unknown and strict:
            fields = ", ".join(f'unknown field "{f}"' for f in unknown)
            message = (
                f'{self.kind} in version "{self.version}" cannot be handled as a {self.kind}: '
                f"strict decoding error: {fields}"
            )
            raise Refused(400, "BadRequest", message, {})
        stored: dict[str, Any] = default(self.schema, pruned)
        errors = _changed(validate(self.schema, stored, old=old), old, stored)
        if self.rules is not None and any(e.reason in BLOCKING for e in errors):
            errors.append(NOT_CHECKED)
        elif self.rules is not None:
            previous = cel.NO_OLD if old is None else dict(old)
            errors += _changed(cel.evaluate(self.rules, stored, previous), old, stored)
        if errors:
            raise self.invalid(name, errors)
        return Admitted(stored, [f'unknown field "{f}"' for f in unknown])

    def invalid(self, name: str, errors: list[FieldError]) -> Refused:
        listed = str(errors[0]) if len(errors) == 1 else f"[{', '.join(map(str, errors))}]"
        message = f'{self.kind}.{self.group} "{name}" is invalid: {listed}'
        causes = [{"reason": e.reason, "message": e.detail, "field": e.field} for e in errors]
        details = {"name": name, "group": self.group, "kind": self.kind, "causes": causes}
        return Refused(422, "Invalid", message, details)
