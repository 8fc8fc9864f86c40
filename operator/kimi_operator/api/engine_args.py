"""Which vLLM flags `spec.engineArgs` may not carry, as regexes shared by CEL and Python.

vLLM's `FlexibleArgumentParser` accepts more spellings than the flag's name, and every one is
covered here:
- `--flag value`, `--flag=value`, and dotted JSON keys (`--compilation-config.mode=3`);
- underscores for dashes (`--enable_lora`);
- aliases (`--device-memory-utilization` is `--gpu-memory-utilization`): groups name vLLM's
  destinations, and every option string of a destination is refused;
- argparse abbreviations (`allow_abbrev` is on: `--enable-lor` means `--enable-lora`, `-t` means
  `-tp`), i.e. every prefix that no other vLLM 0.33.0 flag shares;
- `-O3`, `-O=3`, `-Odecode` (vLLM rewrites any `-O…` to `--optimization-level`);
- a value attached to a one-letter option: argparse reads `-n2` as `-n 2`, `-r1` as `-r 1`.

Besides the flags, `MALFORMED_ARGS` refuses elements that could hide a flag from a reviewer or from
these patterns: control and invisible characters anywhere, a first character that is whitespace, a
quote or not ASCII (look-alike dashes such as U+2010, U+2212, U+FE63, U+FF0D), and option names (an
element starting with `-`, up to its first `=`) with anything but ASCII letters, digits, `-`, `_`
and `.`. There is no shell anywhere (the pod's argv is a list): quotes are never stripped and shell
syntax is only text, so `'--enable-lora'` would reach vLLM with its quotes; such elements are
refused all the same, as mistakes or disguises.

The same pattern string is used by `re.match` in Python and by CEL's `matches()` in the CRD, so the
two verdicts cannot drift. Patterns use only syntax common to RE2 and Python.
"""

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, cached_property

from kimi_operator.api.vllm_flags import SERVE_FLAGS, SERVE_OPTIONS, VLLM_VERSION

# Matches what follows a flag name inside one element: nothing, `=value` or `.json.key...`.
_FLAG_END = r"([=.].*)?$"


@dataclass(frozen=True)
class ForbiddenFlags:
    """A group of refused flags with the reason users are told."""

    flags: tuple[str, ...]
    reason: str
    # An extra pattern (on the flag name) that also belongs to the group, e.g. anything with "lora".
    also_matching: str = ""
    # How messages name the group; default: the flags themselves.
    shown_as: str = ""

    @property
    def label(self) -> str:
        return self.shown_as or ", ".join(self.flags)

    @cached_property
    def pattern(self) -> str:
        """Regex that one engineArgs element matches (searched, as CEL's `matches` does) when it is
        refused."""
        long_names = [f[2:] for f in self.flags if f.startswith("--")]
        short_names = [f[1:] for f in self.flags if not f.startswith("--")]
        alternatives = []
        if long_names:
            alternatives.append("--" + _prefix_tree(long_names, _unique_from("--", long_names)))
        if short_names:
            alternatives.append("-" + _prefix_tree(short_names, _unique_from("-", short_names)))
        patterns = ["^(" + "|".join(alternatives) + ")" + _FLAG_END] if alternatives else []
        # argparse takes the rest of `-n2` as the value of the one-letter option `-n`.
        letters = sorted(name for name in short_names if len(name) == 1)
        if letters:
            patterns.append("^-[" + "".join(re.escape(x) for x in letters) + "]")
        if self.also_matching:
            patterns.append(self.also_matching)
        return patterns[0] if len(patterns) == 1 else "|".join(f"({p})" for p in patterns)

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern)

    def refused(self, args: Iterable[str]) -> list[str]:
        return [a for a in args if self.regex.search(a)]


