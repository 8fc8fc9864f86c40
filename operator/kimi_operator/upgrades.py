"""Which TP groups run the pod template of an earlier operator version, and are left on it. Pure.

A group's template changes for two reasons: what it is rendered from changed (the spec, the
serving image, the weights), or the operator that renders it did (a new label, a new flag). The
first rolls the group (rollout.py); the second is no reason to drain and reload an hour of GPUs.
So every LeaderWorkerSet the operator writes records what its template was rendered from
(`INPUTS_ANNOTATION`: the deployment's spec and `kimi-operator.io/` annotations, the serving image,
whether the group has a ComputeDomain, the weights claims). A group whose template is not the one
the operator renders now is on an *older template*, and left as it is, when rendering what it
records with this operator's builders gives the template the operator renders now: the inputs are
the same, only the rendering moved on. It takes the current template when it is written for
another reason: made again (deleted, scaled from zero), a spec edit that changes its template,
stopped by the restart budget (no pod left to restart), or `ROLL_ANNOTATION` set to a new value
on the deployment (then rolled group by group like any template change). A group written before
the operator recorded its inputs is taken as rendered from the spec the last status observed, if
that status says it was reconciled at the current generation and no rollout was under way; with
the image it runs; and, once found on an older template, kept there while the hash of the
template the operator renders for it (which the status keeps) stays the same. The operator's
settings besides the serving image are not inputs: they count as the operator.
docs/group-lifecycle.md, "Upgrading the operator".
"""

import dataclasses
import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kimi_operator import rollout
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.api.status import ROLLING_REASONS, progressing_reason
from kimi_operator.builders import OperatorDefaults, group_workload, serving_image
from kimi_operator.builders.disaggregation import serving_roles
from kimi_operator.k8s.merge import APPLIED_ANNOTATION

# What a group's template was rendered from (`Inputs`, as JSON), on its LeaderWorkerSet.
INPUTS_ANNOTATION = "kimi-operator.io/template-inputs"
# On the KimiDeployment: any new value rolls the groups on an older template to the current one.
ROLL_ANNOTATION = "kimi-operator.io/roll-template"
PREFIX = "kimi-operator.io/"


@dataclass(frozen=True)
class Inputs:
    """What a group's template is rendered from, besides the operator's code and settings."""

    # The deployment's spec as the API server holds it (what pydantic alone defaults left out):
    # a default changed by a later operator stays what the group was rendered with.
    spec: Mapping[str, Any]
    annotations: Mapping[str, str]  # the deployment's kimi-operator.io/ annotations
    image: str  # the serving image
    compute_domain: bool  # with spec.computeDomain Auto: whether the API was served
    caches: Mapping[str, str]  # role (model, draft) -> the weights claim

    def text(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, separators=(",", ":"))

    @property
    def roll(self) -> str | None:
        return self.annotations.get(ROLL_ANNOTATION)


def current(kd: KimiDeployment, defaults: OperatorDefaults, caches: Mapping[str, str]) -> Inputs:
    """The inputs of the templates the operator renders now (`defaults` with the serving image
    chosen)."""
    annotations = (kd.metadata.model_extra or {}).get("annotations") or {}
    return Inputs(
        spec=kd.spec.model_dump(mode="json", exclude_unset=True),
        annotations={k: str(v) for k, v in annotations.items() if k.startswith(PREFIX)},
        image=serving_image(kd, defaults),
        compute_domain=defaults.compute_domain_available,
        caches=dict(caches),
    )


def recorded(group: Mapping[str, Any]) -> Inputs | None:
    """What the group's template was rendered from, as its LeaderWorkerSet records it (None: not
    recorded, or not readable)."""
    text = (group.get("metadata", {}).get("annotations") or {}).get(INPUTS_ANNOTATION)
    try:
        return Inputs(**json.loads(text)) if text else None
    except (ValueError, TypeError):
        return None


def _rendered(
    kd: KimiDeployment, defaults: OperatorDefaults, inputs: Inputs, name: str
) -> dict[str, Any] | None:
    """The LeaderWorkerSet `name` rendered from `inputs` by this operator (None: they make no
    such group)."""
    found = rollout.group_of(kd.metadata.name, name)
    if found is None:
        return None
    letter, index = found
    metadata = kd.metadata.model_dump()
    annotations = {
        k: v for k, v in (metadata.get("annotations") or {}).items() if not k.startswith(PREFIX)
    }
    metadata["annotations"] = {**annotations, **inputs.annotations}
    try:
        then = KimiDeployment.model_validate(
            {
                "apiVersion": kd.api_version,
                "kind": kd.kind,
                "metadata": metadata,
                "spec": inputs.spec,
            }
        )
    except ValidationError:
        return None
    if letter == "p" and then.spec.prefill is None:
        return None
    serving = serving_roles(then.spec)[0] if letter == "g" else "prefill"
    chosen = dataclasses.replace(
        defaults, serving_image=inputs.image, compute_domain_available=inputs.compute_domain
    )
    return group_workload(then, chosen, index, serving, inputs.caches)


