"""The SLO autoscaler against the reactive targets and a static count, on a day of agent traffic.

A day-shaped agent workload (a quiet night, a morning ramp, a peak with a lunch dip, an evening
fall, bursts of sub-agent fan-out, sessions that come back hours later to the same prefix),
compressed `--compression` times, in bench's trace format (`--trace FILE` replays any other, as
`kimi-operator plan --trace` does; `--write-trace FILE` keeps the day's). A simulated cluster
serves it: a group asked for serves `STARTUP_S` later, and every minute the groups serving meet
the SLO or not as the planner's model says for that minute's load on them (plan/capacity.py),
with decode steps `DECODE_SLOWER` and prefill `PREFILL_SLOWER` times what the calibration the
autoscaler is given says, so its online correction (one speed factor) has something to learn.
Every 30 s each policy reads the last 5 minutes' load, as the chart's recording rules give it,
and sets the count:

- `slo`: slo_scaling.evaluate itself, the operator's decision code;
- the reactive targets (docs/scaling.md) through the operator's own HPA rules
  (prefill_scaling.recommend, recommendation_window, step_towards: the total over the serving
  groups against a per-group target, 10% tolerance, one group added per scaleUpPeriodSeconds,
  one removed after scaleDownStabilizationSeconds): `waitingRequestsPerGroup` (the queue, by
  Little's law on the model's queueing) and `decodeRateFloor` (serving x floor / p10 rate), each
  swept over thresholds and scale-up periods; the best is the one with the fewest GPU-hours of
  those meeting the SLO in as many minutes as `slo` (else the one meeting it most often);
- `static`: the fewest groups that meet the SLO at every minute's load, all day.

It reports minutes meeting the SLO, GPU-hours, group starts, flaps (a group removed within
scaleDownStabilizationSeconds after one was added) and re-adds (a group added within it after
one was removed: the load rose again). docs/scaling.md says what a
simulation like this cannot show. Prints a table and writes benchmarks/results/autoscaling.json.

    .venv/bin/python benchmarks/autoscaling.py [--trace FILE] [--quick] [--output FILE]
"""

import argparse
import itertools
import json
import math
import random
import sys
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from kimi_operator.api.spec import PrefillAutoscalingSpec, ScalingBounds
from kimi_operator.bench.profiles import PlannedRequest
from kimi_operator.bench.traces import TraceEntry, dump_trace, load_trace, plan_trace
from kimi_operator.plan.builtin import builtin_calibration
from kimi_operator.plan.calibration import Calibration
from kimi_operator.plan.capacity import Load, predicted
from kimi_operator.plan.configs import Configuration
from kimi_operator.plan.costs import scaled
from kimi_operator.prefill_scaling import recommend, recommendation_window, step_towards
from kimi_operator.rollout import TIME_FORMAT
from kimi_operator.slo_scaling import Figures, Reading, Scaler, Slo, evaluate

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "autoscaling.json"
CONFIG: Final = Configuration(name="k3", gpus=16, draft_tokens=7)
SLO: Final = Slo(ttft_seconds=2.0, ttft_percentile=90, decode_tokens_per_s=150.0)
STARTUP_S: Final = 900.0  # a group's start-up: four trays scheduled, the weights loaded
POLL_S: Final = 30  # KEDA's and the operator's
WINDOW_S: Final = 300  # the recording rules' rate window
STABILIZATION_S: Final = 1200
SCALE_UP_PERIOD_S: Final = 600
MAX_GROUPS: Final = 32
DECODE_SLOWER: Final = 1.15  # the cluster's decode steps, against the autoscaler's calibration
PREFILL_SLOWER: Final = 0.9  # and its prefill (faster)
MIN_GROUPS: Final = 2  # one group down (an update, a failure) still leaves one serving
EPOCH: Final = 1_800_000_000  # the simulated day's midnight (any time will do)
# The day, hour -> share of the peak's session starts (linear between the points).
DAY: Final = (
    (0, 0.04),
    (6, 0.04),
    (9, 1.0),
    (12, 1.0),
    (12.5, 0.6),
    (13.5, 1.0),
    (17, 1.0),
    (20, 0.3),
    (24, 0.04),
)
# (hour, sessions started within its minute): CI jobs' agents by day, a nightly job's by night
BURSTS: Final = ((10.5, 40), (15.0, 40), (22.0, 10))
RETURNING: Final = 0.2  # of sessions come back 1-3 hours later to the same prefix
PEAK_SESSIONS_PER_MIN: Final = 60.0


