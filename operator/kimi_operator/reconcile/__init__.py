"""One reconcile of one KimiDeployment: observe → decide → act → status (docs/architecture.md,
"One reconcile").

The controller (controller/loop.py) calls `reconcile` and writes the status it returns. Every read
is made first (observe.py), the plan is a pure function of them (decide.py: the children to apply
and to prune, the caches, the rollout's and the image gate's turns), the writes follow in its order
(act.py), and the status is a pure function of the three (status.py). When the operator traces,
each step is a span under the controller's reconcile span (kimi_operator/spans.py). A terminating
or invalid deployment gets its status only. `k8s`'s errors end a reconcile; the controller decides
whether to retry.
"""

from collections.abc import Mapping
from typing import Any

from kimi_operator import conditions as cond
from kimi_operator import prefill_scaling, slo_roles
from kimi_operator.api.problem import INVALID, Problem
from kimi_operator.api.validation import UnreadableDocument, check_document
from kimi_operator.builders import OperatorDefaults
from kimi_operator.k8s.client import Client
from kimi_operator.reconcile import attributes
from kimi_operator.reconcile.act import Acted, act, act_caches
from kimi_operator.reconcile.decide import (
    UPSTREAM,
    Decision,
    Observed,
    decide,
    plan_children,
    stopped,
)
from kimi_operator.reconcile.observe import observe
from kimi_operator.reconcile.status import Outcome, outcome, scaled_outcome, slo_outcome
from kimi_operator.reconcile.status import terminating as terminating_outcome
from kimi_operator.spans import span

__all__ = ["UPSTREAM", "Outcome", "plan_children", "reconcile", "terminating"]


def _document(body: Mapping[str, Any]) -> dict[str, Any]:
    """The object as a dict, which `check_document` requires of any Mapping."""
    return {key: body[key] for key in body}


def terminating(body: Mapping[str, Any]) -> bool:
    """Whether the deployment is being deleted: it gets its status only, no child is created,
    patched, adopted or pruned (the garbage collector carries out the deletion's propagation
    policy: docs/architecture.md, "Terminating deployments")."""
    return bool((body.get("metadata") or {}).get("deletionTimestamp"))


def reconcile(
    body: Mapping[str, Any],
    client: Client,
    defaults: OperatorDefaults,
    *,
    spec_changed: bool,
    now: str,
    failures: int = 0,
    prune: bool = True,
) -> Outcome:
    """`failures`: temporary failures in a row before this reconcile (they set the backoff that
    the status reports). `prune`: also delete the children the plan no longer has (the
    controller says when there can be any)."""
    old = dict(body.get("status") or {})
    generation = body.get("metadata", {}).get("generation")
    if terminating(body):
        # Nothing rolls it any more: the turn to move to a new default image goes to the next.
        defaults.image_gate.release(str(body["metadata"].get("uid", "")))
        return terminating_outcome(old, generation, now=now)
    try:
        report = check_document(_document(body))
        problems = report.problems
    except UnreadableDocument as error:
        report, problems = None, [Problem(INVALID, str(error))]
    if report is None or report.deployment is None:
        conditions = cond.invalid_conditions(old, problems)
        status = cond.render(old, conditions, generation=generation, now=now)
        events = cond.newly_bad(old, status)
        if spec_changed and not events:  # still invalid after an edit: say it again
            events = [Problem(INVALID, "; ".join(p.message for p in problems))]
        return Outcome(status, events, result="invalid")
    with span("observe") as step:
        observed = observe(
            client,
            body,
            report.deployment,
            defaults,
            warnings=report.warnings,
            prune=prune,
            now=now,
        )
        step.set_attributes(attributes.observed(observed))
    # The prefill autoscaler's count stands in for spec.prefill.replicas from here on.
    scaled = prefill_scaling.evaluate(
        observed.kd, observed.old, observed.prefill_load, now=now, url=defaults.prometheus_url
    )
    observed.kd = scaled.kd
    # And the SLO scaler's counts for spec.replicas and spec.prefill.replicas.
    slo = slo_roles.evaluate(
        observed.kd,
        observed.old,
        observed.slo_loads,
        now=now,
        shared=observed.other_autoscalers,
        url=defaults.prometheus_url,
        maps=observed.calibration_maps,
        calibrating=observed.calibrating,
    )
    observed.kd = slo.kd
    if observed.error is not None:  # a read failed: nothing is written
        decision, acted = stopped(observed, defaults), Acted(error=observed.error)
    else:
        decision = _decide(observed, defaults, now=now)
        with span("act") as step:
            acted = act_caches(client, decision)
            if acted.refused is not None:  # a quota refused a cache: plan again, without them
                decision = _decide(observed, defaults, now=now, refused=acted.refused)
            acted = act(client, body, decision, defaults, acted, likely_missing=observed.first)
            step.set_attributes(attributes.acted(acted))
        if acted.early:  # a cache's write failed: the weights are as the status recorded them
            decision = stopped(observed, defaults)
    if scaled.problem is not None:
        decision.plan.degradations.append(scaled.problem)
    decision.plan.degradations += slo.problems
    result = outcome(
        observed,
        decision,
        acted.applied,
        acted.error,
        now=now,
        failures=failures,
        spec_changed=spec_changed,
    )
    return slo_outcome(scaled_outcome(result, scaled), slo)


def _decide(
    observed: Observed, defaults: OperatorDefaults, *, now: str, refused: Problem | None = None
) -> Decision:
    """`decide` in its span (a second one, inside `act`'s, when a quota refused a cache)."""
    with span("decide", {"kimi.decide.refused": refused.reason} if refused else None) as step:
        decision = decide(observed, defaults, now=now, refused=refused)
        step.set_attributes(attributes.decided(decision))
    return decision
