"""Cross-field rules, each written once as CEL (for the CRD) and once in Python (for pydantic).

A rule is attached to the object at `scope` (a path below `spec`), exactly where its
`x-kubernetes-validations` entry goes in the CRD; `check` receives the same value CEL sees as
`self` (the defaulted object, camelCase keys) and must return the same verdict. The corpus and
property tests in tests/kimi_operator/api/test_one_verdict.py hold the two to that.
"""

import re
from collections.abc import Mapping, Sequence

from kimi_operator.api import vllm_parse
from kimi_operator.api.constants import (
    FAST_PATH_MAX_DECODE_TOKENS,
    TRACE_ID_PLACEHOLDER,
    TRACE_UI_URL,
)
from kimi_operator.api.engine_args import (
    ENGINE_ARG_REFUSALS,
    KNOWN_OPTIONS,
    KV_TRANSFER_CONFIG,
    KV_TRANSFER_FLAGS,
    SHARED_ROLE_FLAGS,
    ForbiddenFlags,
    KnownOptions,
)
from kimi_operator.api.host_memory import host_memory_warnings
from kimi_operator.api.owned_env import DISAGGREGATION_ENV, OWNED_ENV, TRACING_ENV, OwnedEnv
from kimi_operator.api.pod_rules import POD_RULES
from kimi_operator.api.rule import Json, Rule, Violation
from kimi_operator.api.scaling_rules import AUTOSCALING_RULES, PREFILL_AUTOSCALING_RULES
from kimi_operator.api.vllm_flags import VLLM_VERSION

AUX_STREAM_ENV = "VLLM_KIMI_K3_AUX_ATTN_RES_STREAM"
FP8_KV_DTYPES = ("fp8", "fp8_e4m3")


def _one_source(source: Mapping[str, Json]) -> bool:
    return ("pvc" in source) != ("huggingface" in source)


def _source_keys(source: Mapping[str, Json]) -> list[str]:
    return sorted(source)


def _cel_one_source(field: str) -> str:
    return f"has(self.{field}.pvc) != has(self.{field}.huggingface)"


def _cache_access_rule(scope: tuple[str, ...]) -> Rule:
    """The weights cache must be shared across nodes and writable by its download Job."""
    return Rule(
        scope=(*scope, "huggingface", "cache"),
        reads=(("accessMode",),),
        field="accessMode",
        cel="self.accessMode == 'ReadWriteMany'",
        check=lambda cache: cache["accessMode"] == "ReadWriteMany",
        problem="the weights cache is written by a download Job and read by pods on several "
        "nodes (a TP group spans trays), which a single-node or read-only claim cannot serve",
        allowed="ReadWriteMany",
        got=lambda cache: cache["accessMode"],
    )


def _cel_string(text: str) -> str:
    """`text` inside a single-quoted CEL string literal, non-ASCII as `\\uXXXX` escapes (so the
    CRD stays ASCII; CEL decodes them before `matches` sees the pattern)."""
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return "".join(ch if ord(ch) < 128 else f"\\u{ord(ch):04x}" for ch in escaped)


ENGINE_ARGS = ("engineArgs",)
PREFILL_ENGINE_ARGS = ("prefill", "engineArgs")


def _engine_arg_rule(group: ForbiddenFlags, scope: tuple[str, ...] = ENGINE_ARGS) -> Rule:
    pattern = _cel_string(group.pattern)
    return Rule(
        scope=scope,
        reads=((),),
        field="",
        cel=f"self.all(a, !a.matches('{pattern}'))",
        check=lambda args: not group.refused(args),
        problem=f"{group.label} may not be set here: {group.reason}",
        allowed="other vLLM flags",
        got=group.refused,
    )


def _known_option_rule(group: KnownOptions, scope: tuple[str, ...]) -> Rule:
    return Rule(
        scope=scope,
        reads=((),),
        field="",
        cel=f"self.all(a, !a.matches('{_cel_string(group.guard)}') || "
        f"a.matches('{_cel_string(group.known)}'))",
        check=lambda args: not group.refused(args),
        problem=f"not an option of vLLM {VLLM_VERSION}'s serve, or an abbreviation several "
        "options share; vLLM would exit at start",
        allowed="vllm serve's options, or a prefix only one of them has",
        got=group.refused,
        hint=lambda got: "".join(
            f"; {a}" + vllm_parse.closest_flag(a.partition("=")[0]).replace("; ", ": ", 1)
            for a in got
        ),
    )


