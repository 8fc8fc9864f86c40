"""What a load needs of one role: the planner's step model and simulator on a stationary agent load.

The SLO autoscaler (slo_scaling.py) asks, every reconcile, how a role of a deployment would serve
a load (a request rate, mean prompt and output lengths, a prefix-cache hit rate) on `groups`
groups. It answers with the code `kimi-operator plan` runs (engine.py's step model, simulate.py,
predict.topology on the deployment's calibration) on a workload synthesized from the load:

- **One group's share.** Routing keeps a session on the group that served its first turn and
  places new sessions on the least loaded group, so each of `groups` groups serves about
  1/`groups` of the sessions: one group is simulated at rate/`groups` (a disaggregated role's one
  group beside one group of the other role). The cost of an answer does not grow with the load
  or the count, and an uneven split that least-loaded placement evens out is not modelled.
- **Sessions that return.** `SESSIONS_MODELLED` sessions at most send the window's requests in
  turn, each sharing its prefix with the session's earlier turns so that the prompt tokens the
  prefix cache holds are the hit rate measured (the model keeps every prefix: sessions beyond a
  few change only how many cold prefills the window starts with). Arrivals are Poisson and the
  lengths spread uniformly over ±`SPREAD` of their means, from a fixed seed: the same load gets
  the same answer.
- **A window, warm.** `WINDOW_REQUESTS` requests; the first `WARM_UP` of them (the sessions'
  first, cold turns, and an empty queue) fill the group and are not counted.

The answer is cached by the unit's groups as simulated (not by the deployment's name or counts,
which change as it scales) and by one group's share of the load, rounded (`Load.share`: a 30 s
poll's reading wanders, and the rounding is well inside the model's own error), so a steady load
costs one simulation per count, and a load on n groups is the same answer as twice it on 2n.
Task completion is not predicted: the load Prometheus holds (vLLM's per-request series) does not
say which requests form a task, so neither the reading nor this workload has tasks.
"""

import math
import random
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Final, Literal

from kimi_operator.bench.profiles import PlannedRequest
from kimi_operator.bench.stats import decode_rate, percentile
from kimi_operator.plan.builtin import lone_ttft_s
from kimi_operator.plan.calibration import Calibration
from kimi_operator.plan.configs import Configuration, Disaggregated
from kimi_operator.plan.costs import StepCosts
from kimi_operator.plan.predict import topology
from kimi_operator.plan.simulate import Topology, simulate

Role = Literal["decode", "prefill"]
PERCENTILES: Final = (50, 90, 99)
WINDOW_REQUESTS: Final = 120
WARM_UP: Final = 0.25  # of the window's requests, not counted
SESSIONS_MODELLED: Final = 8
DEFAULT_SESSIONS: Final = 4  # a group's sessions when the reading does not say
SPREAD: Final = 0.5  # lengths uniform over mean x [1 - SPREAD, 1 + SPREAD]
RATE_ROUNDING: Final = 0.05  # a share's rate, to steps of 5% (geometric)
LENGTH_ROUNDING: Final = 0.1  # its mean lengths, to steps of 10%
SEED: Final = 0
ALONE_RATE_PER_S: Final = 0.001  # no load: requests 1000 s apart, each alone
CACHE_SIZE: Final = 4096


@dataclass(frozen=True)
class Load:
    """The load a role serves (a reading's, or the forecast's), summed over its groups."""

    request_rate_per_s: float
    prompt_tokens: float  # mean per request
    output_tokens: float  # mean per request
    prefix_hit_rate: float  # of prompt tokens, 0..1, as vLLM counts it (hits / queries)
    sessions: float | None = None  # agent sessions active at once; None: unknown

    def share(self, groups: int) -> "Load":
        """One group's share of the load on `groups`, on the cache's grid: rate and lengths to
        `RATE_ROUNDING` and `LENGTH_ROUNDING` steps, the hit rate to hundredths, sessions whole
        (1..`SESSIONS_MODELLED`). Shares, not loads, are cached: 8 requests/s on 4 groups is 4
        on 2."""

        def grid(value: float, rounding: float) -> float:
            if value <= 0:
                return 0.0
            step = math.log1p(rounding)
            return round(math.exp(round(math.log(value) / step) * step), 6)

        sessions = DEFAULT_SESSIONS if self.sessions is None else round(self.sessions / groups)
        return Load(
            request_rate_per_s=grid(self.request_rate_per_s / groups, RATE_ROUNDING),
            prompt_tokens=max(2.0, round(grid(self.prompt_tokens, LENGTH_ROUNDING))),
            output_tokens=max(2.0, round(grid(self.output_tokens, LENGTH_ROUNDING))),
            prefix_hit_rate=round(min(max(self.prefix_hit_rate, 0.0), 0.99), 2),
            sessions=float(min(SESSIONS_MODELLED, max(1, sessions))),
        )


