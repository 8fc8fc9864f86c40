"""What the cluster should hold against what it holds, for the reliability tests and benchmark.

Each valid KimiDeployment should have exactly the children a reconcile plans for it (kind, name,
one controller ownerReference to it; its groups whichever `replicas` names it has, as a group's
name is an identity); no child may exist twice over (a group beyond spec.replicas, an object
owned by two deployments) and none may outlive its owner (checked after
the embedded server's garbage collection has run). A shared weights cache (claim, download Job)
may not outlive the last deployment using it, unless its claim is retained.
"""

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kimi_operator import slo_roles
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.api.validation import UnreadableDocument, check_document
from kimi_operator.builders import OperatorDefaults
from kimi_operator.builders.meta import MANAGER
from kimi_operator.builders.weights import RETAIN_ANNOTATION
from kimi_operator.caches import CACHE_SELECTOR
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import (
    CACHE_RESOURCES,
    CHILD_RESOURCES,
    KIMI_DEPLOYMENT,
    PERSISTENT_VOLUME_CLAIM,
)
from kimi_operator.prefill_scaling import recorded_prefill
from kimi_operator.reconcile import UPSTREAM, plan_children
from kimi_operator.rollout import LWS_KIND, group_of, roles

MANAGED_BY = "app.kubernetes.io/managed-by"


@dataclass
class Audit:
    deployments: int = 0  # valid KimiDeployments found
    converged: int = 0  # of those, the ones whose children are exactly the planned ones
    invalid: int = 0  # KimiDeployments whose spec is invalid (children left as they were)
    missing: list[str] = field(default_factory=list)  # planned children not there
    drifted: list[str] = field(default_factory=list)  # owner reference names another object
    duplicates: list[str] = field(default_factory=list)  # children a deployment has too many
    orphans: list[str] = field(default_factory=list)  # children whose owner is gone (or none)

    @property
    def exact(self) -> bool:
        problems = self.duplicates or self.orphans or self.drifted
        return self.converged == self.deployments and not problems

    def summary(self) -> str:
        return (
            f"{self.converged}/{self.deployments} converged, missing {self.missing[:5]}, "
            f"drifted {self.drifted[:5]}, duplicates {self.duplicates[:5]}, "
            f"orphans {self.orphans[:5]}"
        )


def _label(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace')}/{meta['name']}"


def _group_indices(
    kd: KimiDeployment, children: Iterable[Mapping[str, Any]]
) -> dict[str, list[int]]:
    """The groups a deployment has, by role, where it has as many as it wants: a group's name is
    an identity, not a position (group_set.py), so any `replicas` of them are the plan's."""
    found: dict[str, list[int]] = defaultdict(list)
    for child in children:
        at = group_of(kd.metadata.name, child["metadata"]["name"])
        if child["kind"] == LWS_KIND and at is not None:
            found[at[0]].append(at[1])
    return {
        letter: sorted(found[letter])
        for letter, replicas in roles(kd).items()
        if len(found[letter]) == replicas
    }


def audit(client: Client, defaults: OperatorDefaults | None = None) -> Audit:
    """Compare every KimiDeployment's children with the plan for it."""
    defaults = defaults or OperatorDefaults()
    served = {r: client.served(r) for r in UPSTREAM}
    owners = {kd["metadata"]["uid"]: kd for kd in client.list(KIMI_DEPLOYMENT)}
    children: list[dict[str, Any]] = []
    for resource in CHILD_RESOURCES:
        if served.get(resource, True):
            for obj in client.list(resource):
                children.append({**obj, "kind": resource.kind})  # list items may lack kind
    result = Audit()
    by_owner: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for child in children:
        if child["metadata"].get("labels", {}).get(MANAGED_BY) != MANAGER:
            continue
        refs = [r for r in child["metadata"].get("ownerReferences") or [] if r.get("controller")]
        live = [r for r in refs if r.get("uid") in owners]
        if not live:
            result.orphans.append(_label(child))
        elif len(refs) > 1:
            result.duplicates.append(f"{_label(child)} (controlled by {len(refs)} owners)")
        else:
            owner = owners[live[0]["uid"]]
            if (live[0].get("name"), live[0].get("kind")) != (
                owner["metadata"]["name"],
                "KimiDeployment",
            ):
                result.drifted.append(_label(child))
            by_owner[live[0]["uid"]][_label(child)] = child
    for resource in CACHE_RESOURCES:
        for obj in client.list(resource, label_selector=CACHE_SELECTOR):
            meta = obj["metadata"]
            users = [r for r in meta.get("ownerReferences") or [] if r.get("uid") in owners]
            kept = RETAIN_ANNOTATION in (meta.get("annotations") or {})
            if not users and not (kept and resource == PERSISTENT_VOLUME_CLAIM):
                result.orphans.append(_label({**obj, "kind": resource.kind}))
    for uid, kd in owners.items():
        try:
            report = check_document(kd)
        except UnreadableDocument:
            report = None
        if report is None or report.deployment is None:
            result.invalid += 1
            continue
        result.deployments += 1
        # The groups the operator's autoscalers last wanted, not the spec's (their start).
        status = kd.get("status") or {}
        wanted = slo_roles.recorded(recorded_prefill(report.deployment, status), status)
        have = by_owner.get(uid, {})
        indices = _group_indices(wanted, have.values())
        planned = {
            _label(c) for c in plan_children(wanted, defaults, served, indices=indices).children
        }
        missing = sorted(planned - set(have))
        extra = sorted(set(have) - planned)
        result.missing += missing
        result.duplicates += extra
        if not missing and not extra:
            result.converged += 1
    return result
