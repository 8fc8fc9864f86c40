"""`kimi-operator bench`, `bench compare A B` and `bench trace`: arguments and commands.

Imports only the standard library at module level: registering the subcommand must not slow down
or widen `kimi-operator validate`.
"""

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

from kimi_operator.bench import BenchError

if TYPE_CHECKING:
    from kimi_operator.bench.profiles import PlannedRequest
    from kimi_operator.bench.results import Replay
    from kimi_operator.bench.runner import RunOptions

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
EXIT_INTERRUPTED = 130  # as shells report SIGINT
BENCH_EXTRA = frozenset({"aiohttp", "matplotlib"})  # pyproject.toml's `bench` extra
PROFILES = ("headline", "long-context", "agentic", "calibration")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def _non_negative_int(text: str) -> int:
    return 0 if text.strip() == "0" else _positive_int(text)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text}")
    return value


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be 0 to 1: {text}")
    return value


def _trace_url(text: str) -> str:
    """The rule of spec.observability.tracing.uiUrl, which a deployment gives in its place."""
    import re  # noqa: PLC0415

    from kimi_operator.api.constants import TRACE_ID_PLACEHOLDER, TRACE_UI_URL  # noqa: PLC0415

    if not re.match(TRACE_UI_URL, text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected an http(s) URL with {TRACE_ID_PLACEHOLDER} where the trace id goes"
        )
    return text


# Options a run passes on to the in-cluster Job unchanged: (flag, dest).
PASSED_TO_JOB = (
    ("--endpoint", "endpoint"),
    ("--deployment", "deployment"),
    ("--model", "model"),
    ("--profile", "profile"),
    ("--api", "api"),
    ("--concurrency", "concurrency"),
    ("--requests", "requests"),
    ("--prompt-tokens", "prompt_tokens"),
    ("--output-tokens", "output_tokens"),
    ("--seed", "seed"),
    ("--warmup", "warmup"),
    ("--gpus", "gpus"),
    ("--gpu-hour-price", "gpu_hour_price"),
    ("--timeout", "timeout"),
    ("--metrics-url", "metrics_url"),
    ("--replay", "replay"),
    ("--traceparent-sampling", "traceparent_sampling"),
    ("--trace-url", "trace_url"),
)


