"""What `plan` writes: plan.json, report.md, a plot, and each configuration's results.json.

Each configuration's `summary` has bench's summary keys (it is bench's `Summary`), and its folder
holds a results.json that `bench compare` sets beside a measured run.
"""

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import Any

from kimi_operator.bench.report import markdown_table, ms, num, pct, usd
from kimi_operator.bench.results import Results, TraceInfo
from kimi_operator.bench.stats import percentile
from kimi_operator.plan import PlanError
from kimi_operator.plan.calibration import Calibration
from kimi_operator.plan.configs import MAX_GROUPS, Configuration
from kimi_operator.plan.crossover import Crossover, Figures, Point
from kimi_operator.plan.memory import Fit
from kimi_operator.plan.predict import kv_transfer
from kimi_operator.plan.side_by_side import SideBySide

PLAN, REPORT, PLOT = "plan.json", "report.md", "plan.png"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Planned:
    config: Configuration
    calibration: Calibration
    results: Results
    groups_for_target: int | None = None  # with --target: fewest groups that meet it
    memory: Fit | None = None  # GB300 shapes: the trace's open sessions against HBM
    prefill_calibration: Calibration | None = None  # disaggregated: None, the decode role's
    aiconfigurator: tuple[SideBySide, ...] = ()  # GB300 built-ins: AIConfigurator's estimates


@dataclass(frozen=True)
class Disaggregation:
    """What the report says of the disaggregated configurations: which calibration priced each
    one's prefill groups, and each one against its aggregated twin over concurrency."""

    calibrations: list[str]
    crossovers: list[Crossover]


def decode_p10(results: Results) -> float | None:
    """The decode rate the slowest-served 10% of requests get at most (p10 per user)."""
    rates = sorted(r.decode_tokens_per_s for r in results.requests if r.decode_tokens_per_s)
    return percentile(rates, 10) if rates else None


def _entry(planned: Planned, target: str | None) -> dict[str, Any]:
    summary = planned.results.summary
    tasks = summary.tasks
    entry: dict[str, Any] = {
        "name": planned.config.name,
        "configuration": planned.config.model_dump(mode="json", by_alias=True),
        "calibration": planned.calibration.name,
        "gpus": planned.results.config.gpus,
        "fast_path_fraction": summary.server_metrics.fast_path_fraction,
        "decode_tokens_per_s_p10": decode_p10(planned.results),
        "cost_per_task_usd": tasks.cost_per_task_usd if tasks else None,
        "cost_per_million_output_tokens_usd": summary.cost_per_million_output_tokens_usd,
    }
    entry["memory"] = asdict(planned.memory) if planned.memory else None
    if planned.config.disaggregated is not None:
        prefill = planned.prefill_calibration
        entry["prefill_calibration"] = (prefill or planned.calibration).name
        entry["kv_transfer"] = asdict(kv_transfer(planned.config, planned.calibration, prefill))
    if planned.aiconfigurator:
        entry["aiconfigurator"] = [asdict(row) for row in planned.aiconfigurator]
    if target is not None:
        entry["groups_for_target"] = planned.groups_for_target  # None: not met with MAX_GROUPS
    entry["summary"] = summary.model_dump(mode="json")
    return entry


def _calibration_entry(calibration: Calibration) -> dict[str, Any]:
    body = asdict(calibration)
    body["costs"] = asdict(calibration.costs)
    return body


def _groups(planned: Planned, target: str | None) -> str:
    if target is None:
        return "-"
    found = planned.groups_for_target
    return f"> {MAX_GROUPS}" if found is None else str(found)


def _sessions(memory: Fit | None) -> str:
    if memory is None:
        return "-"
    return f"{memory.sessions_held} / {memory.open_sessions_per_group}" + (
        "" if memory.fits else " (do not fit)"
    )


