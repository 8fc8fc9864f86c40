"""Grafana dashboards as code (grafana-foundation-sdk): Kimi K3 decode, cost & capacity, and the
operator itself. Decode and cost panels read the recording rules of `rules.py`."""

import json
from collections.abc import Sequence
from typing import Any

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    GridPos,
    Panel,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

from kimi_operator.observability.rules import (
    GROUPS_PER_DECODE_RATE,
    KV_CACHE_USAGE,
    PREFILL_SERVING_GROUPS,
    PREFILL_TTFT_P90,
    PREFILL_WAITING_REQUESTS,
    ROLE_OUTPUT_TOKENS,
    ROLE_PREFIX_HITS,
    ROLE_PROMPT_TOKENS,
    ROLE_REQUESTS,
    ROLE_RUNNING,
    ROLE_SERVING_GROUPS,
    ROLE_WAITING,
    SERVING_GROUPS,
    SLO_PERCENTILES,
    WAITING_REQUESTS,
    WINDOW,
    role_decode_rate,
    role_ttft,
)

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
# Every Kimi K3 query filters on these template variables.
SELECTOR = 'namespace=~"$namespace", deployment=~"$deployment", model_name=~"$model"'
BY = "namespace, deployment, model_name"
# The cost dashboard's price of one GPU-hour, in the currency the user thinks in.
PRICE_VARIABLE = "gpu_hour_price"
DEFAULT_GPU_HOUR_PRICE = "3.00"


def _query(expr: str, legend: str, ref: str) -> prometheus.Dataquery:
    return (
        prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DATASOURCE)
    )


class _Grid:
    """Places panels left to right, two per row."""

    def __init__(self) -> None:
        self.x, self.y, self.height = 0, 0, 0

    def next(self, width: int = 12, height: int = 8) -> GridPos:
        if self.x + width > 24:
            self.x, self.y = 0, self.y + height
        pos = GridPos(h=height, w=width, x=self.x, y=self.y)
        self.x, self.height = self.x + width, height
        return pos

    def row(self, title: str) -> dashboard.Row:
        """A row's header across the board, below what is placed; the panels after it follow."""
        y = self.y + (self.height if self.x else 0)
        self.x, self.y = 0, y + 1
        return dashboard.Row(title).datasource(DATASOURCE).grid_pos(GridPos(h=1, w=24, x=0, y=y))


Placed = Builder[Panel] | dashboard.Row


def _placed(board: dashboard.Dashboard, panels: Sequence[Placed]) -> dashboard.Dashboard:
    for panel in panels:
        board = (
            board.with_row(panel) if isinstance(panel, dashboard.Row) else board.with_panel(panel)
        )
    return board


def _series(
    grid: _Grid, title: str, unit: str, queries: list[tuple[str, str]], description: str = ""
) -> Builder[Panel]:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .datasource(DATASOURCE)
        .grid_pos(grid.next())
    )
    for index, (expr, legend) in enumerate(queries):
        panel = panel.with_target(_query(expr, legend, chr(ord("A") + index)))
    return panel


def _stat(grid: _Grid, title: str, unit: str, expr: str, description: str = "") -> Builder[Panel]:
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .datasource(DATASOURCE)
        .grid_pos(grid.next(width=6, height=4))
        .with_target(_query(expr, "{{deployment}}", "A"))
    )


def _label_variable(name: str, label: str, query: str) -> dashboard.QueryVariable:
    return (
        dashboard.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(VariableOption(selected=True, text="All", value="$__all"))
    )


def _kimi_dashboard(uid: str, title: str, description: str) -> dashboard.Dashboard:
    return (
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["kimi-k3", "vllm", "kimi-operator"])
        .time("now-3h", "now")
        .refresh("30s")
        .with_variable(
            dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
        .with_variable(
            _label_variable(
                "namespace", "Namespace", "label_values(vllm:num_requests_running, namespace)"
            )
        )
        .with_variable(
            _label_variable(
                "deployment",
                "KimiDeployment",
                'label_values(vllm:num_requests_running{namespace=~"$namespace"}, deployment)',
            )
        )
        .with_variable(
            _label_variable(
                "model",
                "Model",
                'label_values(vllm:num_requests_running{namespace=~"$namespace", '
                'deployment=~"$deployment"}, model_name)',
            )
        )
    )


def _byte_rate(counter: str) -> str:
    return f"sum by ({BY}) (rate({counter}{{{SELECTOR}}}[{WINDOW}]))"


def _rule(name: str) -> str:
    return f"{name}{{{SELECTOR}}}"


