"""Recording rules and alerts for Kimi K3 deployments, as a plain Prometheus rules file.

Series carry `namespace` and `deployment` (the KimiDeployment's name) from the scrape: the
PodMonitor relabels `app.kubernetes.io/instance` to `deployment`. The operator's own metrics are
scraped with `honor_labels`.
"""

from typing import Any

# Decode-rate floor (tok/s per user, p50) below which KimiDecodeRateBelowFloor fires. The chart's
# PrometheusRule template replaces this exact text with its value (see FLOOR_MARKER).
DEFAULT_DECODE_FLOOR = 20
FLOOR_MARKER = "kimi:decode_tokens_per_second_per_user:p50_5m < "
TTFT_P90_LIMIT_SECONDS = 10
KV_CACHE_FULL = 0.95
# A group's start past this fraction of its budget (a bucket of the operator's histogram).
START_BUDGET = "kimi_operator_group_startup_budget_fraction"
START_BUDGET_WARN = 0.75
FAST_PATH_MIN_FRACTION = 0.5

BY = "namespace, deployment, model_name"
WINDOW = "5m"
# Recorded per deployment for the autoscalers: serving TP groups; requests waiting and KV-cache
# usage (0..1) summed over them; serving groups per tok/s of the 10th-percentile user.
SERVING_GROUPS = "kimi:serving_groups:count"
WAITING_REQUESTS = "kimi:num_requests_waiting:sum"
KV_CACHE_USAGE = "kimi:kv_cache_usage_perc:sum"
GROUPS_PER_DECODE_RATE = f"kimi:serving_groups_per_decode_rate:ratio_{WINDOW}"
# The series of every group but spec.prefill's prefill groups (the PodMonitor's `role` label).
NOT_PREFILL = '{role!="prefill"}'
# Recorded per deployment for the operator's prefill autoscaler (spec.prefill.autoscaling, the
# prefill groups alone): serving prefill groups, requests waiting in their queues, and the p90 of
# their time to first token (the prefill itself, queueing included; NaN without requests).
PREFILL = '{role="prefill"}'
PREFILL_SERVING_GROUPS = "kimi:prefill_serving_groups:count"
PREFILL_WAITING_REQUESTS = "kimi:prefill_num_requests_waiting:sum"
PREFILL_TTFT_P90 = f"kimi:prefill_time_to_first_token_seconds:p90_{WINDOW}"
# Recorded per deployment and role (`role` "prefill" or "decode" with spec.prefill, empty
# without) for the SLO scaler (spec.autoscaling.slo, spec.prefill.autoscaling.slo): the load
# (requests finished per second, mean prompt and output tokens per request, the prefix-cache hit
# ratio, requests waiting and running) and what it got (TTFT and per-user decode rate at the
# percentiles an objective may name: SLO_QUANTILES). The groups serving count as for SERVING_GROUPS.
BY_ROLE = f"{BY}, role"
ROLE_SERVING_GROUPS = "kimi_role:serving_groups:count"
ROLE_REQUESTS = f"kimi_role:requests:rate_{WINDOW}"
ROLE_PROMPT_TOKENS = f"kimi_role:request_prompt_tokens:mean_{WINDOW}"
ROLE_OUTPUT_TOKENS = f"kimi_role:request_generation_tokens:mean_{WINDOW}"
ROLE_PREFIX_HITS = f"kimi_role:prefix_cache_hit_ratio:ratio_{WINDOW}"
ROLE_WAITING = "kimi_role:num_requests_waiting:sum"
ROLE_RUNNING = "kimi_role:num_requests_running:sum"
# spec.*.slo's percentiles (50, 90, 99: of requests served at least as well) -> the quantile of
# each measure recorded: a TTFT held for P% is its P-th percentile; a decode rate P% of requests
# get at least is its (100 - P)-th.
SLO_PERCENTILES = (50, 90, 99)


def role_ttft(percentile: int) -> str:
    """The record of the TTFT `percentile`% of a role's requests get at most."""
    return f"kimi_role:time_to_first_token_seconds:p{percentile}_{WINDOW}"