def _by_cel_rules(element: str) -> bool:
    """Whether a CEL rule of engineArgs already refuses this element."""
    groups: tuple[ForbiddenFlags | KnownOptions, ...] = (*ENGINE_ARG_REFUSALS, *KNOWN_OPTIONS)
    return any(group.refused([element]) for group in groups)


def _parse_problems(args: Sequence[str]) -> list[str]:
    return [why for element, why in vllm_parse.problems(args) if not _by_cel_rules(element)]


def _parse_rule(scope: tuple[str, ...]) -> Rule:
    """Values and counts of values vLLM's parser would refuse: CEL sees list items one by one, not
    an option with the item after it, so only the operator and `validate` check these."""
    return Rule(
        scope=scope,
        reads=((),),
        field="",
        cel="",
        check=lambda args: not _parse_problems(args),
        problem=f"vLLM {VLLM_VERSION}'s serve parser would refuse this, and every pod exit at "
        "start",
        allowed="each option with the values it takes",
        got=_parse_problems,
    )


PARSE_RULE = _parse_rule(ENGINE_ARGS)


def _engine_args_rules(scope: tuple[str, ...]) -> tuple[Rule, ...]:
    """What any list of vLLM flags the operator passes on must satisfy."""
    return (
        *(_engine_arg_rule(group, scope) for group in ENGINE_ARG_REFUSALS),
        *(_known_option_rule(group, scope) for group in KNOWN_OPTIONS),
        PARSE_RULE if scope == ENGINE_ARGS else _parse_rule(scope),
    )


def _owned_env_bad(owned: OwnedEnv, env: Sequence[Mapping[str, Json]]) -> list[Json]:
    """Values (or valueFroms) of `owned` in `env` that do not mean what the operator sets."""

    def same(entry: Mapping[str, Json]) -> bool:
        value = entry.get("value")
        return bool(owned.same) and isinstance(value, str) and bool(re.search(owned.same, value))

    return [
        e.get("value", e.get("valueFrom"))
        for e in env
        if e.get("name") == owned.name and not same(e)
    ]


def _owned_env_cel(owned: OwnedEnv, env: str) -> str:
    accepted = "false"
    if owned.same:
        accepted = f"has(e.value) && e.value.matches('{_cel_string(owned.same)}')"
    return f"{env}.all(e, e.name != '{owned.name}' || {accepted})"


def _owned_env_rule(owned: OwnedEnv, scope: tuple[str, ...] = ("env",)) -> Rule:
    return Rule(
        scope=scope,
        reads=((),),
        field="",
        cel=_owned_env_cel(owned, "self"),
        check=lambda env: not _owned_env_bad(owned, env),
        problem=f"{owned.name} is set by the operator: {owned.why}",
        allowed=_owned_env_allowed(owned),
        got=lambda env: _owned_env_bad(owned, env),
    )


def _owned_env_allowed(owned: OwnedEnv) -> str:
    return f"{owned.name}={owned.same_words}, or leave it out" if owned.same else "leave it out"


def _disaggregation_env_rule(owned: OwnedEnv) -> Rule:
    """spec.env with spec.prefill: both roles get it, and the hand-over's variables are the
    operator's there."""
    return Rule(
        scope=(),
        reads=(("env",), ("prefill",)),
        field="env",
        cel=f"!has(self.prefill) || {_owned_env_cel(owned, 'self.env')}",
        check=lambda s: "prefill" not in s or not _owned_env_bad(owned, s["env"]),
        problem=f"{owned.name} is set by the operator with spec.prefill: {owned.why}",
        allowed=_owned_env_allowed(owned),
        got=lambda s: _owned_env_bad(owned, s["env"]),
    )


ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE = "expandable_segments:True"  # vLLM looks for this text in the variable


def _expandable(env: Sequence[Mapping[str, Json]]) -> list[str]:
    return [
        e["value"] for e in env if e.get("name") == ALLOC_CONF and EXPANDABLE in e.get("value", "")
    ]


def _env_names(env: Sequence[Mapping[str, Json]], names: Sequence[str]) -> list[str]:
    return [e["name"] for e in env if e.get("name") in names]


def _twice(env: Sequence[Mapping[str, Json]]) -> list[str]:
    names = [str(e.get("name")) for e in env]
    return sorted({n for n in names if names.count(n) > 1})