def add_bench_parser(sub: Any) -> None:
    bench = sub.add_parser(
        "bench",
        help="benchmark an OpenAI-compatible endpoint (A/B decode paths)",
        description=(
            "Stream a profile's requests and measure TTFT, decode rate excluding prefill, "
            "inter-token latency per chunk and per token, E2E time, errors and cost. "
            "Exit 0: results written; 1: every request failed; 2: bad input or no server."
        ),
    )
    target = bench.add_mutually_exclusive_group()
    target.add_argument(
        "--endpoint", metavar="URL", help="OpenAI API root, e.g. http://host:8000/v1"
    )
    target.add_argument(
        "--deployment", metavar="NAMESPACE/NAME", help="use a KimiDeployment's status.endpoint"
    )
    bench.add_argument(
        "--model", help="served model name (default: the deployment's or the only one served)"
    )
    bench.add_argument("--profile", choices=PROFILES, default="headline")
    bench.add_argument("--api", choices=("completions", "chat"), default="completions")
    bench.add_argument("--concurrency", type=_positive_int, help="requests in flight")
    bench.add_argument("--requests", type=_positive_int, help="measured requests")
    bench.add_argument("--prompt-tokens", type=_positive_int, help="prompt length (not agentic)")
    bench.add_argument("--output-tokens", type=_positive_int, help="output length (not agentic)")
    bench.add_argument("--trace", metavar="FILE", help="agent trace (JSONL) for --profile agentic")
    bench.add_argument(
        "--replay",
        choices=("open", "closed"),
        help="open: each request at its trace time; closed: a turn waits for the answer it "
        "depends on (default: closed when the trace has dependencies)",
    )
    bench.add_argument(
        "--seed",
        type=int,
        help="prompt text and synthetic trace seed (default 0: the same text every run; with "
        "--profile calibration a new one each run, recorded in the results)",
    )
    bench.add_argument(
        "--warmup", type=_non_negative_int, default=1, help="unmeasured requests first (default 1)"
    )
    bench.add_argument(
        "--no-ignore-eos",
        dest="ignore_eos",
        action="store_false",
        help="let the model stop early (outputs then differ between runs)",
    )
    bench.add_argument("--gpus", type=_positive_int, help="GPUs behind the endpoint (for cost)")
    bench.add_argument("--gpu-hour-price", type=_positive_float, metavar="USD", help="per GPU-hour")
    bench.add_argument("--api-key", help="bearer token (default: $OPENAI_API_KEY)")
    bench.add_argument(
        "--timeout",
        type=_positive_float,
        default=600.0,
        metavar="S",
        help="longest silence within a stream before it counts as failed",
    )
    bench.add_argument(
        "--metrics-url", metavar="URL", help="default: /metrics on the endpoint's server"
    )
    bench.add_argument(
        "--group-metrics-url",
        action="append",
        default=[],
        metavar="URL",
        help="a TP group leader's /metrics (repeat for each group, e.g. "
        "http://NAME-gN-0.NAME-gN.NAMESPACE:8000/metrics in the cluster): the prefix-cache hit "
        "rate per group and over all of them",
    )
    bench.add_argument(
        "--traceparent-sampling",
        type=_ratio,
        default=1.0,
        metavar="RATIO",
        help="every measured request carries a W3C traceparent of its own; this share of them "
        "(0 to 1) says sampled, which the deployment's tracing follows (default 1)",
    )
    bench.add_argument(
        "--trace-url",
        type=_trace_url,
        metavar="TEMPLATE",
        help="the trace UI's page of a trace, {trace_id} where the id goes (e.g. "
        "'https://grafana.example/explore?...{trace_id}'): the report links the slowest turns "
        "(default: the --deployment's status.traceUrl, from spec.observability.tracing.uiUrl)",
    )
    bench.add_argument("--output", metavar="DIR", help="where results.json, report.md, plots go")
    bench.add_argument("--force", action="store_true", help="overwrite results in --output")
    bench.add_argument("--no-progress", dest="progress", action="store_false")
    job = bench.add_argument_group("in-cluster Job")
    job.add_argument("--render-job", action="store_true", help="print a Job running this benchmark")
    job.add_argument(
        "--image", help="image with kimi-operator[bench] (default: the kimi-operator-bench image)"
    )
    job.add_argument("--namespace", help="Job namespace (default: the deployment's, or default)")
    job.add_argument("--results-pvc", metavar="CLAIM", help="keep results on this PVC")
    bench.set_defaults(run=cmd_bench)

    actions = bench.add_subparsers(dest="bench_command", metavar="{compare,trace}")
    compare = actions.add_parser("compare", help="two runs side by side with B/A ratios")
    compare.add_argument("a", metavar="A", help="results directory (or results.json) of run A")
    compare.add_argument("b", metavar="B", help="results directory (or results.json) of run B")
    compare.add_argument(
        "--strict", action="store_true", help="exit 1 when the runs are not comparable"
    )
    compare.add_argument(
        "--hardware",
        action="store_true",
        help="runs on different GPU counts, as a capacity decision (not a software A/B)",
    )
    compare.add_argument("--output", metavar="DIR", help="also write compare.md and plots here")
    compare.set_defaults(run=cmd_compare)

    trace = actions.add_parser("trace", help="write a synthetic agent trace (JSONL)")
    trace.add_argument("--output", metavar="FILE", default="-", help="default: stdout")
    trace.add_argument("--seed", type=int, default=0)
    trace.add_argument("--sessions", type=_positive_int, default=8, help="agent sessions")
    trace.add_argument("--turns", type=_positive_int, default=6, help="turns per session")
    trace.add_argument(
        "--tools",
        action="store_true",
        help="every turn offers a coding agent's tools (send it with --api chat)",
    )
    trace.add_argument(
        "--duration",
        type=_positive_float,
        default=60.0,
        metavar="S",
        help="sessions start within the first half of this",
    )
    trace.set_defaults(run=cmd_trace)


def _guard(err: TextIO, action: Any) -> int:
    try:
        result: int = action()
    except BenchError as error:
        print(f"error: {error}", file=err)
        return EXIT_BAD_INPUT
    except ModuleNotFoundError as error:  # the operator image has neither: the bench extra
        if (error.name or "").split(".")[0] not in BENCH_EXTRA:
            raise
        print(
            f"error: kimi-operator bench needs the bench extra (no module {error.name!r}): "
            "pip install 'kimi-operator[bench]', or run it in the bench image",
            file=err,
        )
        return EXIT_FAILED
    return result