def decode_dashboard() -> dashboard.Dashboard:
    grid = _Grid()
    per_user = f"kimi:decode_tokens_per_second_per_user:%s_{WINDOW}"
    board = _kimi_dashboard(
        "kimi-k3-decode",
        "Kimi K3 decode",
        "Decode speed per user (prefill excluded), latency, speculative decoding and whether "
        "vLLM's latency-specialized decode path actually runs.",
    )
    panels = [
        _stat(grid, "Decode tok/s per user (p50)", "none", _rule(per_user % "p50")),
        _stat(grid, "Decode tok/s per user (p90)", "none", _rule(per_user % "p90")),
        _stat(
            grid,
            "Fast-path fraction",
            "percentunit",
            _rule(f"kimi:decode_fast_path_fraction:ratio_{WINDOW}"),
            "Share of pure decode steps that ran the specialized CuTe DSL decode.",
        ),
        _stat(
            grid,
            "Acceptance length",
            "none",
            _rule(f"kimi:spec_decode_acceptance_length:ratio_{WINDOW}"),
        ),
        _series(
            grid,
            "Decode tok/s per user",
            "none",
            [
                (_rule(per_user % "p50"), "{{deployment}} p50"),
                (_rule(per_user % "p90"), "{{deployment}} p90"),
                (_rule(per_user % "mean"), "{{deployment}} mean"),
                (_rule(per_user % "p10"), "{{deployment}} p10"),
            ],
            "Per finished request: output tokens after the first / time after the first token.",
        ),
        _series(
            grid,
            "Generation tok/s",
            "none",
            [
                (_rule(f"kimi:generation_tokens_per_second:rate_{WINDOW}"), "{{deployment}}"),
                (
                    _rule(f"kimi:generation_tokens_per_gpu_second:rate_{WINDOW}"),
                    "{{deployment}} per GPU",
                ),
            ],
        ),
        _series(
            grid,
            "Inter-token latency",
            "s",
            [
                (_rule(f"kimi:inter_token_latency_seconds:{q}_{WINDOW}"), f"{{{{deployment}}}} {q}")
                for q in ("p50", "p90", "p99")
            ],
        ),
        _series(
            grid,
            "Time to first token",
            "s",
            [
                (_rule(f"kimi:time_to_first_token_seconds:{q}_{WINDOW}"), f"{{{{deployment}}}} {q}")
                for q in ("p50", "p90", "p99")
            ],
        ),
        _series(
            grid,
            "Speculative decoding: acceptance length",
            "none",
            [(_rule(f"kimi:spec_decode_acceptance_length:ratio_{WINDOW}"), "{{deployment}}")],
            "Tokens per verify step: 1 (bonus token) + accepted drafts / drafts.",
        ),
        _series(
            grid,
            "Speculative decoding: acceptance by position",
            "percentunit",
            [
                (
                    _rule(f"kimi:spec_decode_acceptance_per_position:ratio_{WINDOW}"),
                    "{{deployment}} position {{position}}",
                )
            ],
        ),
        _series(
            grid,
            "Fast-path fraction",
            "percentunit",
            [(_rule(f"kimi:decode_fast_path_fraction:ratio_{WINDOW}"), "{{deployment}}")],
            "Pure decode steps on the specialized decode; prefill and mixed batches left out.",
        ),
        _series(
            grid,
            "Fallback steps by reason",
            "ops",
            [(_rule(f"kimi:decode_fallback_steps:rate_{WINDOW}"), "{{deployment}} {{reason}}")],
            "Steps on the stock forward per second, by the reason the planner said no.",
        ),
        _series(
            grid,
            "Requests running / waiting",
            "none",
            [
                (
                    f"sum by ({BY}) (vllm:num_requests_running{{{SELECTOR}}})",
                    "{{deployment}} running",
                ),
                (
                    f"sum by ({BY}) (vllm:num_requests_waiting{{{SELECTOR}}})",
                    "{{deployment}} waiting",
                ),
            ],
        ),
        _series(
            grid,
            "KV cache usage",
            "percentunit",
            [(f"max by ({BY}) (vllm:kv_cache_usage_perc{{{SELECTOR}}})", "{{deployment}}")],
        ),
        _series(
            grid,
            "Autoscaling: serving TP groups",
            "none",
            [(_rule(SERVING_GROUPS), "{{deployment}}")],
            "Groups whose leader reports vLLM metrics; a group waiting for nodes is not counted.",
        ),
        _series(
            grid,
            "Autoscaling: load per serving group",
            "none",
            [
                (f"{_rule(WAITING_REQUESTS)} / {_rule(SERVING_GROUPS)}", "{{deployment}} waiting"),
                (
                    f"{_rule(KV_CACHE_USAGE)} / {_rule(SERVING_GROUPS)}",
                    "{{deployment}} KV cache usage",
                ),
                (_rule(GROUPS_PER_DECODE_RATE), "{{deployment}} groups per p10 tok/s"),
            ],
            "What spec.autoscaling targets compare against (docs/scaling.md).",
        ),
        _series(
            grid,
            "Prefix cache hit rate",
            "percentunit",
            [(_rule(f"kimi:prefix_cache_hit_ratio:ratio_{WINDOW}"), "{{deployment}}")],
        ),
        *_handover_panels(grid),
        _series(
            grid,
            "CPU KV tier: hit rate",
            "percentunit",
            [(_rule(f"kimi:offload_hit_ratio:ratio_{WINDOW}"), "{{deployment}}")],
            "spec.kvCache.cpuOffload: prompt tokens found in the tier, of those the GPU prefix "
            "cache missed (docs/kv-cache.md).",
        ),
        _series(
            grid,
            "CPU KV tier: traffic and transfer load",
            "Bps",
            [
                (_byte_rate("vllm:kv_offload_load_bytes_total"), "{{deployment}} loaded into GPU"),
                (_byte_rate("vllm:kv_offload_store_bytes_total"), "{{deployment}} stored from GPU"),
            ],
            "Bytes the tier moves each way. vLLM 0.33.0 exports no fill level of the tier: "
            "vllm:kv_offload_cpu_cache_usage_perc is the share held by transfers in flight, "
            "shown on the next panel.",
        ),
        _series(
            grid,
            "CPU KV tier: share pinned by transfers",
            "percentunit",
            [
                (
                    f"max by ({BY}) (vllm:kv_offload_cpu_cache_usage_perc{{{SELECTOR}}})",
                    "{{deployment}}",
                )
            ],
            "Near 1 for long: stores and loads are dropped for want of room in the tier.",
        ),
        _series(
            grid,
            "CPU KV tier: failed stores",
            "ops",
            [
                (
                    f"sum by ({BY}) (rate(vllm:kv_offload_allocation_failure_total{{{SELECTOR}}}"
                    f"[{WINDOW}]))",
                    "{{deployment}}",
                )
            ],
            "Stores the tier had no room for: it is too small for the sessions it is offered.",
        ),
        *_slo_load_panels(grid),
    ]
    return _placed(board, panels)


