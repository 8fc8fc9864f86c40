"""A trace on simulated time: requests arrive, groups step, answers release the next turns.

Event-driven and deterministic: no wall clock. Each group runs one step at a time; a request that
arrives during a step joins at the next one, and a group that sits idle starts a step as soon as
work arrives (after every other event of that instant, so that requests sent together are
scheduled together). A request reaches the scheduler after its way into the server
(`request_overhead_s`, longer by the requests its group is running when it arrives). A closed
replay sends a turn at the later of its trace time and the answers it waits for plus its think
time, as `bench --replay closed` does.

Routing: `prefix` keeps a prefix group (or else a task) on the group that served its first
request, placing new ones on the least loaded group; `round-robin` takes the groups in turn.
Disaggregated, as llm-d's picker and routing sidecar do it: a request's decode group is picked
first; the decider sends its prefill to a prefill group (always, or only when more than
`uncached_tokens` of its prompt are not in that decode group's cache: a short suffix prefills on
the decode group, in its mixed steps). The prefill group computes the prompt in its own prefill
steps, then the request goes through the decode server's way in (a second HTTP request), its KV
moves (`kv_transfer`, for the tokens the decode group does not hold) and it joins the decode
group's next step, which gives its first token.
"""

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from kimi_operator.bench.profiles import PlannedRequest
from kimi_operator.plan.costs import KvTransfer, request_overhead_s
from kimi_operator.plan.engine import Engine, EngineSpec, Live, Step

Routing = Literal["prefix", "round-robin"]


@dataclass(frozen=True)
class Topology:
    groups: list[EngineSpec]  # serving groups, or decode groups when prefill_groups are given
    routing: Routing = "prefix"
    prefill_groups: list[EngineSpec] = field(default_factory=list)
    kv_transfer: KvTransfer = field(default_factory=KvTransfer)
    uncached_tokens: int | None = None  # the decider's threshold; None: always disaggregate


@dataclass(frozen=True)
class Outcome:
    lives: list[Live]  # the plan's requests, in plan order
    decode_steps: int
    fast_steps: int


class _Router:
    def __init__(self, engines: list[Engine], routing: Routing) -> None:
        self.engines = engines
        self.routing = routing
        self.sticky: dict[str, Engine] = {}
        self.turn = itertools.count()

    def pick(self, request: PlannedRequest) -> Engine:
        if self.routing == "round-robin":
            return self.engines[next(self.turn) % len(self.engines)]
        key = request.group or request.task
        if key is not None and key in self.sticky:
            return self.sticky[key]
        engine = min(self.engines, key=lambda e: e.load)  # first of the least loaded
        if key is not None:
            self.sticky[key] = engine
        return engine


class _Run:
    def __init__(self, plan: list[PlannedRequest], topology: Topology, closed: bool) -> None:
        self.plan = plan
        self.closed = closed
        self.topology = topology
        self.decoder_of: dict[int, Engine] = {}  # id(live) -> its decode group, while it prefills
        self.decoders = [Engine(spec) for spec in topology.groups]
        self.prefillers = [Engine(spec) for spec in topology.prefill_groups]
        self.entry = _Router(self.prefillers or self.decoders, topology.routing)
        self.handover = _Router(self.decoders, topology.routing)
        self.events: list[tuple[float, int, int, Callable[[], None]]] = []
        self.order = itertools.count()
        self.busy: set[int] = set()
        self.lives: dict[int, Live] = {}
        self.waiting_on = {r.index: len(r.after) if closed else 0 for r in plan}
        self.children: dict[int, list[int]] = {}
        for request in plan:
            for parent in request.after if closed else ():
                self.children.setdefault(parent, []).append(request.index)

    def at(self, time: float, action: Callable[[], None], later: bool = False) -> None:
        heapq.heappush(self.events, (time, int(later), next(self.order), action))

    def run(self) -> Outcome:
        for request in self.plan:
            if not self.waiting_on[request.index]:
                self.at(request.start_s, partial(self.arrive, request, request.start_s))
        while self.events:
            _, _, _, action = heapq.heappop(self.events)
            action()
        engines = self.decoders + self.prefillers
        return Outcome(
            lives=[self.lives[r.index] for r in self.plan if r.index in self.lives],
            decode_steps=sum(e.decode_steps for e in engines),
            fast_steps=sum(e.fast_steps for e in engines),
        )

    def arrive(self, request: PlannedRequest, now: float) -> None:
        live = Live(request, sent_s=now)
        self.lives[request.index] = live
        self.send(self.route(live), live, now)

    def route(self, live: Live) -> Engine:
        request = live.request
        if not self.prefillers:
            return self.entry.pick(request)
        decoder = self.handover.pick(request)
        threshold = self.topology.uncached_tokens
        uncached = request.prompt_tokens - decoder.cache_hit(request)
        if threshold is not None and uncached <= threshold:
            return decoder
        self.decoder_of[id(live)] = decoder
        decoder.arriving += 1  # on its way there: the picker counts it
        return self.entry.pick(request)

    def send(self, engine: Engine, live: Live, now: float, transfer_s: float = 0.0) -> None:
        """Through the server's way in (and, handed over, the KV's transfer) to its queue."""
        engine.arriving += 1
        ready = now + request_overhead_s(engine.spec.costs, len(engine.running)) + transfer_s
        self.at(ready, partial(self.enqueue, engine, live, ready))

    def enqueue(self, engine: Engine, live: Live, now: float) -> None:
        engine.arriving -= 1
        engine.waiting.append(live)
        self.wake(engine, now)

    def wake(self, engine: Engine, now: float) -> None:
        if id(engine) not in self.busy:
            self.at(now, partial(self.start, engine, now), later=True)

    def start(self, engine: Engine, now: float) -> None:
        if id(engine) in self.busy:
            return
        step = engine.schedule()
        if step is None:
            return
        self.busy.add(id(engine))
        end = now + step.seconds
        self.at(end, partial(self.end, engine, step, end))

    def end(self, engine: Engine, step: Step, now: float) -> None:
        self.busy.discard(id(engine))
        for live in engine.finish(step, now):
            if live.finished_s is not None:
                self.done(live)
            else:  # prefilled for a decode group
                decoder = self.decoder_of.pop(id(live))
                decoder.arriving -= 1
                missing = live.request.prompt_tokens - decoder.cache_hit(live.request)
                self.send(decoder, live, now, self.topology.kv_transfer.seconds(missing))
        self.wake(engine, now)

    def done(self, live: Live) -> None:
        for child in self.children.get(live.request.index, ()):
            self.waiting_on[child] -= 1
            if self.waiting_on[child]:
                continue
            request = self.plan[child]
            answers = max(self.lives[p].finished_s or 0.0 for p in request.after)
            due = max(request.start_s, answers + request.think_s)
            self.at(due, partial(self.arrive, request, due))


def simulate(plan: list[PlannedRequest], topology: Topology, closed: bool) -> Outcome:
    """Run the plan (indexes are positions in it) through the groups; every request finishes."""
    return _Run(plan, topology, closed).run()
