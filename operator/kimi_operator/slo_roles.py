"""spec.autoscaling.slo and spec.prefill.autoscaling.slo in a reconcile (docs/scaling.md): the
operator is the one writer of a role's count.

For each role with an slo, observe.py asks Prometheus the instant `queries` of its load (the
chart's per-role recording rules); `evaluate`, pure, turns the answers into slo_scaling's
`Reading`, sizes the role with `slo_scaling.evaluate` on the deployment's shape and calibration
(`scaler`: the one a user stored for it in a ConfigMap, which observe.py reads, else the GB300
built-in for the shape; `calibration`), forecasting over the start-up time its groups measured
(`startup_seconds`), and renders that many groups in place of spec.replicas or
spec.prefill.replicas, which the operator never writes (as prefill_scaling.py does). No
HorizontalPodAutoscaler or ScaledObject is made for an slo (builders/autoscaling.py); one that
is not the operator's and targets the deployment's scale subresource (`foreign`) would be a
second writer of the decode count: the decode role keeps the count it has and Degraded names
the object until it is gone. Everything the scaler needs to carry on after a restart lives in
status.sloAutoscaler, one entry per role; between status writes (a steady load writes none:
slo_scaling's `_moved`) the process keeps the view each reading made (`_memory`), so Holt and
the correction learn from every reading.
"""

import functools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kimi_operator.api.constants import GROUP
from kimi_operator.api.problem import Problem
from kimi_operator.api.spec import KimiDeployment, ScalingBounds, SloSpec
from kimi_operator.api.status import SloAutoscalerStatus, SloCalibration
from kimi_operator.k8s.merge import owned_by
from kimi_operator.observability.rules import (
    ROLE_OUTPUT_TOKENS,
    ROLE_PREFIX_HITS,
    ROLE_PROMPT_TOKENS,
    ROLE_REQUESTS,
    ROLE_SERVING_GROUPS,
    role_decode_rate,
    role_ttft,
)
from kimi_operator.plan import PlanError
from kimi_operator.plan.builtin import builtin_calibration
from kimi_operator.plan.calibration import Calibration
from kimi_operator.plan.capacity import Role
from kimi_operator.plan.configs import deployment_configuration
from kimi_operator.plan.stored import load, other_shape
from kimi_operator.prefill_scaling import Load, with_prefill_replicas
from kimi_operator.rollout import group_of
from kimi_operator.slo_scaling import UNAVAILABLE, VIEW, Reading, Scaler, Slo, refusal
from kimi_operator.slo_scaling import evaluate as size

AUTOSCALER: Final = "kimi-operator/slo"  # status.autoscaler with spec.autoscaling.slo
SHARED: Final = "SloCountShared"  # Degraded's reason while another autoscaler targets the count
# Degraded's reason while the calibration an slo names cannot be used (the built-in is).
CALIBRATION: Final = "SloCalibrationUnusable"
# A group's start-up time before any was measured: a cold GB300 start of Kimi K3.
DEFAULT_STARTUP_S: Final = 1800.0
# The keys of `queries`, by what slo_scaling's Reading needs.
RATE, PROMPT, OUTPUT, HITS, SERVING, TTFT, DECODE = (
    "requestRate",
    "promptTokens",
    "outputTokens",
    "prefixHitRate",
    "servingGroups",
    "ttft",
    "decodeRate",
)
_ROLE_SERIES = {"decode": 'role!="prefill"', "prefill": 'role="prefill"'}
_LETTER = {"decode": "g", "prefill": "p"}  # the role's group names: <name>-g<i>, <name>-p<i>
# slo_scaling's `Scaled.memory` by (namespace, name, role), beside the status view it was made
# with: used only while status still holds that view (not after another replica's write or an
# edit). One small entry per deployment and role ever scaled; the reconcile threads share it.
_memory: dict[tuple[str, str, Role], tuple[dict[str, Any], dict[str, Any]]] = {}
_memory_lock = threading.Lock()


def bounds(kd: KimiDeployment, role: Role) -> ScalingBounds | None:
    """The role's autoscaling when it has an slo (spec.autoscaling's or spec.prefill's)."""
    return kd.spec.slo_scaled.get(role)


def _slo(scaling: ScalingBounds) -> SloSpec:
    assert scaling.slo is not None  # `bounds` gives only those with one
    return scaling.slo


def roles(kd: KimiDeployment) -> list[Role]:
    return list(kd.spec.slo_scaled)


