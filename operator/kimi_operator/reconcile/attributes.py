"""What each step of a reconcile says on its span (kimi_operator/spans.py; docs/observability.md,
"The operator's own spans"): what it read, what it decided to write and to hold back, what it
wrote, so that a trace of a rollout that waits says on what. Pure, from the step's own data, set
once the step is done: a few counts and names, made whether or not a span records them.
"""

from collections.abc import Mapping
from typing import Any

from kimi_operator.api.status import condition
from kimi_operator.k8s.errors import ApiError, KubernetesError
from kimi_operator.reconcile.act import Acted
from kimi_operator.reconcile.decide import Decision, Observed
from kimi_operator.reconcile.status import Outcome
from kimi_operator.spans import Attributes


def error(failed: KubernetesError) -> Attributes:
    """OpenTelemetry's `error.type` (the API's HTTP status, or the error's class), and what it
    said."""
    kind = str(failed.code) if isinstance(failed, ApiError) else type(failed).__name__
    return {"error.type": kind, "kimi.error": str(failed)}


def observed(seen: Observed) -> Attributes:
    return {
        "kimi.observe.first": seen.first,
        "kimi.observe.prune": seen.prune,
        "kimi.observe.groups": sorted(seen.groups),
        "kimi.observe.pods_read": seen.pods is not None,
        **(error(seen.error) if seen.error is not None else {}),
    }


def decided(decision: Decision) -> Attributes:
    """The writes planned, and what holds the rollout back: the outdated groups left for now,
    those past their progress deadline, the weights not ready, the image gate, the blockers, the
    groups draining."""
    roles = [s for s in (decision.steps, decision.prefill_steps) if s is not None]
    return {
        "kimi.decide.apply": len(decision.apply),
        "kimi.decide.delete": len(decision.delete),
        "kimi.rollout.rolling": any(s.rolling for s in roles),
        "kimi.rollout.updated": sum(s.updated for s in roles),
        "kimi.rollout.held": sorted(c["metadata"]["name"] for c in decision.held),
        "kimi.rollout.stalled": [s.names[i] for s in roles for i in s.stalled],
        "kimi.weights.waiting": [p.reason for p in decision.weights.waiting],
        "kimi.image.gate": decision.gate,
        "kimi.blockers": [p.reason for p in decision.plan.blockers],
        "kimi.draining": [d.name for d in decision.drains.draining],
    }


def acted(done: Acted) -> Attributes:
    applied = done.applied
    return {
        "kimi.act.created": applied.created,
        "kimi.act.patched": applied.patched,
        "kimi.act.deleted": applied.deleted,
        **(error(done.error) if done.error is not None else {}),
    }


def status(written: Mapping[str, Any], *, changed: bool) -> Attributes:
    """Whether the status was written (it differed), and what it says: Ready, and Progressing,
    whose reason and message are what a rollout waits on (WaitingForTurn, GroupsStarting,
    RollingOut, Draining, ...)."""
    ready, progressing = condition(written, "Ready"), condition(written, "Progressing")
    return {
        "kimi.status.written": changed,
        "kimi.ready": ready.get("status", ""),
        "kimi.ready.reason": ready.get("reason", ""),
        "kimi.progressing": progressing.get("status", ""),
        "kimi.progressing.reason": progressing.get("reason", ""),
        "kimi.progressing.message": progressing.get("message", ""),
    }


def outcome(result: Outcome) -> Attributes:
    """The reconcile's end: its result (reconciled, invalid, error, terminating), when it looks
    again of its own accord, and the write or read that failed."""
    return {
        "kimi.reconcile.result": result.result,
        **(
            {"kimi.reconcile.requeue_after_s": result.requeue_after_s}
            if result.requeue_after_s is not None
            else {}
        ),
        **(error(result.error) if result.error is not None else {}),
    }