def _handover_panels(grid: _Grid) -> list[Builder[Panel]]:
    """spec.prefill (docs/disaggregation.md): prompt tokens per role and where their KV came from
    (the prefill groups' prompt throughput; what the decode groups took from the hand-over), and
    NixlConnector's transfers on the decode groups."""
    by_source = f"{BY}, role, source"
    nixl = "vllm:nixl_xfer_time_seconds"
    return [
        _series(
            grid,
            "Disaggregated prefill: prompt tok/s by role and source",
            "none",
            [
                (
                    f"sum by ({by_source}) "
                    f"(rate(vllm:prompt_tokens_by_source_total{{{SELECTOR}}}[{WINDOW}]))",
                    "{{deployment}} {{role}} {{source}}",
                )
            ],
            "external_kv_transfer on the decode groups: prompt tokens whose KV the prefill "
            "groups handed over; local_compute on the prefill groups: their prompt throughput.",
        ),
        _series(
            grid,
            "Disaggregated prefill: autoscaling",
            "none",
            [
                (_rule(PREFILL_SERVING_GROUPS), "{{deployment}} serving prefill groups"),
                (
                    f"{_rule(PREFILL_WAITING_REQUESTS)} / {_rule(PREFILL_SERVING_GROUPS)}",
                    "{{deployment}} waiting per prefill group",
                ),
                (_rule(PREFILL_TTFT_P90), "{{deployment}} prefill TTFT p90 (s)"),
            ],
            "What spec.prefill.autoscaling targets compare against: the operator reads them "
            "(docs/scaling.md).",
        ),
        _series(
            grid,
            "Disaggregated prefill: KV transfers",
            "s",
            [
                (
                    f"sum by ({BY}) (rate({nixl}_sum{{{SELECTOR}}}[{WINDOW}])) / "
                    f"(sum by ({BY}) (rate({nixl}_count{{{SELECTOR}}}[{WINDOW}])) > 0)",
                    "{{deployment}} mean transfer time",
                ),
                (
                    f"sum by ({BY}) "
                    f"(rate(vllm:nixl_num_failed_transfers_total{{{SELECTOR}}}[{WINDOW}]))",
                    "{{deployment}} failed transfers/s",
                ),
            ],
            "NixlConnector's own metrics on the decode groups (vLLM 0.33.0).",
        ),
    ]