def day_trace(seed: int, compression: float, peak_per_min: float) -> list[TraceEntry]:
    """The day's agent sessions (bench's trace format), compressed `compression` times: each a
    coding agent's turns over a growing context with think time between them (not compressed:
    an agent thinks as long at any hour), some fanned out to sub-agents."""
    rng = random.Random(seed)
    entries: list[TraceEntry] = []
    day_s = 86400 / compression

    def share(hour: float) -> float:
        for (h0, s0), (h1, s1) in itertools.pairwise(DAY):
            if h0 <= hour <= h1:
                return s0 + (s1 - s0) * (hour - h0) / (h1 - h0)
        return DAY[-1][1]

    def session(name: str, start: float, context: int, turns: int) -> int:
        previous: str | None = None
        for _ in range(turns):
            fanout = rng.randint(2, 4) if rng.random() < 0.15 else 1
            output = rng.randint(100, 900)
            think = round(rng.uniform(2.0, 20.0), 3) if previous else 0.0
            start += think + output / 300  # the answer, then the tool call
            entries.append(
                TraceEntry(
                    start_s=round(start, 3),
                    prompt_tokens=context + 200,
                    output_tokens=output,
                    prefix_group=name,
                    shared_prefix_tokens=context,
                    fanout=fanout,
                    id=f"{name}-{len(entries)}",
                    session=name,
                    after=previous,
                    think_s=think,
                )
            )
            previous = entries[-1].id
            context += output + rng.randint(100, 2500)
        return context

    starts: list[float] = []
    for minute in range(math.ceil(day_s / 60)):
        hour = minute * 60 * compression / 3600
        count = rng.gauss(1, 0.1) * share(hour) * peak_per_min
        starts += [minute * 60 + rng.uniform(0, 60) for _ in range(max(0, round(count)))]
    for hour, sessions in BURSTS:
        at = hour * 3600 / compression
        starts += [at + rng.uniform(0, 60) for _ in range(sessions)]
    for number, start in enumerate(sorted(starts)):
        name = f"s{number}"
        context = session(name, start, 6000 + rng.randint(200, 2000), rng.randint(3, 10))
        if rng.random() < RETURNING:
            back = start + rng.uniform(3600, 3 * 3600) / compression
            if back < day_s:
                session(name, back, context, rng.randint(2, 6))
    entries.sort(key=lambda entry: entry.start_s)
    return entries


@dataclass(frozen=True)
class Requests:
    """The trace's requests by start time, with the prompt tokens a prefix cache would hold for
    each (its group's longest shared prefix so far: the model keeps every prefix)."""

    starts: list[float]
    plan: list[PlannedRequest]
    hits: list[int]

    @classmethod
    def of(cls, entries: list[TraceEntry]) -> "Requests":
        plan = sorted(plan_trace(entries, None), key=lambda r: r.start_s)
        cached: dict[str, int] = {}
        hits = []
        for request in plan:
            group = request.group or f"request-{request.index}"
            hits.append(min(cached.get(group, 0), request.shared_prefix_tokens))
            cached[group] = max(cached.get(group, 0), request.shared_prefix_tokens)
        return cls([r.start_s for r in plan], plan, hits)

    def load(self, start: float, end: float) -> Load | None:
        """The load sent in [start, end), as the recording rules average it; None: none sent."""
        low, high = bisect_left(self.starts, start), bisect_left(self.starts, end)
        chosen = self.plan[low:high]
        if not chosen:
            return None
        prompts = sum(r.prompt_tokens for r in chosen)
        return Load(
            request_rate_per_s=len(chosen) / (end - start),
            prompt_tokens=prompts / len(chosen),
            output_tokens=sum(r.output_tokens for r in chosen) / len(chosen),
            prefix_hit_rate=sum(self.hits[low:high]) / prompts,
            sessions=len({r.task for r in chosen}),
        )