def _unique_from(dashes: str, names: list[str]) -> dict[str, int]:
    """For each flag name, the shortest prefix length that no other vLLM flag shares.

    argparse expands a prefix only when one option starts with it; a shorter, ambiguous prefix makes
    vLLM fail with "ambiguous option" instead, which is not a way around the rule.
    """
    others = _names_after(dashes)
    result = {}
    for name in names:
        # In sorted order, the longest common prefix with any other name is with a neighbour.
        i = bisect.bisect_left(others, name)
        j = i + 1 if i < len(others) and others[i] == name else i
        neighbours = others[max(i - 1, 0) : i] + others[j : j + 1]
        shared = max((_common_prefix(name, o) for o in neighbours), default=0)
        result[name] = min(shared + 1, len(name))
    return result


@cache
def _names_after(dashes: str) -> list[str]:
    """Sorted vLLM option names without their dashes: long (`--`) or short (`-`) ones."""
    return sorted(
        f[len(dashes) :] for f in SERVE_FLAGS if f.startswith(dashes) and f[len(dashes)] != "-"
    )


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _char(ch: str) -> str:
    # vLLM turns underscores in flag names into dashes, so both spellings must match.
    return "[-_]" if ch == "-" else re.escape(ch)


def _prefix_tree(names: list[str], shortest: dict[str, int]) -> str:
    """Alternation matching, for each name, every prefix at least `shortest[name]` long."""
    parts = []
    for name in sorted(set(names)):
        k = shortest[name]
        head = "".join(_char(ch) for ch in name[:k])
        tail = ""
        for ch in reversed(name[k:]):
            tail = f"({_char(ch)}{tail})?"
        parts.append(head + tail)
    return "(" + "|".join(parts) + ")"


def _options(*dests: str, matching: str = "") -> tuple[str, ...]:
    """Every spelling vLLM accepts for these destinations (aliases included) or matching ones."""
    chosen = set(dests) | {d for d in SERVE_OPTIONS if matching and re.search(matching, d)}
    missing = chosen - SERVE_OPTIONS.keys()
    if missing:
        raise ValueError(f"not options of vLLM {VLLM_VERSION}: {sorted(missing)}")
    return tuple(sorted(f for d in chosen for f in SERVE_OPTIONS[d]))