def _slo_load_panels(grid: _Grid) -> list[Placed]:
    """What the SLO scaler reads of each role (spec.autoscaling.slo, spec.prefill.autoscaling.slo:
    docs/scaling.md): the load, and what its requests got at the objectives' percentiles."""
    role = "{{deployment}} {{role}}"
    return [
        grid.row("SLO scaler: what it reads"),
        _series(
            grid,
            "SLO scaler: requests by role",
            "none",
            [
                (_rule(ROLE_REQUESTS), f"{role} finished/s"),
                (_rule(ROLE_WAITING), f"{role} waiting"),
                (_rule(ROLE_RUNNING), f"{role} running"),
                (_rule(ROLE_SERVING_GROUPS), f"{role} serving groups"),
            ],
            "The load the SLO scaler forecasts from; the role is empty without spec.prefill.",
        ),
        _series(
            grid,
            "SLO scaler: request lengths by role",
            "none",
            [
                (_rule(ROLE_PROMPT_TOKENS), f"{role} prompt tokens"),
                (_rule(ROLE_OUTPUT_TOKENS), f"{role} output tokens"),
            ],
            "Mean tokens per finished request.",
        ),
        _series(
            grid,
            "SLO scaler: prefix-cache hit ratio by role",
            "percentunit",
            [(_rule(ROLE_PREFIX_HITS), role)],
            "Prompt tokens the groups did not compute: what sessions returning save.",
        ),
        _series(
            grid,
            "SLO scaler: TTFT by role",
            "s",
            [(_rule(role_ttft(p)), f"{role} p{p}") for p in SLO_PERCENTILES],
            "Measured, at the percentiles an objective may name (ttftPercentile).",
        ),
        _series(
            grid,
            "SLO scaler: decode tok/s per user by role",
            "none",
            [(_rule(role_decode_rate(p)), f"{role} {p}% get at least") for p in SLO_PERCENTILES],
            "Measured, at the percentiles an objective may name (decodePercentile).",
        ),
    ]


def cost_expressions() -> dict[str, str]:
    """The cost panels' queries (also what the Prometheus test checks against fed values)."""
    gpus = _rule("kimi:engine_gpus:sum")
    tokens = _rule(f"kimi:generation_tokens_per_second:rate_{WINDOW}")
    price = f"${PRICE_VARIABLE}"
    return {
        "per_million": f"{gpus} * {price} / ({tokens} * 3600) * 1e6",
        "per_gpu_second": _rule(f"kimi:generation_tokens_per_gpu_second:rate_{WINDOW}"),
        "gpus": gpus,
        "per_hour": f"{gpus} * {price}",
        "tokens_per_hour": f"{tokens} * 3600",
    }


def cost_dashboard() -> dashboard.Dashboard:
    grid = _Grid()
    exprs = cost_expressions()
    board = _kimi_dashboard(
        "kimi-k3-cost",
        "Kimi K3 cost & capacity",
        "What a million output tokens costs at a GPU-hour price you set, and how much each GPU "
        "produces.",
    ).with_variable(
        dashboard.TextBoxVariable(PRICE_VARIABLE)
        .label("GPU-hour price")
        .description("Price of one GPU for one hour (any currency).")
        .default_value(DEFAULT_GPU_HOUR_PRICE)
        .current(
            VariableOption(selected=True, text=DEFAULT_GPU_HOUR_PRICE, value=DEFAULT_GPU_HOUR_PRICE)
        )
    )
    panels = [
        _stat(grid, "Cost per 1M output tokens", "none", exprs["per_million"]),
        _stat(grid, "Output tokens per GPU-second", "none", exprs["per_gpu_second"]),
        _stat(grid, "GPUs in use", "none", exprs["gpus"]),
        _stat(grid, "Cost per hour", "none", exprs["per_hour"]),
        _series(
            grid,
            "Cost per 1M output tokens",
            "none",
            [(exprs["per_million"], "{{deployment}}")],
            "GPUs x GPU-hour price / output tokens per hour x 1e6.",
        ),
        _series(
            grid,
            "Output tokens per GPU-second",
            "none",
            [(exprs["per_gpu_second"], "{{deployment}}")],
        ),
        _series(grid, "GPUs in use per deployment", "none", [(exprs["gpus"], "{{deployment}}")]),
        _series(
            grid, "Output tokens per hour", "none", [(exprs["tokens_per_hour"], "{{deployment}}")]
        ),
    ]
    return _placed(board, panels)


