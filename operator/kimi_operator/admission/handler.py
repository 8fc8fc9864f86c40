"""The `@kopf.on.validate` handler: the check of `kimi-operator validate` and of the reconcile
(`check_document`), and of objectives no count of groups can meet (slo_roles.refusals), as an
admission verdict."""

import copy
from collections.abc import Mapping
from typing import Any, Final

import kopf

from kimi_operator.api.constants import GROUP, PLURAL, VERSION
from kimi_operator.api.validation import UnreadableDocument, check_document
from kimi_operator.slo_roles import refusals

# The webhook's id: the path kube-apiserver posts to (`/<id>`, the chart's clientConfig path).
WEBHOOK_ID: Final = "validate-kimideployments"
# 422 Unprocessable Entity, kube-apiserver's own code for an invalid object.
REFUSED: Final = 422

REGISTRY = kopf.OperatorRegistry()


def refusal(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> tuple[list[str], list[str]]:
    """(problems, warnings) of a create (`old` None) or an update, one line each.

    An update that leaves `spec` as it is is always allowed: labels, annotations, finalizers and
    a deletion in progress never wait on a spec that an older operator accepted.
    """
    if old is not None and new.get("spec") == old.get("spec"):
        return [], []
    try:
        report = check_document(copy.deepcopy(dict(new)))
    except UnreadableDocument as error:
        return [str(error)], []
    problems = report.problems
    if report.deployment is not None:  # valid: are its objectives within the shape's reach?
        problems = [*problems, *refusals(report.deployment)]
    return [str(problem) for problem in problems], list(report.warnings)


@kopf.on.validate(  # type: ignore[arg-type]  # kopf's callback protocol takes **kwargs
    GROUP,
    VERSION,
    PLURAL,
    id=WEBHOOK_ID,
    operations=["CREATE", "UPDATE"],
    registry=REGISTRY,
)
def validate_kimideployment(
    new: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    operation: str,
    warnings: list[str],
    **_: Any,
) -> None:
    problems, found = refusal(new, old if operation == "UPDATE" else None)
    warnings.extend(found)
    if problems:
        raise kopf.AdmissionError("\n".join(problems), code=REFUSED)