def _settled(body: Mapping[str, Any]) -> bool:
    """Whether the deployment's last status was reconciled at its current generation with no
    rollout under way: its groups then ran that spec's templates."""
    status = body.get("status") or {}
    generation = body.get("metadata", {}).get("generation")
    return (
        generation is not None
        and status.get("observedGeneration") == generation
        and progressing_reason(status) not in ROLLING_REASONS
    )


def _template_hash(child: Mapping[str, Any]) -> str:
    """A short hash of the template the operator writes (`child`: with its applied-spec
    annotation)."""
    applied = child["metadata"]["annotations"][APPLIED_ANNOTATION]
    return hashlib.sha256(applied.encode()).hexdigest()[:16]


def older(
    kd: KimiDeployment,
    body: Mapping[str, Any],
    defaults: OperatorDefaults,
    now: Inputs,
    *,
    children: Sequence[Mapping[str, Any]],
    live: Mapping[str, Mapping[str, Any]],
) -> dict[str, str]:
    """The groups on an older template, each with the hash of the template the operator writes
    for it now (status.olderTemplateGroups). `children`: as the operator writes them now;
    `live`: the LeaderWorkerSets by name. A group that records no inputs, once found on an
    older template, stays there while that hash does: an edit of the spec that leaves its
    template alone (a scale, monitoring) leaves it alone. A group whose replicas differ (the
    restart budget's brake, or its resume) is not on an older template: it is rewritten."""
    status = body.get("status") or {}
    found_before = {g.get("name"): g.get("template") for g in status.get("olderTemplateGroups", [])}
    out = {}
    for child in children:
        name = child["metadata"]["name"]
        group = live.get(name)
        if child["kind"] != rollout.LWS_KIND or group is None or rollout.is_updated(group, child):
            continue
        if group["spec"].get("replicas") != child["spec"].get("replicas"):
            continue  # stopped or resumed by the restart budget: no operator's doing
        then = recorded(group)
        if then is None and now.roll is None and found_before.get(name) == _template_hash(child):
            out[name] = _template_hash(child)
            continue
        if then is None and _settled(body):
            without_roll = {k: v for k, v in now.annotations.items() if k != ROLL_ANNOTATION}
            then = dataclasses.replace(
                now, annotations=without_roll, image=rollout.leader_image(group)
            )
        if then is None or then.roll != now.roll:
            continue
        rendered = _rendered(kd, defaults, then, name)
        if rendered is not None and rendered["spec"] == child["spec"]:
            out[name] = _template_hash(child)
    return out


def message(kd: KimiDeployment, older: Collection[str]) -> str:
    """Progressing's message while groups run an older template ("" when none does)."""
    if not older:
        return ""
    meta = kd.metadata
    return (
        f"{', '.join(sorted(older))} run the pod template of an earlier operator version (the "
        "same spec): each takes the current one when it restarts (made again, scaled from zero, "
        "a spec edit, resumed), or now, group by group: kubectl annotate kimi "
        f"{meta.name} -n {meta.namespace} {ROLL_ANNOTATION}=$(date +%s) --overwrite"
    )


def stamped(
    children: Sequence[Mapping[str, Any]], live: Mapping[str, Mapping[str, Any]], now: Inputs
) -> list[dict[str, Any]]:
    """The children with their inputs recorded on each LeaderWorkerSet. A group that already has
    the current template keeps what it records (a spec edit that leaves its template alone writes
    no LeaderWorkerSet), unless a roll was asked for since (a metadata write, no restart): a later
    upgrade then does not roll it for a request it already answered."""
    text = now.text()
    out = []
    for child in children:
        group = live.get(child["metadata"]["name"])
        if child["kind"] != rollout.LWS_KIND:
            out.append(dict(child))
            continue
        meta = child["metadata"]
        annotations = {**meta.get("annotations", {}), INPUTS_ANNOTATION: text}
        if group is not None and rollout.is_updated(group, child):
            then = recorded(group)
            kept = (group.get("metadata", {}).get("annotations") or {}).get(INPUTS_ANNOTATION)
            if (then.roll if then is not None else None) == now.roll:
                annotations.pop(INPUTS_ANNOTATION)
                if kept is not None:
                    annotations[INPUTS_ANNOTATION] = kept
        out.append({**child, "metadata": {**meta, "annotations": annotations}})
    return out