@dataclass
class Cluster:
    """Groups asked for and when each serves; what they cost and how often they changed."""

    ready_at: list[float] = field(default_factory=list)
    changes: list[tuple[float, int]] = field(default_factory=list)  # (time, +1 or -1 per group)
    gpu_seconds: float = 0.0
    starts: int = 0

    def serving(self, t: float) -> int:
        return sum(at <= t for at in self.ready_at)

    def set(self, t: float, count: int) -> None:
        while len(self.ready_at) < count:
            self.ready_at.append(t + STARTUP_S)
            self.starts += 1
            self.changes.append((t, 1))
        while len(self.ready_at) > count:  # the youngest first: one still starting, if any
            self.ready_at.remove(max(self.ready_at))
            self.changes.append((t, -1))

    def flaps(self) -> int:
        """Groups removed within the stabilization window after a group was added."""
        return self._within(1, -1)

    def readds(self) -> int:
        """Groups added within the stabilization window after a group was removed (the load
        rose again: a burst after a quiet spell; reported, not a flap of the scaler's)."""
        return self._within(-1, 1)

    def _within(self, first: int, then: int) -> int:
        return sum(
            any(0 <= t - before < STABILIZATION_S for before, c in self.changes if c == first)
            for t, change in self.changes
            if change == then
        )


# (t, the last 5 minutes' reading, requests waiting in all groups now, groups now) -> groups
Policy = Callable[[float, Reading | None, float, int], int]


def slo_policy(calibration: Calibration, bounds: ScalingBounds) -> Policy:
    """slo_scaling.evaluate with its status and memory carried from one call to the next, as
    the operator carries them (slo_roles.py)."""
    scaler = Scaler(CONFIG, calibration, "decode", SLO, bounds)
    status: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None

    def decide(t: float, reading: Reading | None, waiting: float, current: int) -> int:
        nonlocal status, memory
        del waiting, current  # the status remembers the count
        decision = evaluate(
            scaler, status, reading, startup_s=STARTUP_S, now=stamp(t), memory=memory
        )
        status, memory = decision.status, decision.memory
        return decision.replicas

    return decide


def hpa_policy(metric: str, target: float, period: int, bounds: ScalingBounds) -> Policy:
    """A reactive target as KEDA or an HPA applies it (docs/scaling.md), on the operator's own
    HPA rules (prefill_scaling's)."""
    spec = PrefillAutoscalingSpec.model_validate(
        {
            **bounds.model_dump(by_alias=True),
            "scaleUpPeriodSeconds": period,
            "target": {"waitingRequestsPerGroup": 1},
        }
    )
    kept: list[tuple[str, int]] = []
    last_change: float | None = None

    def decide(t: float, reading: Reading | None, waiting: float, current: int) -> int:
        nonlocal kept, last_change
        if reading is None:  # no traffic: KEDA reads nothing and keeps the count
            return current
        if metric == "waitingRequestsPerGroup":
            groups = waiting / target
        else:  # decodeRateFloor: serving x floor / p10
            rate = reading.decode_tok_s
            groups = reading.serving_groups * target / rate if rate else float(current)
        rec = recommend(spec, groups, current)
        kept = recommendation_window(
            kept or [(stamp(t), current)],
            stamp(t),
            rec,
            EPOCH + t,
            spec.scale_down_stabilization_seconds,
        )
        free = last_change is None or t - last_change >= period
        wanted, _ = step_towards(current, rec, kept[0][1], free)
        if wanted != current:
            last_change = t
        return wanted

    return decide


def _reading(t: float, load: Load, serving: int, measured: Figures | None) -> Reading:
    return Reading(
        at=stamp(t),
        request_rate_per_s=load.request_rate_per_s,
        prompt_tokens=load.prompt_tokens,
        output_tokens=load.output_tokens,
        prefix_hit_rate=load.prefix_hit_rate,
        serving_groups=serving,
        ttft_s=measured.ttft_s if measured else None,
        decode_tok_s=measured.decode_tok_s if measured else None,
        sessions=load.sessions,
    )


def stamp(t: float) -> str:
    return time.strftime(TIME_FORMAT, time.gmtime(EPOCH + t))


