"""The one `Problem` of every layer: what `kimi-operator validate` prints, and what a status
condition and a Warning Event carry (docs/architecture.md)."""

import json
from dataclasses import dataclass
from typing import Any

INVALID = "Invalid"  # the reason of a problem in the spec


@dataclass(frozen=True)
class Problem:
    """Something that keeps a deployment from being accepted, or from serving as asked.

    `reason` is CamelCase, as a condition's or an Event's; `message` is the one line a user reads;
    `path` names the spec field at fault (`spec.env[0].name`), "" when no one field is."""

    reason: str
    message: str
    path: str = ""

    def __str__(self) -> str:
        return self.message

    @classmethod
    def in_field(
        cls, path: str, what: str, allowed: str, got: Any = None, *, missing: bool = False
    ) -> "Problem":
        """`path: what (got <value>; allowed: <allowed>)`, the value left out when `missing`."""
        shown = "" if missing else f"got {show(got)}; "
        return cls(INVALID, f"{path}: {what} ({shown}allowed: {allowed})", path)


def show(value: Any, limit: int = 80) -> str:
    """JSON of what the user wrote, short; invisible and control characters as `\\uXXXX`."""
    try:
        text = json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    text = "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
