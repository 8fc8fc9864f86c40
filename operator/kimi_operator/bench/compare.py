"""`bench compare A/ B/`: two runs side by side, B/A ratios, and loud words when they differ.

`--hardware` sets runs on different GPU counts side by side as a capacity decision (latencies as
measured, cost per task and per token, throughput per GPU) under a banner saying what such a
comparison cannot show: what the software gains on the same hardware.
"""

from pathlib import Path

from kimi_operator.bench import BenchError
from kimi_operator.bench.report import (
    can_plot,
    cdf_plot,
    decode_rates,
    itl_ms,
    ms,
    num,
    pct,
    rate_plot,
    text_table,
    usd,
)
from kimi_operator.bench.results import Distribution, Results, RunConfig

LENGTH_TOLERANCE = 0.05  # measured prompt lengths further apart than this are different contexts


def _measured_prompt(results: Results) -> float | None:
    dist = results.summary.prompt_tokens
    return dist.p50 if dist is not None else None


def _differs(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return False
    return abs(a - b) > LENGTH_TOLERANCE * max(abs(a), abs(b), 1.0)


def problems(a: Results, b: Results, hardware: bool = False) -> list[str]:
    """Why the two runs do not measure the same thing (empty: comparable).

    With `hardware`, the GPU counts are meant to differ, and it is a problem when they do not.
    """
    ca, cb = a.config, b.config
    found = []

    def check(what: str, value_a: object, value_b: object) -> None:
        if value_a != value_b:
            found.append(f"{what} differs: A={value_a}, B={value_b}")

    if not hardware and ca.gpus != cb.gpus:
        found.append(
            f"GPU count differs: A={ca.gpus}, B={cb.gpus} (`bench compare --hardware` sets such "
            "runs side by side as a capacity decision)"
        )
    if hardware and ca.gpus == cb.gpus:
        found.append(f"both runs used {ca.gpus} GPUs: not a hardware comparison (drop --hardware)")
    check("model", ca.model, cb.model)
    check("profile", ca.profile, cb.profile)
    check("API", ca.api, cb.api)
    check("concurrency", ca.concurrency, cb.concurrency)
    if _differs(ca.prompt_tokens, cb.prompt_tokens):
        found.append(
            f"context length differs: A asked {ca.prompt_tokens:,.0f} prompt tokens, "
            f"B {cb.prompt_tokens:,.0f}"
        )
    elif _differs(_measured_prompt(a), _measured_prompt(b)):
        found.append(
            f"context length differs: the servers counted median prompts of "
            f"{_measured_prompt(a):,.0f} (A) and {_measured_prompt(b):,.0f} (B) tokens"
        )
    if _differs(ca.output_tokens, cb.output_tokens):
        found.append(
            f"output length differs: A {ca.output_tokens:,.0f} tokens, B {cb.output_tokens:,.0f}"
        )
    check("ignore_eos", ca.ignore_eos, cb.ignore_eos)
    check("trace", _trace(ca), _trace(cb))
    check("replay", ca.replay, cb.replay)
    if ca.trace is None and cb.trace is None:
        check("prompt seed", ca.seed, cb.seed)
    for label, results in (("A", a), ("B", b)):
        failed = results.summary.requests_failed
        if failed:
            found.append(
                f"{label} had {failed} failed request(s): its figures cover fewer requests"
            )
    return found


def _trace(config: RunConfig) -> str | None:
    return config.trace.sha256[:12] if config.trace else None


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return "-"
    return f"{b / a:.2f}x"


def _seconds(value: float | None) -> str:
    return num(value, 2)


def _per_gpu(value: float | None, results: Results) -> float | None:
    gpus = results.config.gpus
    return value / gpus if value is not None and gpus else None


def _rows(a: Results, b: Results, hardware: bool) -> list[list[str]]:
    rows: list[list[str]] = []

    def dist(label: str, da: Distribution | None, db: Distribution | None, unit: str) -> None:
        for key in ("p50", "p90", "p99", "mean"):
            va = getattr(da, key) if da else None
            vb = getattr(db, key) if db else None
            text = {"ms": ms, "num": num, "s": _seconds}[unit]
            rows.append([f"{label} {key}", text(va), text(vb), _ratio(va, vb)])

    def value(label: str, va: float | None, vb: float | None, text: str = "num") -> None:
        show = {"num": num, "usd": usd, "pct": pct}[text]
        rows.append([label, show(va), show(vb), _ratio(va, vb)])

    sa, sb = a.summary, b.summary
    dist("TTFT (ms)", sa.ttft_s, sb.ttft_s, "ms")
    # Beside TTFT: a prefill skipped for the tokens found in the cache (routing by prefix).
    value(
        "prefix-cache hit rate",
        sa.server_metrics.prefix_cache_hit_rate,
        sb.server_metrics.prefix_cache_hit_rate,
        "pct",
    )
    # And of the rest, what the CPU KV tier held (kvCache.cpuOffload; "-" without one).
    value(
        "CPU-tier hit rate",
        sa.server_metrics.offload_hit_rate,
        sb.server_metrics.offload_hit_rate,
        "pct",
    )
    dist("decode tok/s", sa.decode_tokens_per_s, sb.decode_tokens_per_s, "num")
    dist("ITL/token (ms)", sa.itl_s, sb.itl_s, "ms")
    dist("ITL/chunk (ms)", sa.itl_chunk_s, sb.itl_chunk_s, "ms")
    dist("E2E (ms)", sa.e2e_s, sb.e2e_s, "ms")
    value("output tok/s (all requests)", sa.output_tokens_per_s, sb.output_tokens_per_s)
    if hardware:
        value(
            "output tok/s per GPU",
            _per_gpu(sa.output_tokens_per_s, a),
            _per_gpu(sb.output_tokens_per_s, b),
        )
    value("tokens per chunk", sa.tokens_per_chunk, sb.tokens_per_chunk)
    value(
        "$ per 1M output tokens",
        sa.cost_per_million_output_tokens_usd,
        sb.cost_per_million_output_tokens_usd,
        "usd",
    )
    value("$ per completed request", sa.cost_per_request_usd, sb.cost_per_request_usd, "usd")
    ta, tb = sa.tasks, sb.tasks
    if ta is not None or tb is not None:
        dist(
            "task completion (s)",
            ta.completion_s if ta else None,
            tb.completion_s if tb else None,
            "s",
        )
        for turn in ("first", "returning"):
            field = f"ttft_{turn}_turn_s"
            dist(
                f"TTFT of {turn} turns (ms)",
                getattr(ta, field) if ta else None,
                getattr(tb, field) if tb else None,
                "ms",
            )
        per_hour_a = ta.tasks_per_hour if ta else None
        per_hour_b = tb.tasks_per_hour if tb else None
        value("tasks per hour", per_hour_a, per_hour_b)
        if hardware:
            value("tasks per hour per GPU", _per_gpu(per_hour_a, a), _per_gpu(per_hour_b, b))
        value(
            "$ per completed task",
            ta.cost_per_task_usd if ta else None,
            tb.cost_per_task_usd if tb else None,
            "usd",
        )
        rows.append(
            [
                "tasks completed / failed",
                f"{ta.completed} / {ta.failed}" if ta else "-",
                f"{tb.completed} / {tb.failed}" if tb else "-",
                "",
            ]
        )
    ma, mb = sa.server_metrics, sb.server_metrics
    value(
        "acceptance length",
        ma.spec_decode_acceptance_length,
        mb.spec_decode_acceptance_length,
    )
    value("fast-path fraction", ma.fast_path_fraction, mb.fast_path_fraction, "pct")
    rows.append(
        [
            "requests ok / failed",
            f"{sa.requests_ok} / {sa.requests_failed}",
            f"{sb.requests_ok} / {sb.requests_failed}",
            "",
        ]
    )
    return rows


def _hardware_banner(a: Results, b: Results) -> str:
    bar = "=" * 78
    return "\n".join(
        [
            bar,
            f"== HARDWARE COMPARISON: A on {a.config.gpus} GPUs, B on {b.config.gpus} GPUs",
            "== A capacity decision, not a software speedup: latencies as measured on each, cost",
            "== per completed task and per 1M tokens, throughput per GPU. It cannot show what the",
            "== software gains on the same hardware: compare runs on equal GPU counts for that.",
            bar,
        ]
    )


def render(
    a: Results, b: Results, label_a: str, label_b: str, hardware: bool = False
) -> tuple[str, list[str]]:
    """The comparison text and the reasons the runs are not comparable."""
    if hardware:
        for label, results in (("A", a), ("B", b)):
            if results.config.gpus is None:
                raise BenchError(
                    f"--hardware needs both runs' GPU counts: run {label} has none "
                    "(bench --gpus N or --deployment)"
                )
    found = problems(a, b, hardware)
    header = [
        [
            "run",
            label_a,
            label_b,
        ],
        [
            "decode backend",
            a.config.server.decode_backend or "-",
            b.config.server.decode_backend or "-",
        ],
        ["deployment", a.config.deployment or "-", b.config.deployment or "-"],
        ["GPUs", str(a.config.gpus or "-"), str(b.config.gpus or "-")],
        ["profile", a.config.profile, b.config.profile],
        ["concurrency", str(a.config.concurrency or "trace"), str(b.config.concurrency or "trace")],
    ]
    if a.config.replay or b.config.replay:
        header.append(["replay", a.config.replay or "-", b.config.replay or "-"])
    parts = [_hardware_banner(a, b)] if hardware else []
    if found:
        bar = "!" * 78
        parts.append(
            "\n".join(
                [
                    bar,
                    "!! WARNING: THESE RUNS ARE NOT COMPARABLE",
                    *[f"!!  - {p}" for p in found],
                    bar,
                ]
            )
        )
    parts.append(text_table(header[1:], header[0]))
    parts.append(text_table(_rows(a, b, hardware), ["", "A", "B", "B/A"]))
    return "\n\n".join(parts) + "\n", found


COMPARE_REPORT, COMPARE_ITL_PLOT, COMPARE_RATE_PLOT = (
    "compare.md",
    "itl_cdf_compare.png",
    "decode_rate_compare.png",
)


def write_comparison(
    a: Results, b: Results, labels: tuple[str, str], text: str, directory: Path
) -> bool:
    """compare.md (the table) and the two runs' ITL CDFs and decode rates in one plot each; False
    when the plots were skipped for want of matplotlib."""
    plotting = can_plot()
    plots = (
        f"\n![ITL per token]({COMPARE_ITL_PLOT})\n\n![decode rate]({COMPARE_RATE_PLOT})\n"
        if plotting
        else ""
    )
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / COMPARE_REPORT).write_text(
            f"# kimi-operator bench compare\n\nA: `{labels[0]}`, B: `{labels[1]}`\n\n"
            f"```\n{text}```\n{plots}",
            encoding="utf-8",
        )
    except OSError as error:
        raise BenchError(f"cannot write to {directory}: {error.strerror or error}") from None
    if not plotting:
        return False

    def name(label: str, results: Results) -> str:
        return f"{label}: {results.config.server.decode_backend or '?'}"

    cdf_plot(
        directory / COMPARE_ITL_PLOT,
        [(itl_ms(a)[0], name("A", a)), (itl_ms(b)[0], name("B", b))],
        "ITL per token, A vs B",
    )
    rate_plot(
        directory / COMPARE_RATE_PLOT,
        [(decode_rates(a), name("A", a)), (decode_rates(b), name("B", b))],
        "Per-request decode rate, A vs B",
    )
    return True