def operator_dashboard() -> dashboard.Dashboard:
    grid = _Grid()
    board = (
        dashboard.Dashboard("kimi-operator")
        .uid("kimi-operator")
        .description("The operator: reconciles, errors, durations, KimiDeployments by condition.")
        .tags(["kimi-operator"])
        .time("now-6h", "now")
        .refresh("30s")
        .with_variable(
            dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
    )
    duration = "kimi_operator_reconcile_duration_seconds_bucket"
    panels = [
        _series(
            grid,
            "Reconciles by result",
            "ops",
            [(f"sum by (result) (rate(kimi_operator_reconciles_total[{WINDOW}]))", "{{result}}")],
        ),
        _series(
            grid,
            "Reconcile errors by kind",
            "ops",
            [(f"sum by (kind) (rate(kimi_operator_reconcile_errors_total[{WINDOW}]))", "{{kind}}")],
        ),
        _series(
            grid,
            "Reconcile duration",
            "s",
            [
                (f"histogram_quantile({q}, sum by (le) (rate({duration}[{WINDOW}])))", name)
                for q, name in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99"))
            ],
        ),
        _series(
            grid,
            "KimiDeployments by condition",
            "none",
            [
                (
                    "sum by (condition, status) (kimi_operator_deployments)",
                    "{{condition}}={{status}}",
                )
            ],
        ),
        _series(
            grid,
            "TP group start-up time (leader scheduled to Ready)",
            "s",
            [
                (
                    f"histogram_quantile({q}, sum by (le) "
                    "(rate(kimi_operator_group_startup_seconds_bucket[6h])))",
                    name,
                )
                for q, name in ((0.5, "p50"), (0.9, "p90"))
            ],
        ),
        _series(
            grid,
            "TP group failures by reason",
            "ops",
            [
                (
                    f"sum by (reason) (rate(kimi_operator_group_failures_total[{WINDOW}]))",
                    "{{reason}}",
                )
            ],
        ),
        _series(
            grid,
            "TP groups evacuated from unfit nodes (last hour), by why",
            "none",
            [
                (
                    "sum by (reason) (increase(kimi_operator_evacuations_total[1h]))",
                    "{{reason}}",
                )
            ],
        ),
        _series(
            grid,
            "API server requests by status",
            "ops",
            [
                (
                    f"sum by (verb, code) (rate(kimi_operator_api_requests_total[{WINDOW}]))",
                    "{{verb}} {{code}}",
                )
            ],
        ),
        *_slo_scaler_panels(grid),
    ]
    return _placed(board, panels)


def _slo_scaler_panels(grid: _Grid) -> list[Placed]:
    """What the SLO scaler decided, per deployment and role (status.sloAutoscaler)."""
    role = "{{namespace}}/{{deployment}} {{role}}"
    return [
        grid.row("SLO scaler"),
        _series(
            grid,
            "SLO scaler: groups wanted",
            "none",
            [("kimi_operator_slo_desired_groups", role)],
            "The count the operator renders for each role with an slo (docs/scaling.md).",
        ),
        _series(
            grid,
            "SLO scaler: request rate now and forecast",
            "reqps",
            [
                ("kimi_operator_slo_load_requests_per_second", f"{role} now"),
                ("kimi_operator_slo_forecast_requests_per_second", f"{role} forecast"),
            ],
            "The forecast looks one group start-up time ahead.",
        ),
        _series(
            grid,
            "SLO scaler: predicted at the count wanted",
            "none",
            [
                ("kimi_operator_slo_predicted_ttft_seconds", f"{role} TTFT (s)"),
                ("kimi_operator_slo_predicted_decode_tokens_per_second", f"{role} decode tok/s"),
            ],
            "The model's figures (corrected) at the objectives' percentiles.",
        ),
        _series(
            grid,
            "SLO scaler: the model's recent error",
            "percentunit",
            [
                ("kimi_operator_slo_model_ttft_error", f"{role} TTFT"),
                ("kimi_operator_slo_model_decode_error", f"{role} decode rate"),
            ],
            "Measured / predicted - 1 on the groups serving, at each answer.",
        ),
    ]


def dashboards() -> dict[str, dict[str, Any]]:
    """File name (under charts/kimi-operator/dashboards/) -> dashboard JSON model."""
    built = {
        "kimi-k3-decode.json": decode_dashboard(),
        "kimi-k3-cost.json": cost_dashboard(),
        "kimi-operator.json": operator_dashboard(),
    }
    return {
        name: json.loads(json.dumps(board.build(), cls=JSONEncoder))
        for name, board in built.items()
    }