def queries(kd: KimiDeployment, role: Role) -> dict[str, str]:
    """The instant queries of the role's load and of what its requests got, at the slo's
    percentiles ({} without an slo)."""
    scaling = bounds(kd, role)
    if scaling is None:
        return {}
    slo = _slo(scaling)
    where = (
        f'{{namespace="{kd.metadata.namespace}", deployment="{kd.metadata.name}", '
        f"{_ROLE_SERIES[role]}}}"
    )
    return {
        RATE: f"sum({ROLE_REQUESTS}{where})",
        PROMPT: f"max({ROLE_PROMPT_TOKENS}{where})",
        OUTPUT: f"max({ROLE_OUTPUT_TOKENS}{where})",
        HITS: f"max({ROLE_PREFIX_HITS}{where})",
        SERVING: f"sum({ROLE_SERVING_GROUPS}{where})",
        TTFT: f"max({role_ttft(slo.ttft_percentile)}{where})",
        DECODE: f"min({role_decode_rate(slo.decode_percentile)}{where})",
    }


def reading(values: Mapping[str, float | None], at: str) -> Reading | None:
    """The answers as slo_scaling's Reading; None while the role serves nothing Prometheus
    knows of (no request rate or no serving group: the rules not loaded, no group up yet)."""
    rate, serving = values.get(RATE), values.get(SERVING)
    if rate is None or serving is None:
        return None
    return Reading(
        at=at,
        request_rate_per_s=rate,
        prompt_tokens=values.get(PROMPT),
        output_tokens=values.get(OUTPUT),
        prefix_hit_rate=values.get(HITS),
        serving_groups=round(serving),
        ttft_s=values.get(TTFT),
        decode_tok_s=values.get(DECODE),
    )


@functools.cache
def _calibration(gpus: int, backend: str, draft_tokens: int) -> Calibration:
    return builtin_calibration(gpus, backend, draft_tokens)


def _path(role: Role) -> str:
    return "spec.autoscaling.slo" if role == "decode" else "spec.prefill.autoscaling.slo"


def calibration_maps(kd: KimiDeployment) -> list[str]:
    """The ConfigMaps of the deployment's namespace its roles' slo store a calibration in."""
    return sorted(
        {
            slo.calibration.config_map_name
            for scaling in kd.spec.slo_scaled.values()
            if (slo := _slo(scaling)).calibration is not None
        }
    )


def calibration(
    kd: KimiDeployment, role: Role, maps: Mapping[str, Mapping[str, Any] | None]
) -> tuple[Calibration, SloCalibration, Problem | None]:
    """What the role is sized on, from the ConfigMaps `calibration_maps` names as read (None:
    not found), and its status: the calibration stored for it where it names one that is of the
    deployment's shape (stored.py), else the GB300 built-in for the shape, and then Degraded
    (`CALIBRATION`) saying why the stored one is not used."""
    scaling = bounds(kd, role)
    assert scaling is not None
    config = deployment_configuration(kd)
    builtin = _calibration(config.gpus, config.backend, config.draft_tokens)
    said = _said(builtin)
    ref = _slo(scaling).calibration
    if ref is None:
        return builtin, said, None
    where = f"ConfigMap {ref.config_map_name}, key {ref.key}"
    found = maps.get(ref.config_map_name)
    data = (found or {}).get("data") or {}
    why = None
    if found is None:
        why = f"ConfigMap {ref.config_map_name} not found in namespace {kd.metadata.namespace}"
    elif ref.key not in data:
        keys = ", ".join(sorted(data)) or "none"
        why = f"ConfigMap {ref.config_map_name} has no key {ref.key} (its keys: {keys})"
    else:
        try:
            stored = load(str(data[ref.key]))
        except PlanError as error:
            why = f"{where} is not a calibration document: {error}"
        else:
            shape = other_shape(stored, config)
            if shape is None:
                said = _said(stored, where)
                return stored, said, None
            why = f"{where} is a calibration of another shape: {shape}"
    problem = Problem(
        CALIBRATION,
        f"{_path(role)}.calibration: {why}; the {role} groups are sized on the built-in "
        f"{builtin.name} calibration meanwhile"[:1024],
    )
    return builtin, said, problem


def _said(sized_on: Calibration, config_map: str | None = None) -> SloCalibration:
    """What status.sloAutoscaler says of the calibration a role was sized on."""
    return SloCalibration(
        name=sized_on.name[:253], origin=sized_on.origin[:512], config_map=config_map
    )