def table_rows(planned: list[Planned], target: str | None) -> list[list[str]]:
    rows = []
    for item in planned:
        s = item.results.summary
        t = s.tasks
        completion = t.completion_s if t else None
        rows.append(
            [
                item.config.name,
                str(item.results.config.gpus),
                ms(s.ttft_s.p50 if s.ttft_s else None),
                ms(s.ttft_s.p90 if s.ttft_s else None),
                num(s.decode_tokens_per_s.p50 if s.decode_tokens_per_s else None),
                num(decode_p10(item.results)),
                ms(s.itl_s.p50 if s.itl_s else None),
                num(completion.p50 if completion else None, 2),
                num(completion.p90 if completion else None, 2),
                num(t.tasks_per_hour if t else None),
                pct(s.server_metrics.fast_path_fraction),
                usd(t.cost_per_task_usd if t else None),
                usd(s.cost_per_million_output_tokens_usd),
                _sessions(item.memory),
                _groups(item, target),
            ]
        )
    return rows


HEADER = [
    "configuration",
    "GPUs",
    "TTFT p50 (ms)",
    "TTFT p90 (ms)",
    "decode tok/s p50",
    "decode tok/s p10",
    "ITL p50 (ms)",
    "task p50 (s)",
    "task p90 (s)",
    "tasks/h",
    "fast path",
    "$/task",
    "$/1M out",
    "sessions held / open",
    "groups for target",
]


def _transfer(planned: Planned) -> str:
    transfer = kv_transfer(planned.config, planned.calibration, planned.prefill_calibration)
    return (
        f"{planned.config.name}: KV hand-over {transfer.fixed_s * 1e3:.3f} ms + "
        f"{transfer.per_token_s * 1e9:.1f} ns a token the decode group does not hold "
        f"({transfer.source})"
    )


def _pair(a: float | None, b: float | None, show: Callable[[float | None], str]) -> str:
    return f"{show(a)} / {show(b)}"


def crossover_section(planned: list[Planned], disaggregation: Disaggregation) -> str:
    """report.md's comparison: each crossover's line and its table, and what priced what."""
    if not disaggregation.crossovers:
        return ""
    lines = ["## Disaggregated against aggregated", ""]
    lines += [f"- {said}" for said in disaggregation.calibrations]
    lines += [f"- {_transfer(p)}" for p in planned if p.config.disaggregated is not None]
    header = [
        "sessions",
        "task p50 (s) disagg / agg",
        "task p90 (s) disagg / agg",
        "$/task disagg / agg",
        "TTFT p50 (ms) disagg / agg",
        "fast path disagg / agg",
    ]
    for crossover in disaggregation.crossovers:
        rows = [
            [
                str(p.sessions),
                _pair(*_both(p, "task_completion_p50_s"), partial(num, digits=2)),
                _pair(*_both(p, "task_completion_p90_s"), partial(num, digits=2)),
                _pair(*_both(p, "cost_per_task_usd"), usd),
                _pair(*_both(p, "ttft_p50_s"), ms),
                _pair(*_both(p, "fast_path_fraction"), pct),
            ]
            for p in crossover.points
        ]
        lines += ["", f"**{crossover.line()}.**", "", markdown_table(rows, header)]
    return "\n".join(lines) + "\n\n"


def aiconfigurator_section(planned: list[Planned]) -> str:
    """report.md's GB300 built-ins beside AIConfigurator: where the published figures and the
    data meet, and each configuration's points (`side_by_side`)."""
    rows = [
        [
            item.config.name,
            str(row.batch),
            f"{row.prompt_tokens:,} / {row.output_tokens:,}",
            _pair(row.plan_ttft_s, row.aiconfigurator_ttft_s, ms),
            _pair(row.plan_step_s, row.aiconfigurator_step_s, ms),
            _pair(row.plan_tpot_s, row.aiconfigurator_tpot_s, ms),
            ("fast" if row.plan_fast_path else "ordinary")
            + (f"; AIConfigurator: {row.unavailable}" if row.unavailable else ""),
        ]
        for item in planned
        for row in item.aiconfigurator
    ]
    if not rows:
        return ""
    notes = dict.fromkeys(
        note for item in planned if item.aiconfigurator for note in item.calibration.notes
    )
    header = [
        "configuration",
        "batch",
        "prompt / output tokens",
        "TTFT (ms) plan / AIConfigurator",
        "decode step (ms) plan / AIConfigurator",
        "TPOT (ms) plan / AIConfigurator",
        "plan's decode path",
    ]
    lines = [
        "## GB300 built-ins beside AIConfigurator",
        "",
        *(f"- {note}" for note in notes),
        "",
        "The trace's mean prompt and output at batch 1 and at maxNumSeqs: the plan's step model "
        "at that point beside AIConfigurator's aggregated estimate (stock vLLM, no fast path; its "
        "TPOT above batch 1 includes the batch's prefill steps, its step is a generation-only "
        "one). The plan's TTFT is a lone request's.",
        "",
        markdown_table(rows, header),
    ]
    return "\n".join(lines) + "\n\n"


