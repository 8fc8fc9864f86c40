"""The rules of spec.autoscaling and spec.prefill.autoscaling: an autoscaler's bounds, and
exactly one of its target (a threshold an HPA, KEDA or the prefill autoscaler scales on) and its
slo (the objectives the operator's SLO scaler sizes the groups for), and the schedule of the
slo's stored calibration (the CronJob's: builders/calibration.py)."""

import re
from collections.abc import Mapping

from kimi_operator.api.rule import Json, Rule

AUTOSCALING_TARGETS = ("decodeRateFloor", "waitingRequestsPerGroup", "kvCacheUsagePercent")
PREFILL_AUTOSCALING_TARGETS = ("waitingRequestsPerGroup", "ttftSecondsP90")
SLO_OBJECTIVES = ("ttftSeconds", "decodeTokensPerSecondPerUser")
PREFILL_SLO_OBJECTIVES = ("ttftSeconds",)  # prefill groups do not decode


def _cron_field(value: str, *, any_day: bool = False) -> str:
    """One field of a cron schedule as Kubernetes' CronJob parser takes it: a list of `*`, a
    value or a range a-b, each with a step /n; `?` also in the two day fields."""
    start = "[*?]" if any_day else "[*]"
    element = f"({start}|{value}(-{value})?)(/[1-9][0-9]?)?"
    return f"{element}(,{element})*"


def _names(names: str) -> str:
    return f"{names}|{names.upper()}"


_MONTHS = _names("jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec")
_DAYS = _names("sun|mon|tue|wed|thu|fri|sat")
# A standard 5-field schedule (minute hour day-of-month month day-of-week) or a macro; the
# same pattern for Python's re and CEL's matches() (RE2), no backslash or quote in it. Ranges
# are checked for their bounds, not their order (5-3 passes here and the CronJob is refused).
CRON_SCHEDULE = (
    "^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|"
    + " +".join(
        (
            _cron_field("[0-5]?[0-9]"),
            _cron_field("([01]?[0-9]|2[0-3])"),
            _cron_field("(0?[1-9]|[12][0-9]|3[01])", any_day=True),
            _cron_field(f"(0?[1-9]|1[0-2]|{_MONTHS})"),
            _cron_field(f"([0-6]|{_DAYS})", any_day=True),
        )
    )
    + ")$"
)


_FIELD_NAMES = {
    name: number
    for names, first in ((_MONTHS.split("|")[:12], 1), (_DAYS.split("|")[:7], 0))
    for number, name in enumerate(names, first)
}


def backwards_ranges(schedule: str) -> list[str]:
    """The ranges a-b of a schedule (one `CRON_SCHEDULE` takes) whose start is after their end:
    Kubernetes' CronJob parser refuses them ("beginning of range beyond end of range"), a check
    a regex cannot make, so the webhook and the operator make it (CEL here has no split)."""
    if re.match(CRON_SCHEDULE, schedule) is None or schedule.startswith("@"):
        return []

    def value(bound: str) -> int:
        return _FIELD_NAMES[bound.lower()] if bound.isalpha() else int(bound)

    ranges = [
        element.split("/")[0]
        for field in schedule.split()
        for element in field.split(",")
        if "-" in element
    ]
    return [r for r in ranges if value(r.split("-")[0]) > value(r.split("-")[1])]