def scaler(kd: KimiDeployment, role: Role, sized_on: Calibration | None = None) -> Scaler:
    """What the role is sized on: the deployment's shape and `sized_on` (`calibration`'s
    answer), else the GB300 built-in calibration for the shape."""
    scaling = bounds(kd, role)
    assert scaling is not None
    slo = _slo(scaling)
    config = deployment_configuration(kd)
    return Scaler(
        config=config,
        calibration=sized_on or _calibration(config.gpus, config.backend, config.draft_tokens),
        role=role,
        slo=Slo(
            ttft_seconds=slo.ttft_seconds,
            ttft_percentile=slo.ttft_percentile,
            decode_tokens_per_s=slo.decode_tokens_per_second_per_user,
            decode_percentile=slo.decode_percentile,
        ),
        bounds=scaling,
    )


def startup_seconds(kd: KimiDeployment, status: Mapping[str, Any], role: Role) -> float:
    """How long a group of the role takes to serve, as the deployment measured it: the start
    of its group that started last (status.groups), else of any group, else a cold start's."""
    measured = [
        (
            str(g.get("startedAt", "")),
            float(g["startupSeconds"]),
            group_of(kd.metadata.name, g["name"]),
        )
        for g in status.get("groups") or []
        if g.get("startupSeconds") is not None
    ]
    own = [m for m in measured if m[2] is not None and m[2][0] == _LETTER[role]]
    latest = max(own or measured, default=None)
    return latest[1] if latest is not None else DEFAULT_STARTUP_S


def foreign(kd: KimiDeployment, uid: str, autoscalers: Sequence[Mapping[str, Any]]) -> list[str]:
    """`Kind/name` of each HorizontalPodAutoscaler or ScaledObject listed that targets the
    deployment's scale subresource and is not the operator's."""
    return sorted(
        f"{a.get('kind', '')}/{a['metadata']['name']}"
        for a in autoscalers
        if not owned_by(a, uid) and _targets(kd, (a.get("spec") or {}).get("scaleTargetRef") or {})
    )


def _targets(kd: KimiDeployment, ref: Mapping[str, Any]) -> bool:
    group = str(ref.get("apiVersion", "")).split("/")[0]
    return ref.get("kind") == kd.kind and ref.get("name") == kd.metadata.name and group == GROUP


@dataclass(frozen=True)
class SloScaled:
    """One evaluation of every role with an slo: the deployment with each role's count set
    (what the plan renders), status.sloAutoscaler (None without an slo), notices for changes
    of a count (Normal Events), what keeps a role from being scaled as asked (Degraded), and
    whether a count went down (a group to drain, which only a pruning reconcile finds)."""

    kd: KimiDeployment
    status: dict[str, Any] | None = None
    notices: list[Problem] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    fewer: bool = False


def _with_count(kd: KimiDeployment, role: Role, count: int) -> KimiDeployment:
    if role == "prefill":
        return with_prefill_replicas(kd, count)
    return kd.model_copy(update={"spec": kd.spec.model_copy(update={"replicas": count})})


def _count(kd: KimiDeployment, role: Role, memory: Mapping[str, Any] | None) -> int:
    """The role's count as last decided (the spec's, the start, before any decision)."""
    if memory is not None:
        return int(memory["desiredReplicas"])
    if role == "decode":
        return kd.spec.replicas
    assert kd.spec.prefill is not None
    return kd.spec.prefill.replicas


def evaluate(
    kd: KimiDeployment,
    old: Mapping[str, Any],
    loads: Mapping[Role, Load] | None,
    *,
    now: str,
    shared: Sequence[str] = (),
    url: str = "",
    maps: Mapping[str, Mapping[str, Any] | None] | None = None,
    calibrating: Sequence[str] = (),
) -> SloScaled:
    """Every role's groups at `now` (RFC 3339) from the last status `old` and the `loads` read
    now (None: not read, each count stays as recorded); `shared`: the other autoscalers that
    target the scale subresource (`foreign`); `url`: the Prometheus asked, for the messages;
    `maps`: the ConfigMaps `calibration_maps` names, as read (None: not found); `calibrating`:
    the deployment's calibration Jobs running now (builders/calibration.py), whose sweep loads
    the groups: every count stays, and nothing is learnt from the load read (`_held`)."""
    if not roles(kd):
        return SloScaled(kd)
    before = old.get("sloAutoscaler") or {}
    memory: dict[str, Any] = {}
    notices: list[Problem] = []
    problems: list[Problem] = []
    fewer = False
    made: dict[Role, dict[str, Any] | None] = {}  # each role's Scaled.memory
    for role in roles(kd):
        last = before.get(role)
        count = _count(kd, role, last)
        if loads is None or (role == "decode" and shared):
            memory[role] = last
            if loads is not None:
                problems.append(_shared(shared, count))
        elif calibrating:
            memory[role] = _held(last, role, count, calibrating)
        else:
            load = loads.get(role, Load(error="not read"))
            found = None if load.error else reading(load.values, now)
            sized_on, said, unusable = calibration(kd, role, maps or {})
            kept = _corrected_for(last, said)
            result = size(
                scaler(kd, role, sized_on),
                kept,
                found,
                startup_s=startup_seconds(kd, old, role),
                now=now,
                memory=_remembered(kd, role, last) if kept is last else None,
            )
            made[role] = result.memory
            memory[role] = result.status | {"calibration": said.model_dump(exclude_none=True)}
            notices += result.notices
            problem = _unavailable(kd, role, load, url, count) if found is None else result.problem
            problems += [p for p in (unusable, problem) if p is not None]
            fewer = fewer or result.replicas < count
            count = result.replicas
        kd = _with_count(kd, role, count)
    status = SloAutoscalerStatus.model_validate(memory).model_dump(exclude_none=True)
    for role, view in made.items():  # beside the status as written, and read back
        _remember(kd, role, status[role], view)
    return SloScaled(kd, status, notices, problems, fewer)


