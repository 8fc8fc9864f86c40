"""A rule of the spec, written once for both checks: CEL in the CRD (the API server's) and
Python (the webhook's, `validate`'s and the operator's); api/rules.py holds them all."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Json = Any


@dataclass(frozen=True)
class Rule:
    scope: tuple[str, ...]
    reads: tuple[tuple[str, ...], ...]  # paths below scope the rule looks at; () = all of it
    field: str  # path below scope that the message names; "" = the scope itself
    cel: str  # "" for a rule CEL cannot express: the operator and `validate` check it alone
    check: Callable[[Json], bool]
    problem: str
    allowed: str
    got: Callable[[Json], Json]
    # Words added to the problem from what was got (closest spellings, parser errors).
    hint: Callable[[Json], str] | None = None

    @property
    def path(self) -> str:
        return ".".join(("spec", *self.scope, *([self.field] if self.field else [])))

    @property
    def message(self) -> str:
        """The CEL message: the field as the user wrote it, what is wrong, what is allowed."""
        return f"{self.path}: {self.problem} (allowed: {self.allowed})"


@dataclass(frozen=True)
class Violation:
    rule: Rule
    got: Json
