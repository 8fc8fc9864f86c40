"""A calibration as a document a user stores for a deployment: `kimi-operator export-calibration`
writes it from `bench --profile calibration` runs, a ConfigMap holds it, and the SLO scaler sizes
the deployment's roles on it (spec.autoscaling.slo.calibration; docs/scaling.md).

The document is the fitted `Calibration` itself, not the runs: a sweep's results.json holds every
request's chunk times (megabytes), which a ConfigMap (1 MiB) cannot hold and which the operator
would refit each reconcile; the fit is some hundreds of bytes to 2 KB. It is JSON of the
dataclasses' fields as they are named in Python (plan.json's `calibrations` use the same names),
inside an envelope with `kind` and `version`: a document of another version is refused by name
rather than read into the wrong fields. Floats are written as Python's shortest round-tripping
repr, so loading gives back an equal Calibration.
"""

import json
from typing import Final

from pydantic import TypeAdapter, ValidationError

from kimi_operator.plan import PlanError
from kimi_operator.plan.calibration import Calibration
from kimi_operator.plan.configs import Configuration

KIND: Final = "KimiCalibration"
VERSION: Final = 1
_ADAPTER: Final = TypeAdapter(Calibration)


def document(calibration: Calibration) -> str:
    """The calibration as its stored JSON document."""
    return json.dumps(
        {
            "kind": KIND,
            "version": VERSION,
            "calibration": _ADAPTER.dump_python(calibration, mode="json"),
        },
        indent=1,
    )


def load(text: str) -> Calibration:
    """The calibration a stored document holds; PlanError naming the first problem."""
    try:
        body = json.loads(text)
    except ValueError as error:
        raise PlanError(f"not JSON: {error}") from None
    if not isinstance(body, dict) or body.get("kind") != KIND:
        got = body.get("kind") if isinstance(body, dict) else type(body).__name__
        raise PlanError(
            f"kind {got!r}, not {KIND!r}: write it with `kimi-operator export-calibration`"
        )
    if body.get("version") != VERSION:
        raise PlanError(
            f"version {body.get('version')!r}, not {VERSION}: export it again with this "
            "operator's `kimi-operator export-calibration`"
        )
    try:
        calibration = _ADAPTER.validate_python(body.get("calibration"))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in ("calibration", *first["loc"]))
        raise PlanError(f"{where}: {first['msg']}") from None
    if calibration.gpus is None:
        raise PlanError("calibration.gpus: none: rerun bench with --gpus N and export it again")
    return calibration


def other_shape(calibration: Calibration, config: Configuration) -> str | None:
    """How the calibration's shape differs from the deployment's (None: it is of this shape).
    Each of these changes what a step costs, so a calibration of another is not this
    deployment's: GPUs a group (the step's tensor parallelism), the decode backend (the fast
    path's costs exist only where it was measured) and draft tokens (the tokens a step yields,
    and its cost). Other settings (maxNumSeqs, the prefix cache) are the configuration's: the
    model takes them from the deployment."""
    for what, measured, deployed in (
        ("GPUs a group", calibration.gpus, config.gpus),
        ("decode backend", calibration.backend, config.backend),
        ("draft tokens", calibration.draft_tokens, config.draft_tokens),
    ):
        if measured != deployed:
            return f"it measured {what} {measured!r}, the deployment has {deployed!r}"
    return None