@dataclass(frozen=True)
class Predicted:
    """The model's figures for a load on a count of groups. `ttft_s[q]`: the q-th percentile of
    TTFT; `decode_tok_s[q]`: the decode rate (tokens/s per user, prefill excluded) that q% of
    requests get at least, i.e. the (100 - q)-th percentile (bench's p10 for q = 90)."""

    groups: int
    ttft_s: dict[int, float]
    decode_tok_s: dict[int, float]
    queued_s: float  # mean TTFT beyond the request's own TTFT alone: its wait for the group

    def waiting(self, rate_per_s: float) -> float:
        """Requests waiting in one group's queue on average (Little's law on `queued_s`): what
        vLLM's num_requests_waiting reads there, for a group serving `rate_per_s`."""
        return rate_per_s * self.queued_s


def workload(share: Load) -> list[PlannedRequest]:
    """One group's share (`Load.share`): open arrivals of returning sessions' turns (docstring)."""
    rng = random.Random(SEED)
    rate, sessions = share.request_rate_per_s, round(share.sessions or DEFAULT_SESSIONS)
    prompt = round(share.prompt_tokens)
    shared = min(prompt - 1, round(share.prefix_hit_rate * prompt))
    plan: list[PlannedRequest] = []
    start = 0.0
    for index in range(WINDOW_REQUESTS):
        session = f"session-{index % sessions}"
        fresh = max(1, round((prompt - shared) * rng.uniform(1 - SPREAD, 1 + SPREAD)))
        output = max(2, round(share.output_tokens * rng.uniform(1 - SPREAD, 1 + SPREAD)))
        plan.append(
            PlannedRequest(
                index=index,
                start_s=start,
                prompt_tokens=shared + fresh,
                output_tokens=output,
                group=session,
                shared_prefix_tokens=shared,
                task=session,
            )
        )
        start += rng.expovariate(max(rate, ALONE_RATE_PER_S))
    return plan


def unit(config: Configuration) -> Configuration:
    """One group of each of the configuration's roles: what one group's share runs on."""
    split = config.disaggregated
    return config.model_copy(
        update={
            "replicas": 1,
            "disaggregated": Disaggregated(
                prefill_replicas=1,
                decider=split.decider,
                uncached_tokens=split.uncached_tokens,
                kv_transfer_s=split.kv_transfer_s,
            )
            if split is not None
            else None,
        }
    )


def _simulated(group: Topology, costs: StepCosts, share: Load) -> Predicted:
    lives = simulate(workload(share), group, False).lives
    counted = lives[round(WARM_UP * len(lives)) :]
    ttfts = [live.token_times[0] - live.sent_s for live in counted]
    alone = [
        lone_ttft_s(costs, live.request.prompt_tokens - live.cached, live.cached)
        for live in counted
    ]
    rates = sorted(
        rate
        for live in counted
        if (
            rate := decode_rate(
                [t - live.sent_s for t in live.token_times],
                live.token_counts,
                live.request.output_tokens,
            )
        )
    )
    queued = sum(max(0.0, ttft - lone) for ttft, lone in zip(ttfts, alone, strict=True))
    ttfts.sort()
    return Predicted(
        groups=1,
        queued_s=queued / len(counted),
        ttft_s={q: percentile(ttfts, q) for q in PERCENTILES},
        decode_tok_s={q: percentile(rates, 100 - q) if rates else math.inf for q in PERCENTILES},
    )


# By what decides an answer: the unit's groups as the simulator runs them (not the
# configuration, whose name and counts do not change it), the costs a lone request is priced
# on, and the share. Reconciles run in several threads (controller/loop.py): `_lock` guards the
# bookkeeping, not the simulation (two threads may both simulate a share neither had: the same
# answer, stored twice).
_cache: OrderedDict[tuple[str, str, Load], Predicted] = OrderedDict()
_lock = threading.Lock()


def predicted(
    config: Configuration, calibration: Calibration, load: Load, groups: int
) -> Predicted:
    """The model's figures for `load` on `groups` groups of the role being scaled: one group's
    share (`Load.share`) on one group of each role of the configuration (`unit`)."""
    share = load.share(groups)
    group = topology(unit(config), calibration)
    key = (repr(group), repr(calibration.costs), share)
    with _lock:
        answer = _cache.get(key)
        if answer is not None:
            _cache.move_to_end(key)
    if answer is None:
        answer = _simulated(group, calibration.costs, share)
        with _lock:
            _cache[key] = answer
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    return replace(answer, groups=groups)