def _ref_count(source: Mapping[str, Json]) -> int:
    return sum(k in source for k in ("secretKeyRef", "configMapKeyRef", "fieldRef"))


def _env_list_rules(scope: tuple[str, ...]) -> tuple[Rule, ...]:
    """What any list of environment variables the operator passes on must satisfy."""
    return (
        Rule(
            scope=scope,
            reads=((),),
            field="",
            cel="self.all(e, self.exists_one(f, f.name == e.name))",
            check=lambda env: not _twice(env),
            problem="a variable is listed more than once",
            allowed="each name once",
            got=_twice,
        ),
        Rule(
            scope=scope,
            reads=((),),
            field="",
            cel="self.all(e, !has(e.value) || !has(e.valueFrom))",
            check=lambda env: all(not ("value" in e and "valueFrom" in e) for e in env),
            problem="a variable has both value and valueFrom",
            allowed="one of value or valueFrom",
            got=lambda env: [e["name"] for e in env if "value" in e and "valueFrom" in e],
        ),
        Rule(
            scope=scope,
            reads=((),),
            field="",
            cel="self.all(e, !has(e.valueFrom) || "
            "(has(e.valueFrom.secretKeyRef) ? 1 : 0) + (has(e.valueFrom.configMapKeyRef) ? 1 : 0)"
            " + (has(e.valueFrom.fieldRef) ? 1 : 0) == 1)",
            check=lambda env: all(_ref_count(e["valueFrom"]) == 1 for e in env if "valueFrom" in e),
            problem="valueFrom must name exactly one source",
            allowed="secretKeyRef, configMapKeyRef or fieldRef",
            got=lambda env: [
                e["name"] for e in env if "valueFrom" in e and _ref_count(e["valueFrom"]) != 1
            ],
        ),
    )


def _threshold_fits_decider(prefill: Mapping[str, Json]) -> bool:
    uses_threshold: bool = prefill["decider"] == "UncachedTokens"
    return uses_threshold == ("uncachedTokens" in prefill)


def _within_bounds(prefill: Mapping[str, Json]) -> bool:
    bounds = prefill.get("autoscaling")
    if bounds is None:
        return True
    return bool(bounds["minReplicas"] <= prefill["replicas"] <= bounds["maxReplicas"])