def _view(status: Mapping[str, Any] | None) -> dict[str, Any]:
    return {key: (status or {}).get(key) for key in VIEW}


def _remembered(
    kd: KimiDeployment, role: Role, status: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The role's last `Scaled.memory` in this process, if `status` still shows its view."""
    with _memory_lock:
        view, memory = _memory.get((kd.metadata.namespace, kd.metadata.name, role), ({}, {}))
    return memory if memory and view == _view(status) else None


def _remember(
    kd: KimiDeployment, role: Role, status: Mapping[str, Any], memory: dict[str, Any] | None
) -> None:
    if memory is not None:
        with _memory_lock:
            _memory[kd.metadata.namespace, kd.metadata.name, role] = (_view(status), memory)


def forget(namespace: str, name: str) -> None:
    """A deleted deployment's memories go with it (controller/loop.py drops it)."""
    with _memory_lock:
        for role in ("decode", "prefill"):
            _memory.pop((namespace, name, role), None)


def _corrected_for(
    last: Mapping[str, Any] | None, said: SloCalibration
) -> Mapping[str, Any] | None:
    """The role's memory, less the model's correction when it was learnt on another calibration:
    how much slower the groups run than one calibration says is not how much slower than
    another (a stored calibration measured the groups themselves). A memory that names none
    was sized on the built-in (before the operator recorded it): kept for the built-in."""
    if last is None:
        return last
    before = (last.get("calibration") or {}).get("name")
    if before == said.name or (before is None and said.config_map is None):
        return last
    return {key: value for key, value in last.items() if key != "correction"}


def _held(
    last: Mapping[str, Any] | None, role: Role, count: int, calibrating: Sequence[str]
) -> dict[str, Any]:
    """The role's memory as it was (its forecast, correction and recommendations untouched),
    saying why: a calibration sweep's load is not the users' demand."""
    jobs = ", ".join(calibrating)
    message = (
        f"held while calibration Job {jobs} runs: its sweep loads the groups, so the load read "
        f"now is not demand; keeping {count} {role} groups, learning nothing from it"
    )
    return {**(last or {}), "desiredReplicas": count, "message": message[:1024]}


def _shared(shared: Sequence[str], count: int) -> Problem:
    return Problem(
        SHARED,
        f"{', '.join(shared)} also targets this KimiDeployment's scale subresource "
        f"(spec.replicas): spec.autoscaling.slo is the one writer of the decode groups' count, "
        f"so it keeps {count} groups and does not scale until that autoscaler is deleted (or "
        "spec.autoscaling.slo replaced by a target)",
    )


def _unavailable(kd: KimiDeployment, role: Role, load: Load, url: str, count: int) -> Problem:
    why = load.error or f"no value for {queries(kd, role)[RATE]}"
    return Problem(
        UNAVAILABLE,
        f"no answer from Prometheus {url} for the {role} groups' load ({why}): keeping "
        f"{count} {role} groups",
    )


def refusals(kd: KimiDeployment) -> list[Problem]:
    """The objectives no count of groups meets on the deployment's shape, each saying what the
    shape can meet (the admission webhook's and `kimi-operator validate`'s verdict). On the
    GB300 built-in for the shape: neither reads the cluster, so a stored calibration is not
    known to them (the operator says SloUnreachable where one misses the objectives)."""
    found = [refusal(scaler(kd, role), _path(role)) for role in kd.spec.slo_scaled]
    return [problem for problem in found if problem is not None]


def recorded(kd: KimiDeployment, status: Mapping[str, Any]) -> KimiDeployment:
    """`kd` with each role's count its status last wanted (a check of the cluster's children)."""
    return evaluate(kd, status, None, now="").kd
