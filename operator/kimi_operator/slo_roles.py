"""spec.autoscaling.slo and spec.prefill.autoscaling.slo in a reconcile (docs/scaling.md): the
operator is the one writer of a role's count.

For each role with an slo, observe.py asks Prometheus the instant `queries` of its load (the
chart's per-role recording rules); `evaluate`, pure, turns the answers into slo_scaling's
`Reading`, sizes the role with `slo_scaling.evaluate` on the deployment's shape and calibration
(`scaler`), forecasting over the start-up time its groups measured (`startup_seconds`), and
renders that many groups in place of spec.replicas or spec.prefill.replicas, which the operator
never writes (as prefill_scaling.py does). No HorizontalPodAutoscaler or ScaledObject is made
for an slo (builders/autoscaling.py); one that is not the operator's and targets the
deployment's scale subresource (`foreign`) would be a second writer of the decode count: the
decode role keeps the count it has and Degraded names the object until it is gone. Everything
the scaler needs to carry on after a restart lives in status.sloAutoscaler, one entry per role;
between status writes (a steady load writes none: slo_scaling's `_moved`) the process keeps the
view each reading made (`_memory`), so Holt and the correction learn from every reading.
"""

import functools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kimi_operator.api.constants import GROUP
from kimi_operator.api.problem import Problem
from kimi_operator.api.spec import KimiDeployment, ScalingBounds, SloSpec
from kimi_operator.api.status import SloAutoscalerStatus
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
from kimi_operator.plan.builtin import builtin_calibration
from kimi_operator.plan.calibration import Calibration
from kimi_operator.plan.capacity import Role
from kimi_operator.plan.configs import deployment_configuration
from kimi_operator.prefill_scaling import Load, with_prefill_replicas
from kimi_operator.rollout import group_of
from kimi_operator.slo_scaling import UNAVAILABLE, VIEW, Reading, Scaler, Slo, refusal
from kimi_operator.slo_scaling import evaluate as size

AUTOSCALER: Final = "kimi-operator/slo"  # status.autoscaler with spec.autoscaling.slo
SHARED: Final = "SloCountShared"  # Degraded's reason while another autoscaler targets the count
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


def scaler(kd: KimiDeployment, role: Role) -> Scaler:
    """What the role is sized on: the deployment's shape and the GB300 built-in calibration
    for it."""
    scaling = bounds(kd, role)
    assert scaling is not None
    slo = _slo(scaling)
    config = deployment_configuration(kd)
    return Scaler(
        config=config,
        calibration=_calibration(config.gpus, config.backend, config.draft_tokens),
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
) -> SloScaled:
    """Every role's groups at `now` (RFC 3339) from the last status `old` and the `loads` read
    now (None: not read, each count stays as recorded); `shared`: the other autoscalers that
    target the scale subresource (`foreign`); `url`: the Prometheus asked, for the messages."""
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
        else:
            load = loads.get(role, Load(error="not read"))
            found = None if load.error else reading(load.values, now)
            result = size(
                scaler(kd, role),
                last,
                found,
                startup_s=startup_seconds(kd, old, role),
                now=now,
                memory=_remembered(kd, role, last),
            )
            made[role] = result.memory
            memory[role] = result.status
            notices += result.notices
            problem = _unavailable(kd, role, load, url, count) if found is None else result.problem
            problems += [problem] if problem is not None else []
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
    shape can meet (the admission webhook's and `kimi-operator validate`'s verdict)."""
    found = []
    for role in kd.spec.slo_scaled:
        path = "spec.autoscaling.slo" if role == "decode" else "spec.prefill.autoscaling.slo"
        found.append(refusal(scaler(kd, role), path))
    return [problem for problem in found if problem is not None]


def recorded(kd: KimiDeployment, status: Mapping[str, Any]) -> KimiDeployment:
    """`kd` with each role's count its status last wanted (a check of the cluster's children)."""
    return evaluate(kd, status, None, now="").kd