def _both(point: Point, key: str) -> tuple[float | None, float | None]:
    value: Callable[[Figures], float | None] = attrgetter(key)
    return value(point.disaggregated), value(point.aggregated)


def write_plan(
    directory: Path,
    planned: list[Planned],
    trace: TraceInfo,
    price: float,
    target: str | None,
    *,
    disaggregation: Disaggregation | None = None,
) -> list[str]:
    """Write everything; returns notes for the user (a plot that could not be drawn)."""
    disaggregation = disaggregation or Disaggregation([], [])
    calibrations = [p.calibration for p in planned] + [
        p.prefill_calibration for p in planned if p.prefill_calibration is not None
    ]
    body = {
        "schema_version": SCHEMA_VERSION,
        "trace": trace.model_dump(mode="json"),
        "gpu_hour_price_usd": price,
        "target": target,
        "calibrations": [_calibration_entry(c) for c in {c.name: c for c in calibrations}.values()],
        "configurations": [_entry(p, target) for p in planned],
        "disaggregation": {
            "calibrations": disaggregation.calibrations,
            "crossovers": [c.as_json() for c in disaggregation.crossovers],
        },
    }
    table = markdown_table(table_rows(planned, target), HEADER)
    report = (
        "# kimi-operator plan\n\n"
        f"Trace `{trace.source}` ({trace.entries} entries, sha256 {trace.sha256[:12]}), "
        f"${price:.2f} per GPU-hour. Modelled, not measured: each configuration's step costs come "
        "from its calibration (see plan.json). The first configuration is the calibrated "
        "deployment itself when a calibration run was given.\n\n"
        f"{table}\n\n{crossover_section(planned, disaggregation)}"
        f"{aiconfigurator_section(planned)}"
        f"![task completion and cost per task]({PLOT})\n"
    )
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / PLAN).write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
        (directory / REPORT).write_text(report, encoding="utf-8")
        for item in planned:
            folder = directory / item.config.name
            folder.mkdir(exist_ok=True)
            (folder / "results.json").write_text(item.results.model_dump_json(), encoding="utf-8")
    except OSError as error:
        raise PlanError(f"cannot write to {directory}: {error.strerror or error}") from None
    return _plot(directory / PLOT, planned)


def _plot(path: Path, planned: list[Planned]) -> list[str]:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ModuleNotFoundError:
        return ["plot skipped: matplotlib is missing (pip install 'kimi-operator[bench]')"]
    names = [p.config.name for p in planned]
    tasks = [p.results.summary.tasks for p in planned]
    p50 = [t.completion_s.p50 if t and t.completion_s else 0.0 for t in tasks]
    p90 = [t.completion_s.p90 if t and t.completion_s else 0.0 for t in tasks]
    cost = [t.cost_per_task_usd or 0.0 if t else 0.0 for t in tasks]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    positions = range(len(names))
    left.bar([x - 0.2 for x in positions], p50, width=0.4, label="p50")
    left.bar([x + 0.2 for x in positions], p90, width=0.4, label="p90")
    left.set_title("Task completion (s), modelled")
    left.legend()
    right.bar(list(positions), cost)
    right.set_title("$ per completed task, modelled")
    for axis in (left, right):
        axis.set_xticks(list(positions), names, rotation=30, ha="right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return []