def cmd_bench(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _guard(err, lambda: _bench(args, out, err))


def cmd_compare(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _guard(err, lambda: _compare(args, out, err))


def cmd_trace(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _guard(err, lambda: _trace(args, out))


def _trace(args: argparse.Namespace, out: TextIO) -> int:
    from kimi_operator.bench.traces import dump_trace, generate_trace  # noqa: PLC0415

    text = dump_trace(
        generate_trace(
            seed=args.seed,
            sessions=args.sessions,
            turns=args.turns,
            duration_s=args.duration,
            tools=args.tools,
        )
    )
    if args.output == "-":
        out.write(text)
        return EXIT_OK
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as error:
        raise BenchError(f"cannot write {args.output}: {error.strerror or error}") from None
    return EXIT_OK


def _compare(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from kimi_operator.bench.compare import render, write_comparison  # noqa: PLC0415
    from kimi_operator.bench.report import PLOTS_SKIPPED, load_results  # noqa: PLC0415

    a, b = load_results(args.a), load_results(args.b)
    text, problems = render(a, b, args.a, args.b, args.hardware)
    if args.output and not write_comparison(a, b, (args.a, args.b), text, Path(args.output)):
        print(PLOTS_SKIPPED, file=err)
    out.write(text)
    if problems:
        print(f"warning: the runs are not comparable ({len(problems)} reason(s) above)", file=err)
        return EXIT_FAILED if args.strict else EXIT_OK
    return EXIT_OK


def _job_args(args: argparse.Namespace) -> list[str]:
    passed: list[str] = []
    for flag, dest in PASSED_TO_JOB:
        value = getattr(args, dest)
        if value is not None:
            passed += [flag, str(value)]
    for url in args.group_metrics_url:
        passed += ["--group-metrics-url", url]
    if not args.ignore_eos:
        passed.append("--no-ignore-eos")
    return passed


def _render_job(args: argparse.Namespace, out: TextIO) -> int:
    import yaml  # noqa: PLC0415

    from kimi_operator.bench.deployment import parse_reference  # noqa: PLC0415
    from kimi_operator.bench.endpoint import parse_endpoint  # noqa: PLC0415
    from kimi_operator.bench.job import (  # noqa: PLC0415
        CONFIGMAP_LIMIT,
        default_image,
        job_name,
        render_job,
    )
    from kimi_operator.bench.traces import dump_trace, load_trace  # noqa: PLC0415

    if args.api_key:
        raise BenchError("--render-job does not write API keys into manifests; drop --api-key")
    if args.output or args.force:
        raise BenchError(
            "--render-job: the Job writes to /results/<job name> (keep it with --results-pvc); "
            "drop --output/--force"
        )
    deployment = parse_reference(args.deployment) if args.deployment else None
    if deployment is not None:
        target = deployment[1]
    else:
        target = urlsplit(parse_endpoint(args.endpoint).base).hostname or ""
        target = target.split(".", 1)[0]
    trace_text = dump_trace(load_trace(args.trace)) if args.trace else None
    if trace_text is not None and len(trace_text.encode()) > CONFIGMAP_LIMIT:
        raise BenchError(f"{args.trace}: too large for a ConfigMap ({CONFIGMAP_LIMIT:,} bytes)")
    manifests = render_job(
        name=job_name(target, args.profile),
        namespace=args.namespace or (deployment[0] if deployment else "default"),
        image=args.image or default_image(),
        bench_args=_job_args(args),
        deployment=deployment,
        trace_text=trace_text,
        results_claim=args.results_pvc,
    )
    out.write(yaml.safe_dump_all(manifests, sort_keys=False, width=100))
    return EXIT_OK


def _bench(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not (args.endpoint or args.deployment):
        raise BenchError("bench needs --endpoint URL or --deployment NAMESPACE/NAME")
    if (args.trace or args.replay) and args.profile != "agentic":
        raise BenchError("--trace and --replay go with --profile agentic")
    if args.profile == "agentic" and (args.prompt_tokens or args.output_tokens):
        raise BenchError("--prompt-tokens/--output-tokens do not apply to --profile agentic")
    if args.render_job:
        return _render_job(args, out)
    if args.image or args.namespace or args.results_pvc:
        raise BenchError("--image, --namespace and --results-pvc go with --render-job")
    if not args.output:
        raise BenchError("bench needs --output DIR for its results")
    import asyncio  # noqa: PLC0415 (kept off `kimi-operator validate`'s start-up)

    from kimi_operator.bench.report import (  # noqa: PLC0415
        PLOTS_SKIPPED,
        prepare_output,
        summary_text,
        write_results,
    )
    from kimi_operator.bench.runner import run  # noqa: PLC0415

    options = _run_options(args)
    directory = Path(args.output)
    prepare_output(directory, args.force)
    progress = err if args.progress else None
    try:
        results = asyncio.run(run(options, progress))
    except KeyboardInterrupt:
        print("\nerror: interrupted: no results written", file=err)
        return EXIT_INTERRUPTED
    if not write_results(results, directory):
        print(PLOTS_SKIPPED, file=err)
    out.write(summary_text(results))
    out.write(f"\nresults: {directory / 'results.json'}, {directory / 'report.md'}\n")
    if results.summary.requests_ok == 0:
        first = next(iter(results.summary.errors), "no response")
        print(f"error: all {results.summary.requests_failed} requests failed: {first}", file=err)
        return EXIT_FAILED
    return EXIT_OK


def _run_options(args: argparse.Namespace) -> "RunOptions":
    from kimi_operator.bench.deployment import resolve  # noqa: PLC0415
    from kimi_operator.bench.endpoint import parse_endpoint  # noqa: PLC0415
    from kimi_operator.bench.profiles import (  # noqa: PLC0415
        PROFILE_DEFAULTS,
        default_seed,
        fixed_plan,
    )
    from kimi_operator.bench.results import TraceInfo  # noqa: PLC0415
    from kimi_operator.bench.runner import RunOptions  # noqa: PLC0415
    from kimi_operator.bench.traces import (  # noqa: PLC0415
        generate_trace,
        has_dependencies,
        load_trace,
        plan_trace,
        trace_digest,
    )

    if args.metrics_url:
        parse_endpoint(args.metrics_url, "--metrics-url")  # same rules as endpoints
    for url in args.group_metrics_url:
        parse_endpoint(url, "--group-metrics-url")
    target = resolve(args.deployment) if args.deployment else None
    gpus = args.gpus or (target.gpus if target else None)
    if args.gpu_hour_price is not None and gpus is None:
        raise BenchError("--gpu-hour-price needs --gpus (or --deployment, which knows them)")
    endpoint = parse_endpoint(target.endpoint if target else args.endpoint)
    metrics_url = args.metrics_url or f"{endpoint.root}/metrics"
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or None
    defaults = PROFILE_DEFAULTS[args.profile]
    seed = default_seed(args.profile) if args.seed is None else args.seed
    concurrency = args.concurrency or defaults.concurrency
    trace = None
    replay: Replay | None = None
    tasks_cut = 0
    if args.profile == "agentic":
        entries = load_trace(args.trace) if args.trace else generate_trace(seed=seed)
        trace = TraceInfo(
            source=args.trace or "synthetic",
            sha256=trace_digest(entries),
            entries=len(entries),
            seed=None if args.trace else seed,
        )
        plan = plan_trace(entries, args.requests)
        if args.api != "chat" and any(request.tools for request in plan):
            raise BenchError(
                f"{trace.source}: its requests offer tools, which only the chat API takes: "
                "add --api chat"
            )
        replay = args.replay or ("closed" if has_dependencies(entries) else "open")
        if args.requests is not None:
            tasks_cut = _tasks_cut(plan, plan_trace(entries, None))
    elif args.profile == "calibration":
        import asyncio  # noqa: PLC0415

        from kimi_operator.bench.calibration import (  # noqa: PLC0415
            calibration_plan,
            sized_to_server,
        )
        from kimi_operator.bench.endpoint import server_limits  # noqa: PLC0415

        if args.requests is not None:
            raise BenchError("--requests does not apply to --profile calibration (a fixed sweep)")
        output = args.output_tokens or defaults.output_tokens
        limits = asyncio.run(server_limits(endpoint, metrics_url, args.model, api_key))
        prompt, concurrency = sized_to_server(args.prompt_tokens, args.concurrency, output, limits)
        plan = calibration_plan(concurrency, prompt, output, seed)
        replay = "closed"  # each phase waits for the previous one's answers
    else:
        plan = fixed_plan(
            args.requests or defaults.requests or 1,
            args.prompt_tokens or defaults.prompt_tokens,
            args.output_tokens or defaults.output_tokens,
        )
    return RunOptions(
        endpoint=endpoint,
        model=args.model or (target.model if target else None),
        api=args.api,
        profile=args.profile,
        plan=plan,
        trace=trace,
        concurrency=concurrency,
        warmup=args.warmup,
        ignore_eos=args.ignore_eos,
        seed=seed,
        gpus=gpus,
        gpu_hour_price_usd=args.gpu_hour_price,
        deployment=args.deployment,
        decode_backend=target.decode_backend if target else None,
        replicas=target.replicas if target else 1,
        api_key=api_key,
        timeout_s=args.timeout,
        metrics_url=metrics_url,
        group_metrics_urls=tuple(args.group_metrics_url),
        replay=replay,
        tasks_cut=tasks_cut,
        trace_sampling=args.traceparent_sampling,
        trace_url=args.trace_url or (target.trace_url if target else None),
    )


def _tasks_cut(kept: "list[PlannedRequest]", whole: "list[PlannedRequest]") -> int:
    """Tasks of which `kept` holds some requests but not all."""
    from collections import Counter  # noqa: PLC0415

    planned = Counter(request.task for request in whole)
    sent = Counter(request.task for request in kept)
    return sum(count < planned[task] for task, count in sent.items())
