"""What a run leaves behind: results.json, report.md and plots, and the summary it prints."""

import importlib.util
import statistics
from pathlib import Path

from kimi_operator.bench import BenchError
from kimi_operator.bench.results import Distribution, RequestRecord, Results, ServerMetrics
from kimi_operator.bench.stats import chunk_gaps, token_itls
from kimi_operator.bench.traceparent import trace_link

RESULTS, REPORT = "results.json", "report.md"
SLOWEST_TURNS = 10  # the report's list of the turns that took longest, with their traces
ITL_PLOT, RATE_PLOT = "itl_cdf.png", "decode_rate.png"
# Printed when matplotlib is missing: the run's results are written all the same.
PLOTS_SKIPPED = (
    "note: plots skipped: matplotlib is not installed (pip install 'kimi-operator[bench]')"
)


def can_plot() -> bool:
    """Whether matplotlib (the bench extra) can be imported."""
    return importlib.util.find_spec("matplotlib") is not None


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.2f}"


def num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def usd(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _dist_cells(dist: Distribution | None, fmt: str) -> list[str]:
    keys = ("p50", "p90", "p99", "mean")
    if dist is None:
        return ["-"] * len(keys)
    values = [getattr(dist, key) for key in keys]
    if fmt == "ms":
        return [ms(v) for v in values]
    return [num(v) for v in values]


def distribution_rows(results: Results) -> list[list[str]]:
    s = results.summary
    return [
        ["TTFT (ms)", *_dist_cells(s.ttft_s, "ms")],
        ["decode tok/s per request, excl. prefill", *_dist_cells(s.decode_tokens_per_s, "num")],
        ["ITL per token (ms)", *_dist_cells(s.itl_s, "ms")],
        ["ITL per chunk (ms)", *_dist_cells(s.itl_chunk_s, "ms")],
        ["E2E (ms)", *_dist_cells(s.e2e_s, "ms")],
        ["prompt tokens (server count)", *_dist_cells(s.prompt_tokens, "num")],
    ]


def total_rows(results: Results) -> list[list[str]]:
    s, m = results.summary, results.summary.server_metrics
    reasons = ", ".join(f"{k} {pct(v)}" for k, v in sorted(m.fallback_reasons.items()))
    return [
        ["requests ok / failed", f"{s.requests_ok} / {s.requests_failed}"],
        ["output tokens", f"{s.output_tokens_total:,}"],
        ["duration (s)", num(s.duration_s, 2)],
        ["output tok/s (all requests)", num(s.output_tokens_per_s)],
        ["tokens per chunk", num(s.tokens_per_chunk, 2)],
        ["$ per 1M output tokens", usd(s.cost_per_million_output_tokens_usd)],
        ["$ per completed request", usd(s.cost_per_request_usd)],
        ["server decode tok/s per request", num(m.decode_tokens_per_s)],
        ["spec-decode acceptance length", num(m.spec_decode_acceptance_length, 2)],
        ["fast-path fraction of decode steps", pct(m.fast_path_fraction)],
        ["fallback reasons", reasons or "-"],
        ["prefix-cache hit rate", pct(m.prefix_cache_hit_rate)],
        *handover_rows(m),
        *(
            [f"prefix-cache hit rate, {group.metrics_url}", pct(group.hit_rate)]
            for group in m.prefix_cache_groups
        ),
        *offload_rows(results),
        *tool_rows(results),
    ]


def handover_rows(m: ServerMetrics) -> list[list[str]]:
    """The KV hand-over of a decode group of spec.prefill (none where the server had none)."""
    if not m.external_prompt_fraction and m.kv_transfer_failures is None:
        return []
    return [
        ["prompt tokens handed over (KV connector)", pct(m.external_prompt_fraction)],
        ["KV transfer time, mean (s)", num(m.kv_transfer_time_s, 3)],
        [
            "KV transfers failed",
            "-" if m.kv_transfer_failures is None else str(m.kv_transfer_failures),
        ],
    ]


def offload_rows(results: Results) -> list[list[str]]:
    """The CPU KV tier's figures (none when the server exports none: no KV connector)."""
    m = results.summary.server_metrics
    if m.offload_loaded_bytes is None and m.offload_hit_rate is None:
        return []
    gib = 1 << 30
    loaded = m.offload_loaded_bytes / gib if m.offload_loaded_bytes is not None else None
    stored = m.offload_stored_bytes / gib if m.offload_stored_bytes is not None else None
    return [
        ["CPU-tier hit rate (of tokens not in GPU memory)", pct(m.offload_hit_rate)],
        ["prompt tokens from the CPU tier", num(m.offload_hit_tokens, 0)],
        ["GiB loaded from / stored to the CPU tier", f"{num(loaded, 2)} / {num(stored, 2)}"],
    ]


def tool_rows(results: Results) -> list[list[str]]:
    """How the requests that offered tools came back (none when no request offered any)."""
    tools = results.summary.tool_calls
    if tools is None:
        return []
    return [
        [
            "tool-using requests with structured tool calls",
            f"{tools.with_tool_calls} / {tools.requests}",
        ],
        ["tool-using answers with unparsed tool-call markup", str(tools.markup_in_text)],
    ]


def task_rows(results: Results) -> list[list[str]]:
    """Task figures of a trace replay (empty for the other profiles)."""
    tasks = results.summary.tasks
    if tasks is None:
        return []
    rows = [
        ["replay", results.config.replay or "-"],
        ["tasks completed / failed", f"{tasks.completed} / {tasks.failed}"],
        ["requests not sent (a request they waited for failed)", str(tasks.requests_not_sent)],
    ]
    for key in ("p50", "p90", "p99"):
        value = getattr(tasks.completion_s, key) if tasks.completion_s else None
        rows.append([f"task completion {key} (s)", num(value, 2)])
    ttft = tasks.ttft_sum_s.p50 if tasks.ttft_sum_s else None
    output = tasks.output_tokens.p50 if tasks.output_tokens else None
    rows += [
        ["TTFT summed over a task, p50 (s)", num(ttft, 2)],
        *(
            [f"TTFT of {which} turns, p50 / p90 (ms)", f"{ms(d.p50)} / {ms(d.p90)}" if d else "-"]
            for which, d in (
                ("first", tasks.ttft_first_turn_s),
                ("returning", tasks.ttft_returning_turn_s),
            )
        ),
        ["output tokens per task, p50", num(output, 0)],
        ["tasks per hour", num(tasks.tasks_per_hour)],
        ["$ per completed task", usd(tasks.cost_per_task_usd)],
    ]
    return rows


def slowest_turns(results: Results) -> list[RequestRecord]:
    """The answered requests that took longest end to end, slowest first."""
    answered = [r for r in results.requests if r.e2e_s is not None]
    return sorted(answered, key=lambda r: -(r.e2e_s or 0))[:SLOWEST_TURNS]


def _trace_cell(record: RequestRecord, template: str | None) -> str:
    if record.trace_id is None:
        return "-"
    if not record.trace_sampled:
        return f"`{record.trace_id}` (not sampled)"
    if template is None:
        return f"`{record.trace_id}`"
    return f"[`{record.trace_id}`]({trace_link(template, record.trace_id)})"


def slowest_rows(results: Results) -> list[list[str]]:
    """Request, group, TTFT and end-to-end ms, output tokens, trace; none without traces."""
    if not any(r.trace_id for r in results.requests):
        return []
    return [
        [
            str(r.index),
            r.group or "-",
            ms(r.ttft_s),
            ms(r.e2e_s),
            str(r.output_tokens),
            _trace_cell(r, results.config.trace_url),
        ]
        for r in slowest_turns(results)
    ]


def text_table(rows: list[list[str]], header: list[str] | None = None) -> str:
    """Aligned columns: the first left-aligned, the others right-aligned."""
    table = [header, *rows] if header else rows
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = []
    for row in table:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def markdown_table(rows: list[list[str]], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def describe(results: Results) -> list[list[str]]:
    c = results.config
    trace = (
        f"{c.trace.source} ({c.trace.entries} entries, sha256 {c.trace.sha256[:12]})"
        if c.trace
        else "-"
    )
    price = (
        f"{c.gpus} GPUs x ${c.gpu_hour_price_usd:g}/GPU-hour"
        if c.gpus is not None and c.gpu_hour_price_usd is not None
        else (f"{c.gpus} GPUs" if c.gpus is not None else "-")
    )
    return [
        ["endpoint", c.endpoint],
        ["deployment", c.deployment or "-"],
        ["model", c.model],
        ["server", f"vLLM {c.server.version}" if c.server.version else "-"],
        ["decode backend", c.server.decode_backend or "-"],
        ["profile", f"{c.profile} ({c.api} API)"],
        ["concurrency", str(c.concurrency) if c.concurrency else "as the trace says"],
        ["requests (+ warm-up)", f"{c.requests} (+{c.warmup})"],
        ["prompt / output tokens asked (mean)", f"{num(c.prompt_tokens)} / {num(c.output_tokens)}"],
        ["trace", trace],
        ["GPUs", price],
        ["started", c.started_at],
    ]


def summary_text(results: Results) -> str:
    header = ["", "p50", "p90", "p99", "mean"]
    parts = [text_table(distribution_rows(results), header), text_table(total_rows(results))]
    if tasks := task_rows(results):
        parts.append(text_table(tasks))
    parts += [f"warning: {w}" for w in results.summary.warnings]
    return "\n\n".join(parts) + "\n"


def report_markdown(results: Results, plots: bool) -> str:
    c, s = results.config, results.summary
    out = [
        f"# kimi-operator bench: {c.profile} on {c.model}",
        "",
        markdown_table(describe(results), ["run", ""]),
        "",
        "## Results",
        "",
        "Decode rate excludes prefill: output tokens after the first chunk ÷ time after it. "
        "ITL per token divides each gap between chunks by the tokens the chunk carried.",
        "",
        markdown_table(distribution_rows(results), ["", "p50", "p90", "p99", "mean"]),
        "",
        markdown_table(total_rows(results), ["", ""]),
    ]
    if tasks := task_rows(results):
        out += [
            "",
            "## Tasks",
            "",
            "A task is an agent session's requests (a trace request without a session is one of "
            "its own); it completes when all of them do, and its completion time runs from its "
            "first send to the last token of its last request. One failed request fails its task.",
            "",
            markdown_table(tasks, ["", ""]),
        ]
    if slowest := slowest_rows(results):
        out += [
            "",
            "## Slowest turns",
            "",
            "The answered requests that took longest, each with the W3C trace id it was sent with: "
            "a sampled one is a trace in the deployment's collector (spec.observability.tracing), "
            "from the endpoint picker through the P/D sidecar to vLLM's `llm_request` span.",
            "",
            markdown_table(
                slowest, ["request", "group", "TTFT ms", "end to end ms", "tokens", "trace"]
            ),
        ]
    if s.warnings:
        out += ["", "## Warnings", "", *[f"- {w}" for w in s.warnings]]
    if s.errors:
        rows = [
            [str(n), e.replace("|", "\\|")]
            for e, n in sorted(s.errors.items(), key=lambda x: -x[1])
        ]
        out += ["", "## Errors", "", markdown_table(rows, ["requests", "error"])]
    if plots:
        out += ["", "## Plots", "", f"![ITL CDF]({ITL_PLOT})", "", f"![decode rate]({RATE_PLOT})"]
    return "\n".join(out) + "\n"


def itl_ms(results: Results) -> tuple[list[float], list[float]]:
    """Sorted ITL per token and per chunk, in ms, over the requests that succeeded."""
    ok = [r for r in results.requests if r.error is None]
    per_token = sorted(
        itl * 1e3
        for r in ok
        for itl in token_itls(r.chunk_times_s, r.chunk_tokens, r.output_tokens)
    )
    per_chunk = sorted(gap * 1e3 for r in ok for gap in chunk_gaps(r.chunk_times_s))
    return per_token, per_chunk


def decode_rates(results: Results) -> list[tuple[int, float]]:
    return [
        (r.index, r.decode_tokens_per_s)
        for r in results.requests
        if r.error is None and r.decode_tokens_per_s is not None
    ]


def cdf_plot(path: Path, series: list[tuple[list[float], str]], title: str) -> None:
    """Step CDFs of sorted values (ms); a log x-axis unless some value is 0."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for values, label in series:
        if values:
            fractions = [(i + 1) / len(values) for i in range(len(values))]
            axes.step(values, fractions, where="post", label=label)
    if all(values[0] > 0 for values, _ in series if values):  # one-read chunks have a gap of 0
        axes.set_xscale("log")
    axes.set_xlabel("inter-token latency (ms)")
    axes.set_ylabel("fraction")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def rate_plot(path: Path, series: list[tuple[list[tuple[int, float]], str]], title: str) -> None:
    """Per-request decode rates against request index, with each series' median."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for rates, label in series:
        if rates:
            median = statistics.median(v for _, v in rates)
            points = axes.plot([i for i, _ in rates], [v for _, v in rates], "o", markersize=3)
            axes.axhline(
                median,
                linestyle="--",
                color=points[0].get_color(),
                label=f"{label}: median {median:,.1f} tok/s",
            )
    axes.set_xlabel("request")
    axes.set_ylabel("decode tok/s (excl. prefill)")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_plots(results: Results, directory: Path) -> bool:
    """ITL CDF and per-request decode rate; False when no request succeeded."""
    if results.summary.requests_ok == 0:
        return False
    per_token, per_chunk = itl_ms(results)
    title = f"{results.config.profile}, {results.config.server.decode_backend or 'unknown backend'}"
    cdf_plot(
        directory / ITL_PLOT,
        [(per_token, "per token"), (per_chunk, "per chunk")],
        f"ITL CDF: {title}",
    )
    rate_plot(
        directory / RATE_PLOT,
        [(decode_rates(results), "decode rate")],
        f"Per-request decode rate: {title}",
    )
    return True


def prepare_output(directory: Path, force: bool) -> None:
    """Make sure results can be written before spending time on a run."""
    if (directory / RESULTS).exists() and not force:
        raise BenchError(f"{directory / RESULTS} exists: choose another --output or pass --force")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise BenchError(f"cannot write to {directory}: {error.strerror or error}") from None


def write_results(results: Results, directory: Path) -> bool:
    """results.json, report.md and the plots; False when the plots were skipped for want of
    matplotlib (a finished run is never lost to a missing plot library)."""
    (directory / RESULTS).write_text(results.model_dump_json(indent=1) + "\n", encoding="utf-8")
    plotting = can_plot()
    plots = plotting and write_plots(results, directory)
    (directory / REPORT).write_text(report_markdown(results, plots), encoding="utf-8")
    return plotting


def load_results(directory: str) -> Results:
    path = Path(directory)
    if path.is_dir():
        path /= RESULTS
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise BenchError(f"{path}: cannot read: {reason}") from None
    from pydantic import ValidationError  # noqa: PLC0415

    try:
        return Results.model_validate_json(text)
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"]) or "(top level)"
        raise BenchError(f"{path}: not a bench results file: {where}: {problem['msg']}") from None
