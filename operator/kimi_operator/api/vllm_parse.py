"""What vLLM 0.33.0's `vllm serve` parser makes of spec.engineArgs, from the snapshot alone.

The operator image carries no vLLM, so this reads the elements as vLLM would, from
`vllm_flags.py`: FlexibleArgumentParser's rewriting (vllm/utils/argparse_utils.py:374-497 of the
0.33.0 wheel: underscores in `--` names, `-O…`, dotted JSON keys gathered into one JSON value),
then argparse's option matching (the exact spelling, else a prefix that one option has; `-qfp8`
is `-q fp8`; `-1` and anything with a space is a value), how many values each option takes and
how its `type=` reads them. Whatever vLLM's parser would answer with `error: ...` and exit 2 is a
problem here: every pod of the deployment would crash-loop.
tests/kimi_operator/api/test_vllm_parse.py holds each answer to vLLM's real parser.
"""

import difflib
import json
import re
from collections.abc import Callable, Sequence

from kimi_operator.api.engine_args import FORBIDDEN_FLAG_GROUPS
from kimi_operator.api.vllm_flags import SERVE_FLAGS, SERVE_OPTIONS, SERVE_TAKES, Takes

DEST = {flag: dest for dest, flags in SERVE_OPTIONS.items() for flag in flags}
_FLAGS = sorted(SERVE_FLAGS)
# argparse reads these as values, not options (vLLM has no option that looks like a number).
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_OPTIMIZATION_LEVELS = ("0", "1", "2", "3")

Option = tuple[str, str | None]  # (option string, value attached with = or to a short option)


def closest_flag(name: str) -> str:
    """`did you mean …?` for an unknown option name, or "". When the closest option is one the
    spec owns (refused in engineArgs), what to set instead: suggesting it would only trade the
    typo for a refusal."""
    close = difflib.get_close_matches(name.replace("_", "-"), _FLAGS, n=1, cutoff=0.6)
    if not close:
        return ""
    owner = next((g for g in FORBIDDEN_FLAG_GROUPS if g.refused([close[0]])), None)
    if owner is not None:
        return f"; the closest option, {close[0]}, may not be set here: {owner.reason}"
    return f"; did you mean {close[0]}?"


def _prefix_matches(arg: str) -> list[Option]:
    """argparse's `_get_option_tuples` (Python 3.11): options the element abbreviates."""
    if arg.startswith("--"):
        prefix, _, value = arg.partition("=")
        attached = value if "=" in arg else None
        return [(f, attached) for f in _FLAGS if f.startswith(prefix)]
    found: list[Option] = []
    for flag in _FLAGS:
        if flag == arg[:2]:
            found.append((flag, arg[2:]))
        elif flag.startswith(arg):
            found.append((flag, None))
    return found


def lookup(arg: str) -> Option | str | None:
    """argparse's `_parse_optional`: None for a value, the option it names, or why it is
    refused (unknown or ambiguous)."""
    if not arg.startswith("-"):
        return None
    if arg == "--":
        return "argparse reads what follows -- as the model, which the operator sets"
    if arg in SERVE_FLAGS:
        return arg, None
    if len(arg) == 1:
        return None
    name, equals, value = arg.partition("=")
    if equals and name in SERVE_FLAGS:
        return name, value
    matches = _prefix_matches(arg)
    if len(matches) > 1:
        names = ", ".join(f for f, _ in matches[:4]) + (", ..." if len(matches) > 4 else "")
        return f"ambiguous option: could be {names}"
    if matches:
        return matches[0]
    if _NEGATIVE_NUMBER.match(arg) or " " in arg:
        return None
    return f"unknown option{closest_flag(name)}"