# spec.prefill (docs/disaggregation.md): the endpoint picker pairs each request's prefill and
# decode groups, so it needs the pool; both roles share every setting NIXL's handshake compares.
DISAGGREGATION_RULES: tuple[Rule, ...] = (
    *PREFILL_AUTOSCALING_RULES,
    # The operator's prefill autoscaler starts from spec.prefill.replicas.
    Rule(
        scope=("prefill",),
        reads=(("replicas",), ("autoscaling",)),
        field="replicas",
        cel="!has(self.autoscaling) || (self.replicas >= self.autoscaling.minReplicas && "
        "self.replicas <= self.autoscaling.maxReplicas)",
        check=_within_bounds,
        problem="the count the prefill autoscaler starts from is outside its bounds",
        allowed="autoscaling.minReplicas to autoscaling.maxReplicas",
        got=lambda p: p["replicas"],
    ),
    Rule(
        scope=(),
        reads=(("prefill",), ("routing", "mode")),
        field="routing.mode",
        cel="!has(self.prefill) || self.routing.mode == 'InferencePool'",
        check=lambda s: "prefill" not in s or s["routing"]["mode"] == "InferencePool",
        problem="spec.prefill needs llm-d's endpoint picker to pair each request's prefill and "
        "decode groups, which only mode InferencePool deploys (a Service would send requests "
        "to either role at random)",
        allowed="InferencePool with spec.prefill; or no spec.prefill",
        got=lambda s: s["routing"]["mode"],
    ),
    Rule(
        scope=("prefill",),
        reads=(("decider",), ("uncachedTokens",)),
        field="uncachedTokens",
        cel="(self.decider == 'UncachedTokens') == has(self.uncachedTokens)",
        check=_threshold_fits_decider,
        problem="uncachedTokens is the threshold of decider UncachedTokens, and only of it",
        allowed="a number of tokens with decider UncachedTokens; none with decider Always",
        got=lambda p: p.get("uncachedTokens", "none"),
    ),
    Rule(
        scope=(),
        reads=(("prefill",), ("engineArgs",)),
        field="engineArgs",
        cel=f"!has(self.prefill) || "
        f"self.engineArgs.all(a, !a.matches('{_cel_string(KV_TRANSFER_FLAGS.pattern)}'))",
        check=lambda s: "prefill" not in s or not KV_TRANSFER_FLAGS.refused(s["engineArgs"]),
        problem=f"{KV_TRANSFER_FLAGS.label} may not be set here: {KV_TRANSFER_FLAGS.reason}",
        allowed="other vLLM flags; or no spec.prefill",
        got=lambda s: KV_TRANSFER_FLAGS.refused(s["engineArgs"]),
    ),
    Rule(
        scope=(),
        reads=(("prefill",), ("routing", "endpointPicker", "weights", "prefixCache")),
        field="routing.endpointPicker.weights.prefixCache",
        cel="!has(self.prefill) || self.routing.endpointPicker.weights.prefixCache > 0",
        check=lambda s: (
            "prefill" not in s or s["routing"]["endpointPicker"]["weights"]["prefixCache"] > 0
        ),
        problem="llm-d's disagg-profile-handler needs the prefix-cache scorer in its decode and "
        "prefill profiles",
        allowed="1 to 100 with spec.prefill",
        got=lambda s: s["routing"]["endpointPicker"]["weights"]["prefixCache"],
    ),
    # vLLM 0.33.0 (config/vllm.py, _post_init_kv_transfer_config) swaps the connector of
    # --kv-transfer-config for its offloading connector when --kv-offloading-size is set.
    Rule(
        scope=(),
        reads=(("prefill",), ("kvCache", "cpuOffload")),
        field="kvCache.cpuOffload",
        cel="!has(self.prefill) || !has(self.kvCache.cpuOffload)",
        check=lambda s: "prefill" not in s or "cpuOffload" not in s["kvCache"],
        problem="spec.prefill with spec.kvCache.cpuOffload: vLLM replaces each role's NIXL "
        "connector with the CPU tier's offloading connector, losing the hand-over; the pair "
        "needs vLLM's MultiConnector, which the operator does not render yet",
        allowed="spec.prefill or spec.kvCache.cpuOffload, not both",
        got=lambda s: s["kvCache"]["cpuOffload"],
    ),
    *(_disaggregation_env_rule(owned) for owned in DISAGGREGATION_ENV),
    Rule(
        scope=(),
        reads=(("speculative",), ("prefill", "env")),
        field="prefill.env",
        cel=f"!has(self.speculative) || !has(self.prefill) || "
        f"!self.prefill.env.exists(e, e.name == '{AUX_STREAM_ENV}')",
        check=lambda s: (
            "speculative" not in s
            or "prefill" not in s
            or not _env_names(s["prefill"]["env"], (AUX_STREAM_ENV,))
        ),
        problem=f"{AUX_STREAM_ENV} may not be set with spec.speculative: vLLM's specialized "
        "decode rejects the auxiliary stream with speculative decoding",
        allowed="no speculative, or no such variable",
        got=lambda s: _env_names(s["prefill"]["env"], (AUX_STREAM_ENV,)),
    ),
    *_engine_args_rules(PREFILL_ENGINE_ARGS),
    *(
        _engine_arg_rule(group, PREFILL_ENGINE_ARGS)
        for group in (KV_TRANSFER_FLAGS, SHARED_ROLE_FLAGS)
    ),
    *(
        _owned_env_rule(owned, ("prefill", "env"))
        for owned in (*OWNED_ENV, *DISAGGREGATION_ENV, *TRACING_ENV)
    ),
    *_env_list_rules(("prefill", "env")),
)

TRACING = ("observability", "tracing")