def role_decode_rate(percentile: int) -> str:
    """The record of the decode rate `percentile`% of a role's requests get at least."""
    return f"kimi_role:decode_tokens_per_second_per_user:p{100 - percentile}_{WINDOW}"


def _quantile(q: float, bucket: str, by: str = BY) -> str:
    return f"histogram_quantile({q}, sum by ({by}, le) (rate({bucket}[{WINDOW}])))"


def _rate_sum(metric: str, by: str = BY, selector: str = "") -> str:
    return f"sum by ({by}) (rate({metric}{selector}[{WINDOW}]))"


def _per(numerator: str, denominator: str) -> str:
    """A ratio that is absent, not NaN, while its denominator is 0 (no requests in the window,
    no drafts, no prefix-cache queries)."""
    return f"{numerator} / ({denominator} > 0)"


def recording_rules() -> list[dict[str, str]]:
    rules: list[dict[str, str]] = []
    decode = "kimi_request_decode_tokens_per_second"
    # p10: the rate 90% of users get at least (what an autoscaling floor holds up).
    for q, name in ((0.1, "p10"), (0.5, "p50"), (0.9, "p90")):
        rules.append(
            {
                "record": f"kimi:decode_tokens_per_second_per_user:{name}_{WINDOW}",
                "expr": _quantile(q, f"{decode}_bucket"),
            }
        )
    rules.append(
        {
            "record": f"kimi:decode_tokens_per_second_per_user:mean_{WINDOW}",
            "expr": _per(_rate_sum(f"{decode}_sum"), _rate_sum(f"{decode}_count")),
        }
    )
    for metric, stem in (
        ("vllm:inter_token_latency_seconds", "kimi:inter_token_latency_seconds"),
        ("vllm:time_to_first_token_seconds", "kimi:time_to_first_token_seconds"),
    ):
        for q, name in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
            rules.append(
                {"record": f"{stem}:{name}_{WINDOW}", "expr": _quantile(q, f"{metric}_bucket")}
            )
    rules += [
        {
            "record": f"kimi:generation_tokens_per_second:rate_{WINDOW}",
            "expr": _rate_sum("vllm:generation_tokens_total"),
        },
        {"record": "kimi:engine_gpus:sum", "expr": f"sum by ({BY}) (kimi_engine_gpus)"},
        # What spec.autoscaling scales on (builders.autoscaling). vLLM's own series come from the
        # leaders only, one engine per TP group: a group counts once it serves, so a group that
        # waits for capacity never lowers the per-group load the autoscaler sees. The prefill
        # groups of spec.prefill are not the groups it scales (role="prefill" left out).
        {
            "record": SERVING_GROUPS,
            "expr": f"count by ({BY}) (vllm:num_requests_running{NOT_PREFILL})",
        },
        {
            "record": WAITING_REQUESTS,
            "expr": f"sum by ({BY}) (vllm:num_requests_waiting{NOT_PREFILL})",
        },
        {
            "record": KV_CACHE_USAGE,
            "expr": f"sum by ({BY}) (vllm:kv_cache_usage_perc{NOT_PREFILL})",
        },
        # What the operator scales spec.prefill's prefill groups on (prefill_scaling.py).
        {
            "record": PREFILL_SERVING_GROUPS,
            "expr": f"count by ({BY}) (vllm:num_requests_running{PREFILL})",
        },
        {
            "record": PREFILL_WAITING_REQUESTS,
            "expr": f"sum by ({BY}) (vllm:num_requests_waiting{PREFILL})",
        },
        {
            "record": PREFILL_TTFT_P90,
            "expr": _quantile(0.9, f"vllm:time_to_first_token_seconds_bucket{PREFILL}"),
        },
        {
            "record": GROUPS_PER_DECODE_RATE,
            "expr": _per(SERVING_GROUPS, f"kimi:decode_tokens_per_second_per_user:p10_{WINDOW}"),
        },
        {
            "record": f"kimi:generation_tokens_per_gpu_second:rate_{WINDOW}",
            "expr": f"kimi:generation_tokens_per_second:rate_{WINDOW} / kimi:engine_gpus:sum",
        },
        {
            # Mean tokens per verify step: the bonus token plus the accepted drafts.
            "record": f"kimi:spec_decode_acceptance_length:ratio_{WINDOW}",
            "expr": "1 + "
            + _per(
                _rate_sum("vllm:spec_decode_num_accepted_tokens_total"),
                _rate_sum("vllm:spec_decode_num_drafts_total"),
            ),
        },
        {
            # Share of verify steps whose draft token at `position` was accepted.
            "record": f"kimi:spec_decode_acceptance_per_position:ratio_{WINDOW}",
            "expr": _rate_sum(
                "vllm:spec_decode_num_accepted_tokens_per_pos_total", f"{BY}, position"
            )
            + f" / on ({BY}) group_left {_rate_sum('vllm:spec_decode_num_drafts_total')}",
        },
        {
            # Share of pure decode steps (prefill and mixed batches left out: they never can)
            # that ran the specialized decode.
            "record": f"kimi:decode_fast_path_fraction:ratio_{WINDOW}",
            "expr": _per(
                _rate_sum(
                    "kimi_decode_steps_total", f"{BY}, decode_backend", '{path="specialized"}'
                ),
                _rate_sum(
                    "kimi_decode_steps_total",
                    f"{BY}, decode_backend",
                    '{reason!~"prefill|mixed_batch"}',
                ),
            ),
        },
        {
            "record": f"kimi:decode_fallback_steps:rate_{WINDOW}",
            "expr": _rate_sum(
                "kimi_decode_steps_total", f"{BY}, decode_backend, reason", '{path="fallback"}'
            ),
        },
        {
            "record": f"kimi:prefix_cache_hit_ratio:ratio_{WINDOW}",
            "expr": _per(
                _rate_sum("vllm:prefix_cache_hits_total"),
                _rate_sum("vllm:prefix_cache_queries_total"),
            ),
        },
        {
            # The CPU KV tier (kvCache.cpuOffload): prompt tokens it held of those the GPU
            # prefix cache missed (the KV connector's counters: vLLM calls them external).
            "record": f"kimi:offload_hit_ratio:ratio_{WINDOW}",
            "expr": _per(
                _rate_sum("vllm:external_prefix_cache_hits_total"),
                _rate_sum("vllm:external_prefix_cache_queries_total"),
            ),
        },
    ]
    return rules + _role_rules()


