"""`kimi-operator plan`: arguments and the command.

Imports only the standard library at module level, like bench's: registering the subcommand must
not slow down `kimi-operator validate`.
"""

import argparse
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from kimi_operator.bench.results import Results
    from kimi_operator.plan.calibration import Calibration
    from kimi_operator.plan.configs import Configuration
    from kimi_operator.plan.costs import StepCosts
    from kimi_operator.plan.crossover import Crossover
    from kimi_operator.plan.memory import Fit
    from kimi_operator.plan.predict import Workload
    from kimi_operator.plan.report import Planned

AS_MEASURED = "as-measured"
EXIT_OK, EXIT_BAD_INPUT = 0, 2
MAX_DRAFTS = 7
MAX_SESSIONS = 1024


def _price(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of USD: {text}")
    return value


def _sessions(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of session counts: {text!r}") from None
    if not all(0 < count <= MAX_SESSIONS for count in counts):
        raise argparse.ArgumentTypeError(f"session counts are 1..{MAX_SESSIONS}: {text}")
    return counts


def add_plan_parser(sub: Any) -> None:
    plan = sub.add_parser(
        "plan",
        help="model what a trace costs on configurations that do not exist yet",
        description=(
            "Replay an agent trace through a step model of vLLM's scheduler with step costs "
            "from `bench --profile calibration` runs or built-in GB300 figures, and write the "
            "same figures bench measures, per configuration. Exit 0: plan written; 2: bad input."
        ),
    )
    plan.add_argument("--trace", metavar="FILE", required=True, help="agent trace (JSONL)")
    plan.add_argument(
        "--calibration",
        metavar="RUN[,RUN...]",
        action="append",
        default=[],
        help="a `bench --profile calibration` results directory (repeatable); the first is "
        "also planned as measured. Several sweeps of one deployment joined by commas "
        "(RUN,RUN,...) fit as one calibration, named after the first: their repeats pooled",
    )
    plan.add_argument(
        "--prefill-calibration",
        metavar="RUN[,RUN...]",
        help="a calibration of a prefill group (as --calibration): prices the prefill groups of "
        "disaggregated configurations on as many GPUs (default: their decode role's calibration)",
    )
    plan.add_argument(
        "--concurrency",
        type=_sessions,
        metavar="N[,N...]",
        help="concurrent sessions at which each disaggregated configuration is set against its "
        "aggregated twin (default: 1,2,4,...,64)",
    )
    _drafts_argument(plan)
    plan.add_argument(
        "--config",
        metavar="FILE",
        action="append",
        default=[],
        help="configurations: descriptions or KimiDeployments (YAML; repeatable)",
    )
    plan.add_argument(
        "--gpu-hour-price", type=_price, metavar="USD", required=True, help="per GPU-hour"
    )
    plan.add_argument("--output", metavar="DIR", required=True, help="plan.json, report.md, plot")
    plan.add_argument("--force", action="store_true", help="overwrite a plan in --output")
    plan.add_argument(
        "--replay",
        choices=("open", "closed"),
        help="as bench's (default: closed when the trace has dependencies)",
    )
    plan.add_argument(
        "--target",
        metavar="METRIC=S",
        help="find the fewest groups meeting e.g. task_completion_p90=600 or ttft_p50=2",
    )
    plan.add_argument(
        "--emit-spec",
        metavar="FILE",
        help="with --target: write the KimiDeployment that meets it at the lowest cost per "
        "completed task (validated; metadata and weight sources from a KimiDeployment in --config)",
    )
    plan.set_defaults(run=cmd_plan)
    export = sub.add_parser(
        "export-calibration",
        help="write a calibration run's fitted step costs as a document to store for a "
        "deployment (its SLO scaler sizes on it)",
        description=(
            "Fit `bench --profile calibration` runs of one deployment, as plan's --calibration "
            "does, and write the fit as a versioned JSON document: put it in a ConfigMap named "
            "by spec.autoscaling.slo.calibration (docs/scaling.md), or into it (--config-map). "
            "Exit 0: written; 2: bad input, or the ConfigMap not written."
        ),
    )
    export.add_argument(
        "--calibration",
        metavar="RUN[,RUN...]",
        required=True,
        help="a `bench --profile calibration` results directory; sweeps of one deployment "
        "joined by commas fit as one calibration",
    )
    _drafts_argument(export)
    where = export.add_mutually_exclusive_group(required=True)
    where.add_argument("--output", metavar="FILE", help="the document (JSON)")
    where.add_argument(
        "--config-map",
        metavar="NAMESPACE/NAME[:KEY]",
        help="write the document into this ConfigMap's key (default calibration.json), creating "
        "the ConfigMap or updating the key (kubeconfig, else the pod's service account)",
    )
    export.add_argument("--force", action="store_true", help="overwrite --output")
    export.set_defaults(run=cmd_export_calibration)


def _drafts_argument(parser: Any) -> None:
    parser.add_argument(
        "--calibration-drafts",
        type=int,
        choices=range(MAX_DRAFTS + 1),
        metavar="N",
        help="draft tokens of the calibrated deployment (needed when it speculates)",
    )


def cmd_plan(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from kimi_operator.bench import BenchError  # noqa: PLC0415
    from kimi_operator.plan import PlanError  # noqa: PLC0415

    try:
        return _plan(args, out, err)
    except (BenchError, PlanError) as error:
        print(f"error: {error}", file=err)
        return EXIT_BAD_INPUT


def cmd_export_calibration(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from kimi_operator.bench import BenchError  # noqa: PLC0415
    from kimi_operator.bench.config_map import parse_target, write  # noqa: PLC0415
    from kimi_operator.plan import PlanError  # noqa: PLC0415
    from kimi_operator.plan.stored import document  # noqa: PLC0415

    try:
        if args.config_map is not None and args.force:
            raise PlanError("--force goes with --output")
        target = None if args.config_map is None else parse_target(args.config_map)
        calibration = _calibration("--calibration", args.calibration, args.calibration_drafts)
        text = document(calibration) + "\n"
        if target is not None:
            namespace, name, key = target
            where = f"ConfigMap {namespace}/{name} {write(*target, text)}, key {key}"
        else:
            path = Path(args.output)
            if path.exists() and not args.force:
                raise PlanError(f"--output {path} exists: give --force to overwrite it")
            path.write_text(text)
            where = str(path)
    except (BenchError, PlanError) as error:
        print(f"error: {error}", file=err)
        return EXIT_BAD_INPUT
    except OSError as error:
        print(f"error: --output {args.output}: {error.strerror or error}", file=err)
        return EXIT_BAD_INPUT
    for note in calibration.notes:
        print(f"note: {note}", file=err)
    out.write(
        f"calibration {calibration.name} ({calibration.gpus} GPUs, {calibration.backend}, "
        f"{calibration.draft_tokens} drafts): {where}, {len(text)} bytes\n"
    )
    return EXIT_OK


def _calibration(flag: str, argument: str, drafts: int | None) -> "Calibration":
    from kimi_operator.bench.report import load_results  # noqa: PLC0415
    from kimi_operator.plan import PlanError  # noqa: PLC0415
    from kimi_operator.plan.calibration import from_runs  # noqa: PLC0415

    paths = [path for path in argument.split(",") if path]
    if not paths:
        raise PlanError(f"{flag} {argument!r}: give a calibration run's directory")
    again = sorted({path for path in paths if paths.count(path) > 1})
    if again:
        raise PlanError(f"{flag} {argument}: {', '.join(again)} pooled twice")
    runs = [(path, load_results(path)) for path in paths]
    first = Path(paths[0])
    name = (first.name if first.is_dir() else first.parent.name) or paths[0]
    calibration = from_runs(runs, name, drafts)
    if calibration.gpus is None:
        raise PlanError(f"{paths[0]}: the run has no GPU count: rerun bench with --gpus N")
    return calibration


def _calibrations(args: argparse.Namespace) -> "list[Calibration]":
    """The --calibration runs, then the --prefill-calibration run (last; never a decode role's)."""
    from kimi_operator.plan import PlanError  # noqa: PLC0415

    flags = [("--calibration", argument) for argument in args.calibration]
    if args.prefill_calibration is not None:
        flags.append(("--prefill-calibration", args.prefill_calibration))
    calibrations: list[Calibration] = []
    for flag, argument in flags:
        calibration = _calibration(flag, argument, args.calibration_drafts)
        if any(c.name == calibration.name for c in calibrations):
            raise PlanError(f"{argument}: another calibration is also named {calibration.name!r}")
        calibrations.append(calibration)
    return calibrations


def _prefill_calibration(
    config: "Configuration", decode: "Calibration", prefill: "Calibration | None"
) -> "tuple[Calibration | None, str | None]":
    """A disaggregated configuration's prefill role's calibration (None: the decode role's),
    and what the report says of it."""
    if config.disaggregated is None:
        return None, None
    if prefill is not None and prefill.gpus == config.gpus:
        return prefill, (
            f"{config.name}: prefill groups priced by {prefill.name} (--prefill-calibration)"
        )
    why = (
        "no --prefill-calibration"
        if prefill is None
        else f"--prefill-calibration {prefill.name} is of {prefill.gpus} GPUs, not {config.gpus}"
    )
    return None, (
        f"{config.name}: prefill groups priced by the decode role's calibration {decode.name} "
        f"({why})"
    )


def as_measured(calibration: "Calibration") -> "Configuration":
    """The deployment a calibration measured, as it runs: the server's own settings where it
    reported them, else the defaults (plan's first configuration, `as-measured`)."""
    from kimi_operator.plan.configs import Configuration  # noqa: PLC0415

    served = {
        "max_num_batched_tokens": calibration.max_num_batched_tokens,
        "prefix_caching": calibration.prefix_caching,
    }
    return Configuration.model_validate(
        {
            "name": AS_MEASURED,
            "gpus": calibration.gpus or 1,
            "backend": "latency_specialized"
            if calibration.backend == "latency_specialized"
            else "auto",
            "draft_tokens": calibration.draft_tokens,
            "max_num_seqs": calibration.max_num_seqs,
            "calibration": calibration.name,
        }
        | {key: value for key, value in served.items() if value is not None}
    )


def _configurations(
    args: argparse.Namespace, measured: "list[Calibration]"
) -> "list[Configuration]":
    from kimi_operator.plan import PlanError  # noqa: PLC0415
    from kimi_operator.plan.configs import load_configurations, what_ifs  # noqa: PLC0415

    configurations = [as_measured(measured[0])] if measured else []
    for path in args.config:
        configurations += load_configurations(path)
    if measured and not args.config:
        configurations += what_ifs(measured[0].draft_tokens)
    if not configurations:
        raise PlanError("plan needs --calibration RUN or --config FILE (or both)")
    names = [c.name for c in configurations]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise PlanError(f"configuration names must differ: {', '.join(repeated)} repeats")
    return configurations


def _calibration_for(config: "Configuration", measured: "list[Calibration]") -> "Calibration":
    from kimi_operator.plan import PlanError  # noqa: PLC0415
    from kimi_operator.plan.builtin import GPUS, builtin_calibration, named_builtin  # noqa: PLC0415

    if config.calibration is not None:
        for calibration in measured:
            if calibration.name == config.calibration:
                return calibration
        builtin = named_builtin(config.calibration)
        if builtin is not None:
            return builtin
        raise PlanError(
            f"configuration {config.name!r}: calibration {config.calibration!r} is neither a "
            "--calibration run's name nor a built-in (gb300-tp<8|16>-<backend>-<dspark<N>|nodraft>)"
        )
    for calibration in measured:
        if calibration.gpus == config.gpus:
            return calibration
    if config.gpus in GPUS:
        return builtin_calibration(config.gpus, config.backend, config.draft_tokens)
    raise PlanError(
        f"configuration {config.name!r}: no calibration for {config.gpus} GPUs: give a "
        "--calibration run measured on it (built-ins cover GB300 TP8 and TP16)"
    )


def _memory(config: "Configuration", results: "Results", costs: "StepCosts") -> "Fit | None":
    """The trace's open sessions against a GB300 group's HBM (8 or 16 GPUs: Kimi K3's shapes)."""
    from kimi_operator.plan.emit import GROUP_GPUS  # noqa: PLC0415
    from kimi_operator.plan.memory import fit, longest_context, open_sessions  # noqa: PLC0415

    if config.gpus not in GROUP_GPUS:
        return None
    sessions = open_sessions(results)
    return fit(config.gpus, longest_context(results), sessions, config.replicas, costs)


def _tier_note(name: str, gpus: int, memory: "Fit") -> str:
    """What a CPU tier for the sessions HBM does not hold takes, and what it saves a returning
    turn; whether a GB300 tray can hold it (docs/kv-cache.md)."""
    from kimi_operator.api.host_memory import GIB, TRAY_BUDGET_BYTES  # noqa: PLC0415

    # The default sharedMemory (64Gi) beside the tier's /dev/shm file of the whole group.
    most = (TRAY_BUDGET_BYTES - 64 * GIB) // gpus // GIB
    room = "" if memory.tier_per_gpu_gib <= most else f", more than a tray allows ({most}Gi)"
    return (
        f"note: {name}: spec.kvCache.cpuOffload.perGPU {memory.tier_per_gpu_gib}Gi would hold "
        f"the other {memory.sessions_in_tier} in the CPU tier{room}; a returning turn of "
        f"{memory.longest_context_tokens} tokens then loads in about "
        f"{memory.returning_from_tier_s:.2f} s (assumed C2C rate) instead of "
        f"{memory.returning_recomputed_s:.2f} s of prefill"
    )


def _say_of_calibration(
    config: "Configuration",
    calibration: "Calibration",
    said: set[str],
    err: TextIO,
    longest_prompt: int,
) -> None:
    """The calibration's notes (once a plan: configurations share calibrations), whether it
    measured prompts as long as the trace's, and whether it prices this configuration's fast
    path."""
    notes = list(calibration.notes)
    measured = calibration.longest_prompt
    if measured is not None and longest_prompt > measured:
        notes.append(
            f"{calibration.name} measured prompts of up to {measured} tokens and the trace's "
            f"reach {longest_prompt}: their prefill is extrapolated (calibrate with "
            f"--prompt-tokens {longest_prompt} or more)"
        )
    for note in notes:
        if note not in said:
            said.add(note)
            print(f"note: {note}", file=err)
    if config.backend == "latency_specialized" and calibration.costs.fast is None:
        print(
            f"note: {config.name}: calibration {calibration.name} has no fast-path figures: "
            "every step is modelled on the ordinary path",
            file=err,
        )


def _say_of_memory(config: "Configuration", memory: "Fit", err: TextIO) -> None:
    print(
        f"note: {config.name}: up to {memory.open_sessions_per_group} sessions are open "
        f"per group and a group holds {memory.sessions_held} of the trace's longest "
        f"context ({memory.longest_context_tokens} tokens) in HBM: the prefix cache "
        "would evict, so the plan's cache hits are optimistic",
        file=err,
    )
    print(_tier_note(config.name, config.gpus, memory), file=err)


def _crossover(
    item: "Planned", planned: "list[Planned]", workload: "Workload", concurrency: list[int]
) -> "Crossover":
    """A disaggregated configuration against its aggregated twin (a planned one where the plan
    has it under another name) at each number of concurrent sessions."""
    from kimi_operator.plan.configs import aggregated  # noqa: PLC0415
    from kimi_operator.plan.crossover import at_concurrency, sweep  # noqa: PLC0415
    from kimi_operator.plan.predict import predict, total_gpus  # noqa: PLC0415

    config = item.config
    twin = aggregated(config)
    same = twin.model_dump(exclude={"name"})
    for other in planned:
        if other.config.model_dump(exclude={"name"}) == same:
            twin = other.config

    def predict_at(disaggregated: bool, sessions: int) -> "Results":
        scaled = replace(workload, plan=at_concurrency(workload.plan, sessions))
        chosen = config if disaggregated else twin
        return predict(chosen, item.calibration, scaled, item.prefill_calibration)

    return sweep((config.name, twin.name), total_gpus(config), concurrency, predict_at)


def _plan(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from kimi_operator.bench.report import prepare_output, text_table  # noqa: PLC0415
    from kimi_operator.bench.results import TraceInfo  # noqa: PLC0415
    from kimi_operator.bench.traces import (  # noqa: PLC0415
        has_dependencies,
        load_trace,
        plan_trace,
        trace_digest,
    )
    from kimi_operator.plan import PlanError  # noqa: PLC0415
    from kimi_operator.plan.crossover import DEFAULT_CONCURRENCY  # noqa: PLC0415
    from kimi_operator.plan.emit import choose, manifest, template, write_spec  # noqa: PLC0415
    from kimi_operator.plan.predict import Workload, predict  # noqa: PLC0415
    from kimi_operator.plan.report import (  # noqa: PLC0415
        HEADER,
        PLAN,
        REPORT,
        Disaggregation,
        Planned,
        table_rows,
        write_plan,
    )
    from kimi_operator.plan.side_by_side import side_by_side  # noqa: PLC0415
    from kimi_operator.plan.target import fewest_groups, parse_target  # noqa: PLC0415

    target = parse_target(args.target) if args.target else None
    if args.emit_spec and target is None:
        raise PlanError("--emit-spec needs --target: the spec written is the one that meets it")
    entries = load_trace(args.trace)
    measured = _calibrations(args)
    prefill_run = measured.pop() if args.prefill_calibration is not None else None
    configurations = _configurations(args, measured)
    if args.concurrency and not any(c.disaggregated for c in configurations):
        raise PlanError(
            "--concurrency sets disaggregated configurations against aggregated ones: none is "
            "planned (add one with disaggregated: in --config)"
        )
    directory = Path(args.output)
    prepare_output(directory, args.force)
    replay = args.replay or ("closed" if has_dependencies(entries) else "open")
    workload = Workload(
        plan=plan_trace(entries, None),
        closed=replay == "closed",
        trace=TraceInfo(
            source=args.trace, sha256=trace_digest(entries), entries=len(entries), seed=None
        ),
        gpu_hour_price_usd=args.gpu_hour_price,
    )
    planned: list[Planned] = []
    said: list[str] = []  # what report.md says of the prefill roles' calibrations
    noted: set[str] = set()  # the calibrations' notes already on stderr
    for config in configurations:
        calibration = _calibration_for(config, measured)
        prefill, saying = _prefill_calibration(config, calibration, prefill_run)
        if saying is not None:
            said.append(saying)
            print(f"note: {saying}", file=err)
        _say_of_calibration(
            config, calibration, noted, err, max(r.prompt_tokens for r in workload.plan)
        )
        groups = None
        if target is not None:
            modelled = partial(predict, calibration=calibration, workload=workload, prefill=prefill)
            groups = fewest_groups(config, target, modelled)
        results = predict(config, calibration, workload, prefill)
        memory = _memory(config, results, calibration.costs)
        if memory is not None and not memory.fits:
            _say_of_memory(config, memory, err)
        planned.append(
            Planned(
                *(config, calibration, results, groups, memory, prefill),
                tuple(side_by_side(config, calibration, results)),
            )
        )
    crossovers = [
        _crossover(item, planned, workload, args.concurrency or list(DEFAULT_CONCURRENCY))
        for item in planned
        if item.config.disaggregated is not None
    ]
    for note in write_plan(
        directory,
        planned,
        workload.trace,
        args.gpu_hour_price,
        str(target) if target else None,
        disaggregation=Disaggregation(said, crossovers),
    ):
        print(note, file=err)
    out.write(text_table(table_rows(planned, str(target) if target else None), HEADER) + "\n")
    for crossover in crossovers:
        out.write(f"\n{crossover.line()}\n")
    out.write(f"\nplan: {directory / PLAN}, {directory / REPORT}\n")
    if args.emit_spec:
        choice = choose(
            planned,
            lambda item, groups: predict(
                item.config.model_copy(update={"replicas": groups}),
                item.calibration,
                workload,
                item.prefill_calibration,
            ),
        )
        write_spec(Path(args.emit_spec), manifest(choice, template(args.config)), choice.why)
        out.write(f"spec: {args.emit_spec}: {choice.why}\n")
    return EXIT_OK
