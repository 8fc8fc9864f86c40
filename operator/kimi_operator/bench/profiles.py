"""The request plans of the three profiles and the synthetic prompts they send.

Prompts are built from common English words that most BPE vocabularies (Kimi's included) encode as
one token each with their leading space, so a prompt of N words is about N tokens; the exact count
comes back in the server's usage and is what the results report. Every prompt is a deterministic
function of (seed, request index), so run A and run B send the same text, and different requests
differ from their first word on, so a prefix cache cannot shorten a prefill the profile means to
measure. Requests of one shared-prefix group (agentic traces) do share their leading words.

The seed is 0 unless given, but a calibration's is new each run (`default_seed`): a sweep that
sent a previous sweep's text to the same server found its prompts in the prefix cache (a 2,048-
token "prefill" of 50-70 ms where 426 ms is a prefill on the CPU server: the prefill costs fitted
a tenth of what they are) and ran its "new" token counts again (`new_shape_s` 0.2 ms where 13 ms
was measured), and a scheduled calibration (`slo.calibration.schedule`) sweeps one long-running
server again and again.
"""

import random
import secrets
from dataclasses import dataclass
from typing import Any, Final

from kimi_operator.bench.results import Profile

_WORD_TEXT: Final = (
    "the of and to in is was for on are with as his they be at one have this from or had by hot "
    "word but what some we can out other were all there when up use your how said an each she "
    "which do their time if will way about many then them write would like so these her long make "
    "thing see him two has look more day could go come did number sound no most people my over "
    "know water than call first who may down side been now find any new work part take get place "
    "made live where after back little only round man year came show every good me give our under"
)
WORDS: Final = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class ProfileDefaults:
    prompt_tokens: int
    output_tokens: int
    concurrency: int | None
    requests: int | None  # None: every request of the trace


PROFILE_DEFAULTS: Final[dict[Profile, ProfileDefaults]] = {
    # vLLM's headline figure: a 1-token prompt, 1,000 tokens out, one request at a time.
    "headline": ProfileDefaults(prompt_tokens=1, output_tokens=1000, concurrency=1, requests=10),
    "long-context": ProfileDefaults(
        prompt_tokens=32768, output_tokens=1000, concurrency=1, requests=5
    ),
    # Lengths and arrivals come from the trace; no cap on requests in flight unless asked.
    "agentic": ProfileDefaults(prompt_tokens=0, output_tokens=0, concurrency=None, requests=None),
    # `kimi-operator plan`'s sweep (bench/calibration.py): batches up to the concurrency, prompts
    # up to the prompt length, this many tokens out per decode request.
    "calibration": ProfileDefaults(
        prompt_tokens=32768, output_tokens=64, concurrency=64, requests=None
    ),
}


def default_seed(profile: Profile) -> int:
    """The seed of a run that names none (module docstring): a new one for a calibration."""
    return secrets.randbelow(1 << 31) if profile == "calibration" else 0


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    start_s: float  # from the start of the run; 0 for the closed-loop profiles
    prompt_tokens: int
    output_tokens: int
    group: str | None = None
    shared_prefix_tokens: int = 0
    task: str | None = None  # the agent session it belongs to (traces only)
    after: tuple[int, ...] = ()  # indexes of the requests whose answers it waits for
    think_s: float = 0.0  # the agent's time between those answers and this request
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI tool definitions it offers (traces only)


def fixed_plan(requests: int, prompt_tokens: int, output_tokens: int) -> list[PlannedRequest]:
    return [PlannedRequest(i, 0.0, prompt_tokens, output_tokens) for i in range(requests)]


class Prompts:
    """Builds each planned request's prompt text on demand (long prompts are not kept around)."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._prefixes: dict[str, list[str]] = {}

    def _words(self, key: str, count: int) -> list[str]:
        return random.Random(f"{self._seed}:{key}").choices(WORDS, k=count)

    def text(self, request: PlannedRequest) -> str:
        shared = min(request.shared_prefix_tokens, request.prompt_tokens)
        words: list[str] = []
        if request.group is not None and shared:
            prefix = self._prefixes.get(request.group, [])
            if len(prefix) < shared:
                prefix = self._words(f"group:{request.group}", shared)
                self._prefixes[request.group] = prefix
            words = prefix[:shared]
        words += self._words(f"request:{request.index}", request.prompt_tokens - shared)
        return " ".join(words)