# The tracing object's own rules: a deployment's (the CRD's) and the operator-wide default's
# (run_args.py checks the chart's value with them).
TRACING_RULES: tuple[Rule, ...] = (
    Rule(
        scope=TRACING,
        reads=(("detailedTraces",), ("endpoint",)),
        field="detailedTraces",
        cel="!self.detailedTraces || self.endpoint != ''",
        check=lambda t: not t["detailedTraces"] or t["endpoint"] != "",
        problem="detailed traces are spans, and without an endpoint no span is exported",
        allowed="false; or true with an endpoint",
        got=lambda t: t["detailedTraces"],
    ),
    Rule(
        scope=TRACING,
        reads=(("uiUrl",),),
        field="uiUrl",
        cel=f"self.uiUrl == '' || self.uiUrl.matches('{_cel_string(TRACE_UI_URL)}')",
        check=lambda t: t["uiUrl"] == "" or re.match(TRACE_UI_URL, t["uiUrl"]) is not None,
        problem=f"a link to a trace needs an http(s) URL with {TRACE_ID_PLACEHOLDER} where the "
        "trace id goes",
        allowed=f'"", or e.g. https://jaeger.example/trace/{TRACE_ID_PLACEHOLDER}',
        got=lambda t: t["uiUrl"],
    ),
    Rule(
        scope=TRACING,
        reads=(("uiUrl",), ("endpoint",)),
        field="uiUrl",
        cel="self.uiUrl == '' || self.endpoint != ''",
        check=lambda t: t["uiUrl"] == "" or t["endpoint"] != "",
        problem="it links to the traces the endpoint receives, and without an endpoint none is "
        "exported",
        allowed='""; or a link with an endpoint',
        got=lambda t: t["uiUrl"],
    ),
    # vllm/tracing/otel.py (get_span_exporter) builds its gRPC exporter with insecure=True.
    Rule(
        scope=TRACING,
        reads=(("protocol",), ("endpoint",)),
        field="endpoint",
        cel="self.protocol != 'grpc' || !self.endpoint.startsWith('https://')",
        check=lambda t: t["protocol"] != "grpc" or not t["endpoint"].startswith("https://"),
        problem=f"vLLM {VLLM_VERSION} exports OTLP over gRPC in plain text only (no TLS), "
        "and would send to this endpoint without it",
        allowed="an http:// endpoint with protocol grpc; https:// with protocol http/protobuf",
        got=lambda t: t["endpoint"],
    ),
)


def _tracing_over_http(spec: Mapping[str, Json]) -> bool:
    tracing = spec["observability"].get("tracing")
    return bool(tracing and tracing["endpoint"] and tracing["protocol"] != "grpc")