def _role_rules() -> list[dict[str, str]]:
    """The SLO scaler's load and measures, per deployment and role (BY_ROLE)."""

    def mean(histogram: str) -> str:
        return _per(
            _rate_sum(f"{histogram}_sum", BY_ROLE), _rate_sum(f"{histogram}_count", BY_ROLE)
        )

    decode = "kimi_request_decode_tokens_per_second_bucket"
    ttft = "vllm:time_to_first_token_seconds_bucket"
    return [
        {
            "record": ROLE_SERVING_GROUPS,
            "expr": f"count by ({BY_ROLE}) (vllm:num_requests_running)",
        },
        {"record": ROLE_WAITING, "expr": f"sum by ({BY_ROLE}) (vllm:num_requests_waiting)"},
        {"record": ROLE_RUNNING, "expr": f"sum by ({BY_ROLE}) (vllm:num_requests_running)"},
        {"record": ROLE_REQUESTS, "expr": _rate_sum("vllm:request_success_total", BY_ROLE)},
        {"record": ROLE_PROMPT_TOKENS, "expr": mean("vllm:request_prompt_tokens")},
        {"record": ROLE_OUTPUT_TOKENS, "expr": mean("vllm:request_generation_tokens")},
        {
            "record": ROLE_PREFIX_HITS,
            "expr": _per(
                _rate_sum("vllm:prefix_cache_hits_total", BY_ROLE),
                _rate_sum("vllm:prefix_cache_queries_total", BY_ROLE),
            ),
        },
        *(
            {"record": role_ttft(p), "expr": _quantile(p / 100, ttft, BY_ROLE)}
            for p in SLO_PERCENTILES
        ),
        *(
            {"record": role_decode_rate(p), "expr": _quantile((100 - p) / 100, decode, BY_ROLE)}
            for p in SLO_PERCENTILES
        ),
    ]


def _alert(
    name: str, expr: str, duration: str, *, severity: str, summary: str, description: str
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": duration,
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "description": description},
    }