FORBIDDEN_FLAG_GROUPS: tuple[ForbiddenFlags, ...] = (
    ForbiddenFlags(_options("tensor_parallel_size"), "the tensor-parallel size is spec.gpus"),
    ForbiddenFlags(
        _options("pipeline_parallel_size"),
        "the latency-specialized decode rejects pipeline parallelism",
    ),
    ForbiddenFlags(
        _options(matching=r"^data_parallel"),
        "data parallelism is spec.replicas (independent TP groups)",
        shown_as="--data-parallel-*, -dp*",
    ),
    ForbiddenFlags(
        _options("enable_expert_parallel"),
        "the latency-specialized decode rejects expert parallelism",
    ),
    ForbiddenFlags(
        _options("decode_context_parallel_size"),
        "decode context parallelism is spec.decode.contextParallelSize",
    ),
    ForbiddenFlags(
        _options(matching="lora"),
        "the latency-specialized decode rejects LoRA",
        also_matching=r"^--[^=.]*lora",
        shown_as="--enable-lora and other LoRA flags",
    ),
    ForbiddenFlags(_options("enable_dbo"), "the latency-specialized decode rejects DBO"),
    ForbiddenFlags(
        _options("enable_sleep_mode"), "the latency-specialized decode rejects sleep mode"
    ),
    ForbiddenFlags(
        _options("use_replayssm"),
        "the latency-specialized decode rejects ReplaySSM (its KDA state is updated in place)",
    ),
    ForbiddenFlags(
        _options("help"), "vLLM would print its help and exit, and the pod restart forever"
    ),
    ForbiddenFlags(
        _options("enforce_eager"),
        "the fast path needs full decode CUDA graphs (spec.decode.cudaGraphMode)",
    ),
    ForbiddenFlags(
        _options("compilation_config", "optimization_level"),
        "compilation and CUDA graphs are spec.decode.cudaGraphMode; the fast path needs its own "
        "compile mode",
        also_matching=r"^-O",
        shown_as="--compilation-config, -cc, -O",
    ),
    ForbiddenFlags(_options("additional_config"), "the decode backend is spec.decode.backend"),
    ForbiddenFlags(_options("speculative_config"), "speculative decoding is spec.speculative"),
    ForbiddenFlags(
        _options(
            "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser", "language_model_only"
        ),
        "the agent endpoint is spec.serving: toolCalling (the kimi_k3 tool parser), reasoning "
        "(the kimi_k3 reasoning parser), multimodal (false: --language-model-only)",
        shown_as="--enable-auto-tool-choice, --tool-call-parser, --reasoning-parser, "
        "--language-model-only (and their --no-/--disable- forms)",
    ),
    ForbiddenFlags(
        _options("kv_cache_dtype", "mamba_cache_dtype", "mamba_ssm_cache_dtype"),
        "cache dtypes are spec.kvCache.dtype, mambaCacheDtype and mambaSsmCacheDtype",
    ),
    ForbiddenFlags(
        _options(
            "max_num_seqs", "max_model_len", "gpu_memory_utilization", "enable_prefix_caching"
        ),
        "set spec.decode.maxNumSeqs, spec.kvCache.maxModelLen, "
        "spec.kvCache.gpuMemoryUtilizationPercent or spec.kvCache.enablePrefixCaching instead",
    ),
    ForbiddenFlags(
        _options("kv_offloading_size", "kv_offloading_backend", "kv_events_config"),
        "the CPU KV tier is spec.kvCache.cpuOffload, on vLLM's native backend (LMCache's "
        "connector does not support the hybrid KV cache manager that Kimi K3's KDA layers need), "
        "and KV events are spec.routing.prefixScoring Precise",
    ),
    ForbiddenFlags(
        _options("model", "served_model_name", "revision", "config"),
        "the model is spec.model (and --config could set any forbidden flag)",
    ),
    ForbiddenFlags(
        _options(
            "nnodes",
            "node_rank",
            "master_addr",
            "master_port",
            "headless",
            "distributed_executor_backend",
            "port",
            "host",
        ),
        "the operator sets multi-node placement and the serving port",
    ),
    ForbiddenFlags(
        _options("load_format", "safetensors_load_strategy", "shutdown_timeout"),
        "how weights are read and how long a leaving group drains are spec.serving.loadFormat, "
        "safetensorsLoadStrategy and drainSeconds",
    ),
    ForbiddenFlags(
        _options("otlp_traces_endpoint", "collect_detailed_traces"),
        "tracing is spec.observability.tracing (or the operator's default), rendered into every "
        "component with its sampling and service names",
    ),
)


# vLLM replaces the connector of a --kv-transfer-config with its offloading connector when
# --kv-offloading-size is set (config/vllm.py, _post_init_kv_transfer_config): refused beside
# spec.kvCache.cpuOffload (a rule in rules.py), allowed without it.
KV_TRANSFER_CONFIG = ForbiddenFlags(
    _options("kv_transfer_config"),
    "with spec.kvCache.cpuOffload vLLM replaces its connector with the offloading connector",
)

# An option name followed by a space: argparse reads the whole element as a value (a model name).
SPACED_ARGS = ForbiddenFlags(
    flags=(),
    reason='one flag or value per list item: write "--port", "9000" or "--port=9000"',
    also_matching=r"^-[-A-Za-z0-9_.]* ",
    shown_as="an option and its value in one item",
)