RULES: tuple[Rule, ...] = (
    # Both enums' values divide each other, so every group fills whole nodes; what can still go
    # wrong is a TP group split across 8-GPU (HGX) nodes, which share no NVLink domain.
    Rule(
        scope=(),
        reads=(("gpus",), ("gpusPerNode",), ("decode", "backend")),
        field="gpusPerNode",
        cel="self.decode.backend != 'latency_specialized' || self.gpusPerNode == 4 || "
        "self.gpus == self.gpusPerNode",
        check=lambda s: (
            s["decode"]["backend"] != "latency_specialized"
            or s["gpusPerNode"] == 4
            or s["gpus"] == s["gpusPerNode"]
        ),
        problem="8-GPU nodes share no NVLink domain, and the latency-specialized decode needs "
        "multicast memory across the whole TP group",
        allowed="4 (GB300 NVL72 trays); or 8 with spec.gpus 8; or decode.backend auto",
        got=lambda s: s["gpusPerNode"],
    ),
    # A TP group across trays reaches the other trays' GPU memory only through an IMEX channel,
    # which only a ComputeDomain hands out; the fast path needs multicast memory across the group.
    Rule(
        scope=(),
        reads=(("gpus",), ("gpusPerNode",), ("decode", "backend"), ("computeDomain",)),
        field="computeDomain",
        cel="self.decode.backend != 'latency_specialized' || self.gpus == self.gpusPerNode || "
        "self.computeDomain != 'Disabled'",
        check=lambda s: (
            s["decode"]["backend"] != "latency_specialized"
            or s["gpus"] == s["gpusPerNode"]
            or s["computeDomain"] != "Disabled"
        ),
        problem="a latency_specialized TP group spanning several nodes needs multicast memory "
        "across them, which only a ComputeDomain's IMEX channel provides",
        allowed="Auto or Required; or Disabled with one node per group (gpus equal to "
        "gpusPerNode) or decode.backend auto",
        got=lambda s: s["computeDomain"],
    ),
    Rule(
        scope=(),
        reads=(("gpus",), ("decode", "contextParallelSize")),
        field="decode.contextParallelSize",
        cel="self.decode.contextParallelSize == 1 || self.decode.contextParallelSize == self.gpus",
        check=lambda s: s["decode"]["contextParallelSize"] in (1, s["gpus"]),
        problem="decode context parallelism must be off or span the whole TP group",
        allowed="1 or spec.gpus",
        got=lambda s: s["decode"]["contextParallelSize"],
    ),
    Rule(
        scope=(),
        reads=(("decode", "backend"), ("kvCache", "dtype")),
        field="kvCache.dtype",
        cel="self.decode.backend != 'latency_specialized' || "
        "self.kvCache.dtype in ['fp8', 'fp8_e4m3']",
        check=lambda s: (
            s["decode"]["backend"] != "latency_specialized"
            or s["kvCache"]["dtype"] in FP8_KV_DTYPES
        ),
        problem="decode.backend latency_specialized reads FP8 e4m3 KV cache rows only",
        allowed="fp8, fp8_e4m3; or decode.backend auto",
        got=lambda s: s["kvCache"]["dtype"],
    ),
    Rule(
        scope=("model",),
        reads=(("source",),),
        field="source",
        cel=_cel_one_source("source"),
        check=lambda m: _one_source(m["source"]),
        problem="exactly one weight source must be set",
        allowed="pvc or huggingface",
        got=lambda m: _source_keys(m["source"]),
    ),
    Rule(
        scope=("speculative",),
        reads=(("draftSource",),),
        field="draftSource",
        cel=_cel_one_source("draftSource"),
        check=lambda s: _one_source(s["draftSource"]),
        problem="exactly one weight source must be set",
        allowed="pvc or huggingface",
        got=lambda s: _source_keys(s["draftSource"]),
    ),
    _cache_access_rule(("model", "source")),
    _cache_access_rule(("speculative", "draftSource")),
    Rule(
        scope=(),
        reads=(("env",),),
        field="env",
        cel=f"!has(self.speculative) || !self.env.exists(e, e.name == '{AUX_STREAM_ENV}')",
        check=lambda s: "speculative" not in s or not _env_names(s["env"], (AUX_STREAM_ENV,)),
        problem=f"{AUX_STREAM_ENV} may not be set with spec.speculative: vLLM's specialized "
        "decode rejects the auxiliary stream with speculative decoding",
        allowed="no speculative, or no such variable",
        got=lambda s: _env_names(s["env"], (AUX_STREAM_ENV,)),
    ),
    *(_owned_env_rule(owned) for owned in (*OWNED_ENV, *TRACING_ENV)),
    *_env_list_rules(("env",)),
    Rule(
        scope=("scheduling",),
        reads=(("tolerations",),),
        field="tolerations",
        cel="self.tolerations.all(t, t.operator != 'Exists' || t.value == '')",
        check=lambda s: all(
            t["operator"] != "Exists" or t["value"] == "" for t in s["tolerations"]
        ),
        problem="a toleration with operator Exists cannot have a value",
        allowed="operator Equal with a value, or Exists without one",
        got=lambda s: [t for t in s["tolerations"] if t["operator"] == "Exists" and t["value"]],
    ),
    *AUTOSCALING_RULES,
    # The CPU tier keeps prefixes: vLLM's SimpleCPUOffloadConnector turns itself off without
    # prefix caching, and the OffloadingConnector would store blocks no request looks up.
    Rule(
        scope=("kvCache",),
        reads=(("cpuOffload",), ("enablePrefixCaching",)),
        field="enablePrefixCaching",
        cel="!has(self.cpuOffload) || self.enablePrefixCaching",
        check=lambda kv: "cpuOffload" not in kv or kv["enablePrefixCaching"],
        problem="the CPU tier of kvCache.cpuOffload holds cached prefixes, which need prefix "
        "caching (vLLM's CPU offload turns itself off without it)",
        allowed="true, or no kvCache.cpuOffload",
        got=lambda kv: kv["enablePrefixCaching"],
    ),
    # vllm/config/vllm.py (_verify_kv_transfer_compat): any KV connector with the expandable
    # segments allocator is an error at start. vLLM exempts the cumem allocator, which its CPU
    # build (tests/gate) cannot build a config with: not offered until checked on a GPU.
    Rule(
        scope=(),
        reads=(("kvCache", "cpuOffload"), ("env",)),
        field="env",
        cel=f"!has(self.kvCache.cpuOffload) || !self.env.exists(e, e.name == '{ALLOC_CONF}' && "
        f"has(e.value) && e.value.contains('{EXPANDABLE}'))",
        check=lambda s: "cpuOffload" not in s["kvCache"] or not _expandable(s["env"]),
        problem=f"{ALLOC_CONF} with {EXPANDABLE} and the KV connector of kvCache.cpuOffload: "
        "vLLM refuses the pair at start (the allocator may remap the KV cache's pages under the "
        "connector's registered copies)",
        allowed=f"no {EXPANDABLE}, or no kvCache.cpuOffload",
        got=lambda s: _expandable(s["env"]),
    ),
    Rule(
        scope=(),
        reads=(("kvCache", "cpuOffload"), ("engineArgs",)),
        field="engineArgs",
        cel="!has(self.kvCache.cpuOffload) || "
        f"self.engineArgs.all(a, !a.matches('{_cel_string(KV_TRANSFER_CONFIG.pattern)}'))",
        check=lambda s: (
            "cpuOffload" not in s["kvCache"] or not KV_TRANSFER_CONFIG.refused(s["engineArgs"])
        ),
        problem=f"{KV_TRANSFER_CONFIG.label} beside kvCache.cpuOffload: "
        + KV_TRANSFER_CONFIG.reason,
        allowed="no --kv-transfer-config, or no kvCache.cpuOffload",
        got=lambda s: KV_TRANSFER_CONFIG.refused(s["engineArgs"]),
    ),
    # vLLM 0.33.0 reads fastsafetensors with its own iterator, which never looks at the strategy
    # (model_loader/default_loader.py, _get_weights_iterator): it would be dropped in silence.
    Rule(
        scope=("serving",),
        reads=(("loadFormat",), ("safetensorsLoadStrategy",)),
        field="safetensorsLoadStrategy",
        cel="self.loadFormat != 'fastsafetensors' || !has(self.safetensorsLoadStrategy)",
        check=lambda s: s["loadFormat"] != "fastsafetensors" or "safetensorsLoadStrategy" not in s,
        problem="fastsafetensors reads the checkpoint its own way and ignores the strategy",
        allowed="loadFormat auto or safetensors, or no safetensorsLoadStrategy",
        got=lambda s: s.get("safetensorsLoadStrategy"),
    ),
    # An HTTPRoute attaches an InferencePool to the Gateway: there is none without the pool.
    Rule(
        scope=("routing",),
        reads=(("mode",), ("gatewayRef",)),
        field="gatewayRef",
        cel="self.mode == 'InferencePool' || !has(self.gatewayRef)",
        check=lambda r: r["mode"] == "InferencePool" or "gatewayRef" not in r,
        problem="a Gateway routes to an InferencePool, which mode Service does not create",
        allowed="mode InferencePool, or no gatewayRef",
        got=lambda r: r["mode"],
    ),
    # Only the endpoint picker of an InferencePool reads KV events.
    Rule(
        scope=("routing",),
        reads=(("mode",), ("prefixScoring",)),
        field="prefixScoring",
        cel="self.mode == 'InferencePool' || self.prefixScoring == 'Estimated'",
        check=lambda r: r["mode"] == "InferencePool" or r["prefixScoring"] == "Estimated",
        problem="precise prefix scoring is the endpoint picker's, which mode Service does not "
        "create",
        allowed="Estimated; or Precise with mode InferencePool",
        got=lambda r: r["prefixScoring"],
    ),
    Rule(
        scope=("routing",),
        reads=(("prefixScoring",), ("endpointPicker", "weights", "prefixCache")),
        field="prefixScoring",
        cel="self.prefixScoring != 'Precise' || self.endpointPicker.weights.prefixCache > 0",
        check=lambda r: (
            r["prefixScoring"] != "Precise" or r["endpointPicker"]["weights"]["prefixCache"] > 0
        ),
        problem="precise prefix scoring feeds the prefix-cache scorer, which weight 0 leaves out",
        allowed="Estimated; or Precise with endpointPicker.weights.prefixCache above 0",
        got=lambda r: r["endpointPicker"]["weights"]["prefixCache"],
    ),
    Rule(
        scope=(),
        reads=(("routing", "prefixScoring"), ("kvCache", "enablePrefixCaching")),
        field="routing.prefixScoring",
        cel="self.routing.prefixScoring != 'Precise' || self.kvCache.enablePrefixCaching",
        check=lambda s: (
            s["routing"]["prefixScoring"] != "Precise" or s["kvCache"]["enablePrefixCaching"]
        ),
        problem="KV cache events tell which cached prefixes a group holds: without prefix "
        "caching there are none to report",
        allowed="Estimated; or Precise with kvCache.enablePrefixCaching true",
        got=lambda s: s["routing"]["prefixScoring"],
    ),
    # The picker reads the model from the events' topic, `kv@<pod>@<model>`, split on `@`.
    Rule(
        scope=(),
        reads=(("routing", "prefixScoring"), ("model", "name")),
        field="model.name",
        cel="self.routing.prefixScoring != 'Precise' || !self.model.name.contains('@')",
        check=lambda s: s["routing"]["prefixScoring"] != "Precise" or "@" not in s["model"]["name"],
        problem="with precise prefix scoring the model name is part of the KV events' topic, "
        "which the endpoint picker splits on '@'",
        allowed="a name without '@'; or routing.prefixScoring Estimated",
        got=lambda s: s["model"]["name"],
    ),
    # A rollout that may take every group down at once is an outage; one that may take none down
    # and add none can never start.
    Rule(
        scope=(),
        reads=(("replicas",), ("rollout", "maxUnavailable")),
        field="rollout.maxUnavailable",
        cel="self.replicas < 2 || self.rollout.maxUnavailable < self.replicas",
        check=lambda s: s["replicas"] < 2 or s["rollout"]["maxUnavailable"] < s["replicas"],
        problem="an update could take every TP group down at once",
        allowed="less than spec.replicas when spec.replicas is 2 or more",
        got=lambda s: s["rollout"]["maxUnavailable"],
    ),
    Rule(
        scope=("rollout",),
        reads=(("maxUnavailable",), ("maxSurge",)),
        field="maxUnavailable",
        cel="self.maxUnavailable > 0 || self.maxSurge > 0",
        check=lambda r: r["maxUnavailable"] > 0 or r["maxSurge"] > 0,
        problem="with maxSurge 0 as well, no group could ever be updated",
        allowed="1 or more, or 0 with rollout.maxSurge 1",
        got=lambda r: r["maxUnavailable"],
    ),
    *TRACING_RULES,
    # llm-d-router v0.10.0's InitTracing (pkg/common/observability/tracing/telemetry.go) exports
    # with otlptracegrpc alone.
    Rule(
        scope=(),
        reads=(("observability", "tracing"), ("routing", "mode")),
        field="observability.tracing.protocol",
        cel="!has(self.observability.tracing) || self.observability.tracing.endpoint == '' || "
        "self.observability.tracing.protocol == 'grpc' || self.routing.mode == 'Service'",
        check=lambda s: not _tracing_over_http(s) or s["routing"]["mode"] == "Service",
        problem="llm-d-router v0.10.0's endpoint picker and P/D sidecar, which routing.mode "
        "InferencePool deploys, export OTLP over gRPC only",
        allowed="grpc; or http/protobuf with routing.mode Service",
        got=lambda s: s["observability"]["tracing"]["protocol"],
    ),
    *POD_RULES,
    *_engine_args_rules(ENGINE_ARGS),
    *DISAGGREGATION_RULES,
)


