"""The writes of one reconcile, in the order decide.py gave them: the shared weights caches, the
turn at the image gate, the drains (drain.py), the children (each applied idempotently:
k8s/apply.py), the held groups noted as they are, then the deletes. The first failure stops them;
its error is returned, for the status and the controller's retry.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kimi_operator.api.problem import Problem
from kimi_operator.builders import OperatorDefaults
from kimi_operator.caches import QUOTA_REFUSAL
from kimi_operator.k8s.apply import apply_child, owner_is_current, perform
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import ApiError, KubernetesError
from kimi_operator.k8s.merge import Applied
from kimi_operator.reconcile.decide import Decision


@dataclass
class Acted:
    """What the writes found and did."""

    applied: Applied = field(default_factory=Applied)  # the children as they are now
    error: KubernetesError | None = None  # the write that failed
    # Before the weights were known for sure: while writing the caches (the status then says
    # what the last one recorded).
    early: bool = False
    # A ResourceQuota refused a weights cache: kube-apiserver's answer, as a problem. The caches
    # after it are not written; reconcile plans again knowing it and acts on the rest.
    refused: Problem | None = None


def act_caches(client: Client, decision: Decision) -> Acted:
    """Create or join the weights caches; stop at a quota's refusal (not retried soon: a quota
    is raised by a person; the periodic resync tries again)."""
    acted = Acted()
    try:
        for write in decision.caches:
            perform(client, write, acted.applied)
    except ApiError as error:
        if error.code == 403 and QUOTA_REFUSAL in str(error):
            acted.refused = Problem("QuotaExceeded", str(error))
        else:
            acted.error, acted.early = error, True
    except KubernetesError as error:
        acted.error, acted.early = error, True
    return acted


def act(
    client: Client,
    body: Mapping[str, Any],
    decision: Decision,
    defaults: OperatorDefaults,
    acted: Acted,
    *,
    likely_missing: bool,
) -> Acted:
    """Everything after the caches (`acted`: what writing them did). `likely_missing`: the
    deployment was never reconciled, its children are created without a read first."""
    if acted.error is not None:
        return acted
    uid = str(body["metadata"]["uid"])
    kd_label = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
    if decision.gate == "hold":
        defaults.image_gate.hold(uid, kd_label)
    else:
        defaults.image_gate.release(uid)
    try:
        # Drains first: a group put back into routing before its template is applied.
        for write in decision.drains.writes:
            perform(client, write, acted.applied)
        for desired in decision.apply:
            apply_child(
                client,
                desired,
                uid,
                acted.applied,
                likely_missing=likely_missing,
                owner_current=lambda: owner_is_current(client, body),
            )
        acted.applied.live += decision.held
        for write in decision.delete:
            perform(client, write, acted.applied)
    except KubernetesError as error:
        acted.error = error
    return acted