# Control characters (C0 but tab and line breaks, which inline chat templates hold; DEL; C1) and
# invisible ones (soft hyphen, zero-width, bidi controls, word joiners, BOM): literal characters in
# a class, which both Python and RE2 read.
_HIDDEN = (
    r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
    "\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff"
)
MALFORMED_ARGS = ForbiddenFlags(
    flags=(),
    reason="look-alike and invisible characters could hide a flag from review and from these "
    "checks; write values that start otherwise as --flag=value",
    also_matching=f"[{_HIDDEN}]|^[^!-~]|^[\"'`]|^-[^= ]*[^-A-Za-z0-9_.= ]",
    shown_as="elements with control or invisible characters, starting with whitespace, a quote or "
    "a non-ASCII character, or with an option name outside ASCII letters, digits, '-', '_', '.'",
)
# With spec.prefill the operator renders the KV connector of both roles (builders/vllm_args.py).
KV_TRANSFER_FLAGS = ForbiddenFlags(
    _options("kv_transfer_config"),
    "with spec.prefill the operator renders the NIXL connector of both roles",
)
# What NIXL's handshake needs equal on both roles (its compatibility hash: dtype, quantized
# layout, attention backend, KV layout of the hybrid cache manager; and the block size), which
# only spec.engineArgs, read by both roles, may set.
SHARED_ROLE_FLAGS = ForbiddenFlags(
    _options(
        "block_size",
        "attention_backend",
        "dtype",
        "quantization",
        "disable_hybrid_kv_cache_manager",
    ),
    "NIXL's hand-over needs the same value on the prefill and decode groups: set it in "
    "spec.engineArgs, which both roles get",
)
# Every refusal of engineArgs elements, each one CEL rule in the CRD.
ENGINE_ARG_REFUSALS: tuple[ForbiddenFlags, ...] = (
    *FORBIDDEN_FLAG_GROUPS,
    SPACED_ARGS,
    MALFORMED_ARGS,
)


@dataclass(frozen=True)
class KnownOptions:
    """Option-like elements (`guard`) must name a vLLM option (`known`): its exact spelling or a
    prefix no other option shares, as argparse expands it; refused otherwise (a typo, or an
    ambiguous abbreviation), as vLLM's parser would. Split by first letter so that each CEL rule
    stays within the API server's cost budget (tests/kimi_operator/api/test_crd_bounds.py)."""

    guard: str
    known: str

    @cached_property
    def _regexes(self) -> tuple[re.Pattern[str], re.Pattern[str]]:
        return re.compile(self.guard), re.compile(self.known)

    def refused(self, args: Iterable[str]) -> list[str]:
        guard, known = self._regexes
        return [a for a in args if guard.search(a) and not known.search(a)]


_NAME_CHARS = "[-A-Za-z0-9_.]*(=|$)"
# Each CEL pattern of known long names stays under this many characters.
_KNOWN_PATTERN_BUDGET = 6000


def _short_known() -> str:
    """Single-dash options: the exact name (`-tp`, `-tp=8`), a prefix only one has, bare or with
    a dotted JSON key (argparse splits no `=` off an abbreviated single-dash option), a one-letter
    option with its value attached (`-qfp8`), and `-O…`, which vLLM rewrites."""
    names = _names_after("-")
    shortest = _unique_from("-", names)
    prefixes = sorted({n[:k] for n in names for k in range(shortest[n], len(n))} - set(names))
    letters = "".join(n for n in names if len(n) == 1)
    exact = "|".join(re.escape(n) for n in names)
    abbreviated = "|".join(re.escape(p) for p in prefixes)
    return f"(?s)^-({exact})([=.].*)?$|^-({abbreviated})(\\..*)?$|^-[{letters}]|^-O"


def _known_option_groups() -> tuple[KnownOptions, ...]:
    names = _names_after("--")
    shortest = _unique_from("--", names)
    chunks: list[list[str]] = [[]]
    for letter in sorted({n[0] for n in names}):
        group = [n for n in names if n[0] == letter]
        if chunks[-1] and len(_prefix_tree(chunks[-1] + group, shortest)) > _KNOWN_PATTERN_BUDGET:
            chunks.append([])
        chunks[-1] += group
    groups = [
        KnownOptions(
            guard=f"^-[A-Za-z]{_NAME_CHARS}",
            known=_short_known(),
        )
    ]
    for i, chunk in enumerate(chunks):
        first, last = chunk[0][0], chunk[-1][0]
        letters = first if first == last else f"{first}-{last}"
        # The first group also takes names no option has: `--Port`, `--1`, `--_x`.
        other = "A-Z0-9_" if i == 0 else ""
        groups.append(
            KnownOptions(
                guard=f"^--[{letters}{other}]{_NAME_CHARS}",
                known="(?s)^--" + _prefix_tree(chunk, shortest) + _FLAG_END,
            )
        )
    return tuple(groups)


KNOWN_OPTIONS = _known_option_groups()