def alerting_rules(decode_floor: float = DEFAULT_DECODE_FLOOR) -> list[dict[str, Any]]:
    where = "{{ $labels.namespace }}/{{ $labels.deployment }}"
    return [
        _alert(
            "KimiDecodeFastPathFallback",
            f'kimi:decode_fast_path_fraction:ratio_{WINDOW}{{decode_backend="latency_specialized"}}'
            f" < {FAST_PATH_MIN_FRACTION}",
            "15m",
            severity="warning",
            summary=f"Kimi K3 {where}: the specialized decode path is not used",
            description=(
                "Only {{ $value | humanizePercentage }} of pure decode steps ran the latency-"
                'specialized decode. See kimi_decode_steps_total{path="fallback"} by reason: '
                "piecewise_graphs or outside_cuda_graphs means the CUDA graph mode was "
                "downgraded at start-up; batch_too_large means more than 64 decode tokens per step."
            ),
        ),
        _alert(
            "KimiDecodePathNotInstrumented",
            "max by (namespace, deployment, pod) (kimi_decode_path_instrumented) == 0",
            "15m",
            severity="info",
            summary=f"Kimi K3 {where}: decode path counters unavailable",
            description=(
                "The kimi_kernels plugin could not instrument this vLLM's decode path "
                "(its internals differ); serving is unaffected but kimi_decode_steps_total "
                "is missing."
            ),
        ),
        _alert(
            "KimiDecodeRateBelowFloor",
            f"{FLOOR_MARKER}{decode_floor:g}",
            "10m",
            severity="warning",
            summary=f"Kimi K3 {where}: per-user decode rate below the floor",
            description=(
                "The median user decodes at {{ $value | humanize }} tok/s (prefill "
                f"excluded), below the floor of {decode_floor:g} tok/s."
            ),
        ),
        _alert(
            "KimiDeploymentNotReady",
            'sum by (condition, status) (kimi_operator_deployments{condition="Ready", '
            'status!="True"}) > 0',
            "10m",
            severity="critical",
            summary="{{ $value }} KimiDeployment(s) not Ready",
            description=("kubectl get kimi -A shows which; its Ready condition says why."),
        ),
        _alert(
            "KimiGroupStartNearBudget",
            f"sum(increase({START_BUDGET}_count[1h])) - "
            f'sum(increase({START_BUDGET}_bucket{{le="{START_BUDGET_WARN}"}}[1h])) > 0',
            "0m",
            severity="warning",
            summary="A Kimi K3 group start used most of its budget",
            description=(
                f"A TP group took more than {START_BUDGET_WARN:.0%} of "
                "spec.serving.startupTimeoutMinutes to become Ready in the last hour: the next "
                "slower start is killed by its startup probe. kubectl get kimi -A -o "
                "jsonpath='{..groups}' shows each group's startupSeconds; see "
                "docs/group-lifecycle.md (the compile caches, the load format)."
            ),
        ),
        _alert(
            "KimiKVCacheNearlyFull",
            f"max by ({BY}) (vllm:kv_cache_usage_perc) > {KV_CACHE_FULL}",
            "10m",
            severity="warning",
            summary=f"Kimi K3 {where}: KV cache nearly full",
            description=(
                "KV cache usage is {{ $value | humanizePercentage }}; requests will queue or be "
                "preempted. Add replicas or lower maxNumSeqs."
            ),
        ),
        _alert(
            "KimiTimeToFirstTokenHigh",
            f"kimi:time_to_first_token_seconds:p90_{WINDOW} > {TTFT_P90_LIMIT_SECONDS}",
            "10m",
            severity="warning",
            summary=f"Kimi K3 {where}: TTFT p90 high",
            description=(
                "90% of requests wait up to {{ $value | humanizeDuration }} for their first token."
            ),
        ),
    ]


def rules_file(decode_floor: float = DEFAULT_DECODE_FLOOR) -> dict[str, Any]:
    return {
        "groups": [
            {"name": "kimi-k3.recording", "rules": recording_rules()},
            {"name": "kimi-k3.alerts", "rules": alerting_rules(decode_floor)},
        ]
    }