def rewrite(args: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """FlexibleArgumentParser.parse_args' rewriting: (arguments argparse sees, problems)."""
    flat: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            name, equals, value = arg.partition("=")
            head, dot, rest = name[2:].partition(".")
            flat.append("--" + head.replace("_", "-") + dot + rest + equals + value)
        elif arg.startswith("-O") and arg != "-O":
            flat += ["--optimization-level", arg[3:] if arg[2] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in _OPTIMIZATION_LEVELS:
            flat.append("--optimization-level")
        else:
            flat.append(arg)
    out: list[str] = []
    problems: list[tuple[str, str]] = []
    dotted: dict[str, dict[str, object]] = {}
    i = 0
    while i < len(flat):
        arg = flat[i]
        name, equals, value = arg.partition("=")
        if not arg.startswith("-") or "." not in name:
            out.append(arg)
            i += 1
            continue
        if not equals:
            if i + 1 == len(flat):
                problems.append((arg, f"{arg}: expects a value after it"))
                break
            value, i = flat[i + 1], i + 1
        i += 1
        key, *keys = name.removesuffix("+").split(".")
        nested: object = value.split(",") if name.endswith("+") else _json_or_text(value)
        for part in reversed(keys):
            nested = {part: nested}
        _merge(dotted.setdefault(key, {}), nested)
    for key, merged in dotted.items():
        out += [key, json.dumps(merged)]
    return out, problems


def _json_or_text(value: str) -> object:
    try:
        return json.loads(value)
    except ValueError:
        return value  # vLLM tries human-readable numbers, then keeps the text


def _merge(into: dict[str, object], update: object) -> None:
    if not isinstance(update, dict):
        return
    for k, v in update.items():
        old = into.get(k)
        if isinstance(v, dict) and isinstance(old, dict):
            _merge(old, v)
        else:
            into[k] = v


def problems(args: Sequence[str]) -> list[tuple[str, str]]:
    """Every element of spec.engineArgs vLLM's serve parser would refuse: (the element as vLLM
    rewrites it, why)."""
    flat, found = rewrite(args)
    i = 0
    while i < len(flat):
        arg = flat[i]
        hit = lookup(arg)
        i += 1
        if arg == "--" and i == len(flat):
            break  # nothing follows: argparse drops it
        if hit is None:
            found.append((arg, f"{arg}: a value after no option that takes one"))
            continue
        values = []
        if not isinstance(hit, str):
            flag, attached = hit
            takes = SERVE_TAKES[DEST[flag]]
            if takes.nargs == "0":
                if attached is not None:
                    found.append((arg, f"{arg}: {flag} takes no value"))
                continue
            values = [] if attached is None else [attached]
        most = 1 if isinstance(hit, str) or takes.nargs in ("1", "?") else len(flat)
        if isinstance(hit, str) or attached is None:
            # After an unknown option, argparse reports its values with it.
            while len(values) < most and i < len(flat) and lookup(flat[i]) is None:
                values.append(flat[i])
                i += 1
        if isinstance(hit, str):
            found.append((arg, f"{' '.join([arg, *values])}: {hit}"))
            continue
        if not values and takes.nargs != "?":
            wanted = "a value" if takes.nargs == "1" else "values"
            found.append((arg, f"{arg}: {flag} expects {wanted}"))
        found += [(arg, f"{flag} {v}: {why}") for v in values if (why := refusal(takes, v))]
    return found


def _human_int(value: str) -> int:
    """vllm.utils.argparse_utils.human_readable_int."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match is None:
        return int(value)
    number, suffix = match.groups()
    if suffix.islower():
        return int(float(number) * 10 ** (3 + 3 * "kmgt".index(suffix)))
    return int(number) << (10 * (1 + "KMGT".index(suffix)))


def _human_int_or_auto(value: str) -> int:
    value = value.strip()
    return -1 if value == "-1" or value.lower() == "auto" else _human_int(value)


def _config(value: str) -> object:
    """A JSON object (vLLM validates its fields against the config dataclass at start-up, which
    this does not: those errors still show only in the pod's log)."""
    if not re.match(r"(?s)^\s*\{.*\}\s*$", value):
        raise ValueError("not a JSON object")
    return value


def _dict_or_str(value: str) -> object:
    return json.loads(value) if re.match(r"(?s)^\s*{.*}\s*$", value) else value


_READERS: dict[str, Callable[[str], object]] = {
    "str": str,
    "int": int,
    "float": float,
    "json": json.loads,
    "config": _config,
    "dict_or_str": _dict_or_str,
    "human_int": _human_int,
    "human_int_or_auto": _human_int_or_auto,
    "lower_snake": lambda s: s.lower().replace("-", "_"),
}
_KIND_WORDS = {"human_int": "integer (8192, 8k, 8K)", "human_int_or_auto": "integer or auto"}


def refusal(takes: Takes, value: str) -> str:
    """Why vLLM would refuse this value for an option, or ""."""
    try:
        read = None if takes.optional and value in ("", "None") else _READERS[takes.kind](value)
    except (ValueError, ArithmeticError):
        return f"not a valid {_KIND_WORDS.get(takes.kind, takes.kind)}"
    if takes.choices is not None and read not in takes.choices:
        shown = ", ".join(str(c) for c in takes.choices if c is not None)
        return f"not one of the allowed values ({shown})"
    return ""


def destinations(args: Sequence[str]) -> set[str]:
    """The vLLM options (argparse destinations, e.g. `trust_remote_code`) that these arguments
    set, however spelled: aliases, abbreviations, `=` or dotted forms."""
    hits = (lookup(arg) for arg in rewrite(args)[0])
    return {DEST[hit[0]] for hit in hits if isinstance(hit, tuple)}