def _at(spec: Mapping[str, Json], scope: tuple[str, ...]) -> tuple[bool, Json]:
    value: Json = spec
    for key in scope:
        if not isinstance(value, Mapping) or key not in value:
            return False, None
        value = value[key]
    return True, value


def failed_rules(spec: Mapping[str, Json], rules: Sequence[Rule] = RULES) -> list[Violation]:
    """Rules the (defaulted, camelCase) spec breaks; rules on absent objects do not apply."""
    violations = []
    for rule in rules:
        present, value = _at(spec, rule.scope)
        if present and not rule.check(value):
            violations.append(Violation(rule, rule.got(value)))
    return violations


def spec_warnings(spec: Mapping[str, Json]) -> list[str]:
    """Accepted settings that will not do what they say: every warning `validate` prints."""
    return fast_path_warnings(spec) + host_memory_warnings(spec)


def fast_path_warnings(spec: Mapping[str, Json]) -> list[str]:
    """Accepted settings that make vLLM quietly leave the fast path for some steps."""
    drafts = spec.get("speculative", {}).get("numSpeculativeTokens", 0)
    seqs = spec["decode"]["maxNumSeqs"]
    tokens = seqs * (1 + drafts)
    if spec["decode"]["backend"] != "latency_specialized" or tokens <= FAST_PATH_MAX_DECODE_TOKENS:
        return []
    return [
        f"spec.decode.maxNumSeqs: decode batches of up to {seqs} x (1 + {drafts}) = {tokens} "
        f"tokens exceed the fast path's {FAST_PATH_MAX_DECODE_TOKENS}; larger batches run on the "
        "ordinary decode path (keep maxNumSeqs x (1 + numSpeculativeTokens) <= "
        f"{FAST_PATH_MAX_DECODE_TOKENS})"
    ]