def _autoscaling_rules(
    scope: tuple[str, ...], targets: tuple[str, ...], objectives: tuple[str, ...], zero: str
) -> tuple[Rule, ...]:
    """An autoscaler's bounds and its one target, or its objectives: spec.autoscaling's and
    spec.prefill.autoscaling's alike (`zero`: how else the role's groups are stopped)."""

    def chosen(target: Mapping[str, Json]) -> list[str]:
        return [t for t in targets if t in target]

    return (
        Rule(
            scope=scope,
            reads=(("minReplicas",),),
            field="minReplicas",
            cel="self.minReplicas >= 1",
            check=lambda a: a["minReplicas"] >= 1,
            problem="no scale to zero: a TP group's cold start (scheduling its nodes, loading "
            "the weights) takes tens of minutes, which the first request after zero would wait",
            allowed=f"1 to maxReplicas; {zero}",
            got=lambda a: a["minReplicas"],
        ),
        Rule(
            scope=scope,
            reads=(("minReplicas",), ("maxReplicas",)),
            field="maxReplicas",
            cel="self.maxReplicas >= self.minReplicas",
            check=lambda a: a["maxReplicas"] >= a["minReplicas"],
            problem="fewer than minReplicas",
            allowed="minReplicas to 64",
            got=lambda a: a["maxReplicas"],
        ),
        Rule(
            scope=scope,
            reads=(("target",), ("slo",)),
            field="",
            cel="has(self.target) != has(self.slo)",
            check=lambda a: ("target" in a) != ("slo" in a),
            problem="exactly one of target (a threshold an HPA or KEDA scales on) and slo (the "
            "objectives the operator sizes the groups for) must be set",
            allowed="target or slo",
            got=lambda a: sorted(k for k in ("target", "slo") if k in a),
        ),
        Rule(
            scope=scope,
            reads=(("target",),),
            field="target",
            cel="!has(self.target) || "
            + " + ".join(f"(has(self.target.{t}) ? 1 : 0)" for t in targets)
            + " == 1",
            check=lambda a: "target" not in a or len(chosen(a["target"])) == 1,
            problem="exactly one target must be set",
            allowed=", ".join(targets),
            got=lambda a: chosen(a.get("target", {})),
        ),
        Rule(
            scope=(*scope, "slo", "calibration"),
            reads=(("schedule",),),
            field="schedule",
            cel=f"!has(self.schedule) || self.schedule.matches('{CRON_SCHEDULE}')",
            check=lambda ref: (
                "schedule" not in ref or re.match(CRON_SCHEDULE, ref["schedule"]) is not None
            ),
            problem="not a cron schedule",
            allowed="5 fields, minute hour day-of-month month day-of-week (in UTC), each *, a "
            "number, a range a-b or a list a,b,c, with an optional step /n (month and day names "
            "jan-dec, sun-sat); or @hourly, @daily, @weekly, @monthly, @yearly; e.g. '0 4 * * 0'",
            got=lambda ref: ref["schedule"],
        ),
        Rule(
            scope=(*scope, "slo", "calibration"),
            reads=(("schedule",),),
            field="schedule",
            cel="",  # `backwards_ranges`: the webhook's and the operator's
            check=lambda ref: not backwards_ranges(ref.get("schedule", "")),
            problem="a range runs backwards (the CronJob would be refused)",
            allowed="ranges a-b with a before b, e.g. 1-5 or mon-fri",
            got=lambda ref: backwards_ranges(ref.get("schedule", "")),
        ),
        Rule(
            scope=(*scope, "slo"),
            reads=tuple((o,) for o in objectives),
            field="",
            cel=" || ".join(f"has(self.{o})" for o in objectives),
            check=lambda slo: any(o in slo for o in objectives),
            problem="at least one objective must be set",
            allowed=", ".join(objectives),
            got=sorted,
        ),
    )


AUTOSCALING_RULES = _autoscaling_rules(
    ("autoscaling",),
    AUTOSCALING_TARGETS,
    SLO_OBJECTIVES,
    "spec.replicas 0 without autoscaling stops every group",
)
PREFILL_AUTOSCALING_RULES = (
    *_autoscaling_rules(
        ("prefill", "autoscaling"),
        PREFILL_AUTOSCALING_TARGETS,
        PREFILL_SLO_OBJECTIVES,
        "without spec.prefill the groups are aggregated",
    ),
    # Prefill groups move the time to first token, not the rate a request decodes at.
    Rule(
        scope=("prefill", "autoscaling", "slo"),
        reads=(("decodeTokensPerSecondPerUser",),),
        field="decodeTokensPerSecondPerUser",
        cel="!has(self.decodeTokensPerSecondPerUser)",
        check=lambda slo: "decodeTokensPerSecondPerUser" not in slo,
        problem="prefill groups do not decode: their count moves the time to first token, not "
        "the decode rate (spec.autoscaling.slo holds it up)",
        allowed=", ".join(PREFILL_SLO_OBJECTIVES),
        got=lambda slo: slo["decodeTokensPerSecondPerUser"],
    ),
)