@dataclass(frozen=True)
class Outcome:
    name: str
    minutes: int
    minutes_met: int
    gpu_hours: float
    starts: int
    flaps: int
    readds: int
    peak_groups: int
    missed: list[int]  # the minutes (from the start) that missed the SLO

    def row(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "slo_met_minutes_percent": round(100 * self.minutes_met / self.minutes, 2),
            "gpu_hours": round(self.gpu_hours, 1),
            "group_starts": self.starts,
            "flaps": self.flaps,
            "readds": self.readds,
            "peak_groups": self.peak_groups,
            "missed_minutes": self.missed,
        }


@dataclass
class Day:
    """The trace, the cluster's true speed, and what each minute's load needs on a count."""

    requests: Requests
    truth: Scaler  # the cluster's groups: their speed is not the calibration's
    duration_s: float

    def figures(self, load: Load, groups: int) -> Figures:
        """What the cluster's groups (slower than the autoscaler's calibration says) give."""
        return self.truth.figures(load, groups)

    def met(self, load: Load | None, groups: int) -> bool:
        if load is None:
            return True
        return groups > 0 and SLO.met(self.figures(load, groups))

    def reading(self, t: float, serving: int) -> tuple[Reading | None, float]:
        """The last 5 minutes as Prometheus answers them, measured on the serving groups, and
        the requests waiting in their queues (all sent in the window, when none serves)."""
        load = self.requests.load(t - WINDOW_S, t)
        if load is None:
            return None, 0.0
        if not serving:
            return _reading(t, load, serving, None), load.request_rate_per_s * WINDOW_S
        share = predicted(CONFIG, self.truth.calibration, load, serving)
        waiting = share.waiting(load.request_rate_per_s / serving) * serving
        return _reading(t, load, serving, self.figures(load, serving)), waiting

    def run(self, name: str, policy: Policy | None, static: int = 0) -> Outcome:
        cluster = Cluster()
        cluster.set(-STARTUP_S, static or MIN_GROUPS)  # serving from the start
        minutes = peak = 0
        missed: list[int] = []
        for tick in range(0, math.ceil(self.duration_s), POLL_S):
            serving = cluster.serving(tick)
            if policy is not None:
                reading, waiting = self.reading(tick, serving)
                cluster.set(tick, policy(tick, reading, waiting, len(cluster.ready_at)))
            cluster.gpu_seconds += len(cluster.ready_at) * CONFIG.gpus * POLL_S
            peak = max(peak, len(cluster.ready_at))
            if tick % 60 == 0:
                minutes += 1
                load = self.requests.load(tick, tick + 60)
                if not self.met(load, min(serving, cluster.serving(tick + 59))):
                    missed.append(tick // 60)
        gpu_hours = cluster.gpu_seconds / 3600
        return Outcome(name, minutes, minutes - len(missed), gpu_hours, cluster.starts,
                       cluster.flaps(), cluster.readds(), peak, missed)  # fmt: skip

    def static_count(self) -> int:
        """The fewest groups meeting the SLO at every minute's load (the busiest minutes first)."""
        loads = [self.requests.load(m, m + 60) for m in range(0, math.ceil(self.duration_s), 60)]
        busiest = sorted((x for x in loads if x), key=lambda x: -x.request_rate_per_s)
        count = 1
        for load in busiest:
            while count < MAX_GROUPS and not self.met(load, count):
                count += 1
        return count


def reactive_settings(quick: bool) -> list[tuple[str, float, int]]:
    """The targets and scale-up periods swept: the quick run's one of each target."""
    waiting = (1,) if quick else (1, 2, 4)
    floors = (1.0,) if quick else (1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5)
    periods = (SCALE_UP_PERIOD_S,) if quick else (60, 300, SCALE_UP_PERIOD_S)
    assert SLO.decode_tokens_per_s is not None
    targets = [("waitingRequestsPerGroup", float(w)) for w in waiting] + [
        ("decodeRateFloor", SLO.decode_tokens_per_s * f) for f in floors
    ]
    return [(f"{name}={value:g} period={p}", value, p) for name, value in targets for p in periods]


def best_reactive(slo: Outcome, reactive: Sequence[Outcome]) -> Outcome:
    """The fewest GPU-hours of those meeting the SLO as often as `slo`; else the most often met."""
    as_often = [o for o in reactive if o.minutes_met >= slo.minutes_met]
    if as_often:
        return min(as_often, key=lambda o: o.gpu_hours)
    return max(reactive, key=lambda o: (o.minutes_met, -o.gpu_hours))


def truth(calibration: Calibration) -> Calibration:
    """The cluster's speed: decode steps `DECODE_SLOWER` and prefill `PREFILL_SLOWER` times
    what `calibration` says (not one factor: the autoscaler's correction is one)."""
    costs = calibration.costs
    return replace(
        calibration,
        name=f"{calibration.name} (decode x{DECODE_SLOWER:g}, prefill x{PREFILL_SLOWER:g})",
        costs=replace(
            costs,
            ordinary=scaled(costs.ordinary, DECODE_SLOWER),
            fast=scaled(costs.fast, DECODE_SLOWER) if costs.fast else None,
            prefill=scaled(costs.prefill, PREFILL_SLOWER),
        ),
    )


def evaluation(entries: list[TraceEntry], quick: bool) -> dict[str, Any]:
    requests = Requests.of(entries)
    calibration = builtin_calibration(CONFIG.gpus, CONFIG.backend, CONFIG.draft_tokens)
    bounds = ScalingBounds.model_validate(
        {
            "minReplicas": MIN_GROUPS,
            "maxReplicas": MAX_GROUPS,
            "scaleUpPeriodSeconds": SCALE_UP_PERIOD_S,
            "scaleDownStabilizationSeconds": STABILIZATION_S,
        }
    )
    day = Day(requests, Scaler(CONFIG, truth(calibration), "decode", SLO, bounds),
              requests.starts[-1] + 60)  # fmt: skip
    began = time.process_time()
    slo = day.run("slo", slo_policy(calibration, bounds))
    slo_cpu_s = time.process_time() - began
    reactive = [
        day.run(name, hpa_policy(name.split("=")[0], target, period, bounds))
        for name, target, period in reactive_settings(quick)
    ]
    static = day.static_count()
    peak = day.run(f"static {static} groups", None, static)
    best = best_reactive(slo, reactive)
    return {
        "trace": {"requests": len(requests.plan), "hours": round(day.duration_s / 3600, 2)},
        "slo": {
            "ttft_seconds_p90": SLO.ttft_seconds,
            "decode_tokens_per_s_p90": SLO.decode_tokens_per_s,
        },
        "startup_s": STARTUP_S,
        "cluster_against_calibration": {"decode": DECODE_SLOWER, "prefill": PREFILL_SLOWER},
        "slo_policy_cpu_s": round(slo_cpu_s, 1),
        "rows": [slo.row(), {**best.row(), "policy": f"best reactive: {best.name}"}, peak.row()],
        "reactive_sweep": [o.row() for o in reactive],
        "slo_gpu_hours_vs_static": round(slo.gpu_hours / peak.gpu_hours, 3),
        "slo_gpu_hours_vs_best_reactive": round(slo.gpu_hours / best.gpu_hours, 3),
    }


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"{'policy':<52} {'SLO met %':>9} {'GPU-h':>8} {'starts':>6} {'flaps':>5} "
        f"{'re-adds':>7} {'peak':>4}"
    ]
    lines += [
        f"{r['policy']:<52} {r['slo_met_minutes_percent']:>9.2f} {r['gpu_hours']:>8.1f} "
        f"{r['group_starts']:>6} {r['flaps']:>5} {r['readds']:>7} {r['peak_groups']:>4}"
        for r in rows
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", help="a trace in bench's format instead of the day")
    parser.add_argument("--write-trace", help="write the day's trace (bench's format) here")
    parser.add_argument("--compression", type=float, default=3.0, help="a day in 24/N hours")
    parser.add_argument("--peak-sessions", type=float, default=PEAK_SESSIONS_PER_MIN)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="fewer reactive settings")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    if args.trace:
        entries = load_trace(args.trace)
    else:
        entries = day_trace(args.seed, args.compression, args.peak_sessions)
        if args.write_trace:
            Path(args.write_trace).write_text(dump_trace(entries), encoding="utf-8")
    result = evaluation(entries, args.quick)
    result["source"] = args.trace or f"day (seed {args.seed}, compressed {args.compression:g}x)"
    print("\n".join(table(result["rows"])))
    print(
        f"slo: {result['slo_gpu_hours_vs_static']:.0%} of the static count's GPU-hours, "
        f"{result['slo_gpu_hours_vs_best_reactive']:.0%} of the best reactive setting's"
    )
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
