"""`bench compare A/ B/`: two runs side by side, B/A ratios, and loud words when they differ."""

from pathlib import Path

from kimi_operator.bench import BenchError
from kimi_operator.bench.report import (
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


def problems(a: Results, b: Results) -> list[str]:
    """Why the two runs do not measure the same thing (empty: comparable)."""
    ca, cb = a.config, b.config
    found = []

    def check(what: str, value_a: object, value_b: object) -> None:
        if value_a != value_b:
            found.append(f"{what} differs: A={value_a}, B={value_b}")

    check("GPU count", ca.gpus, cb.gpus)
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


def _rows(a: Results, b: Results) -> list[list[str]]:
    rows: list[list[str]] = []

    def dist(label: str, da: Distribution | None, db: Distribution | None, unit: str) -> None:
        for key in ("p50", "p90", "p99", "mean"):
            va = getattr(da, key) if da else None
            vb = getattr(db, key) if db else None
            text = ms if unit == "ms" else num
            rows.append([f"{label} {key}", text(va), text(vb), _ratio(va, vb)])

    def value(label: str, va: float | None, vb: float | None, text: str = "num") -> None:
        show = {"num": num, "usd": usd, "pct": pct}[text]
        rows.append([label, show(va), show(vb), _ratio(va, vb)])

    sa, sb = a.summary, b.summary
    dist("TTFT (ms)", sa.ttft_s, sb.ttft_s, "ms")
    dist("decode tok/s", sa.decode_tokens_per_s, sb.decode_tokens_per_s, "num")
    dist("ITL/token (ms)", sa.itl_s, sb.itl_s, "ms")
    dist("ITL/chunk (ms)", sa.itl_chunk_s, sb.itl_chunk_s, "ms")
    dist("E2E (ms)", sa.e2e_s, sb.e2e_s, "ms")
    value("output tok/s (all requests)", sa.output_tokens_per_s, sb.output_tokens_per_s)
    value("tokens per chunk", sa.tokens_per_chunk, sb.tokens_per_chunk)
    value(
        "$ per 1M output tokens",
        sa.cost_per_million_output_tokens_usd,
        sb.cost_per_million_output_tokens_usd,
        "usd",
    )
    value("$ per completed request", sa.cost_per_request_usd, sb.cost_per_request_usd, "usd")
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


def render(a: Results, b: Results, label_a: str, label_b: str) -> tuple[str, list[str]]:
    """The comparison text and the reasons the runs are not comparable."""
    found = problems(a, b)
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
    parts = []
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
    parts.append(text_table(_rows(a, b), ["", "A", "B", "B/A"]))
    return "\n\n".join(parts) + "\n", found


COMPARE_REPORT, COMPARE_ITL_PLOT, COMPARE_RATE_PLOT = (
    "compare.md",
    "itl_cdf_compare.png",
    "decode_rate_compare.png",
)


def write_comparison(
    a: Results, b: Results, labels: tuple[str, str], text: str, directory: Path
) -> None:
    """compare.md (the table) and the two runs' ITL CDFs and decode rates in one plot each."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / COMPARE_REPORT).write_text(
            f"# kimi-operator bench compare\n\nA: `{labels[0]}`, B: `{labels[1]}`\n\n"
            f"```\n{text}```\n\n![ITL per token]({COMPARE_ITL_PLOT})\n\n"
            f"![decode rate]({COMPARE_RATE_PLOT})\n",
            encoding="utf-8",
        )
    except OSError as error:
        raise BenchError(f"cannot write to {directory}: {error.strerror or error}") from None

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
