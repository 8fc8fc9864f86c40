"""Groups on an earlier operator's template (upgrades.py): left as they are, and rewritten only
for a reason of their own: an edit of what they are rendered from, the roll-template annotation,
the restart budget's stop. One reconcile's decision and status at a time, without any client."""

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kimi_operator.api.validation import check_document
from kimi_operator.builders import build_children, preview_weights
from kimi_operator.builders.meta import ROUTABLE_LABEL
from kimi_operator.k8s.merge import with_owner
from kimi_operator.k8s.resources import LEADER_WORKER_SET
from kimi_operator.reconcile.decide import Decision, decide
from kimi_operator.rollout import is_updated
from kimi_operator.upgrades import (
    INPUTS_ANNOTATION,
    ROLL_ANNOTATION,
    Inputs,
    current,
    older,
    recorded,
)
from tests.kimi_operator.api.test_one_verdict import SPECS
from tests.kimi_operator.reconcile.test_decide import (
    DEFAULTS,
    NAME,
    NOW,
    body,
    observed,
    ready,
    reconciled,
    status_of,
)
from tests.support.cluster import condition
from tests.support.corpus import HF, PVC
from tests.support.fuzzing import examples
from tests.support.specs import edited

ROOT = Path(__file__).resolve().parents[2]
G0, G1 = f"{NAME}-g0", f"{NAME}-g1"


def earlier(group: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    """`group` as an earlier operator rendered it from the same inputs: its pods' labels without
    the routable one (as before commit 87c27e6) and with one of its own, its applied-spec
    annotation to match."""
    out = copy.deepcopy(group)
    template = out["spec"]["leaderWorkerTemplate"]
    for pod in (template["leaderTemplate"], template["workerTemplate"]):
        pod["metadata"]["labels"].pop(ROUTABLE_LABEL)
        pod["metadata"]["labels"]["kimi-operator.io/earlier"] = "true"
    return with_owner(out, owner)


def upgraded(doc: dict[str, Any], *, recorded_inputs: bool = True) -> dict[str, dict[str, Any]]:
    """The Ready groups of `doc` as an earlier operator left them, by name."""
    first = decide(observed(doc), DEFAULTS, now=NOW)
    live = {}
    for child in first.apply:
        if child["kind"] != LEADER_WORKER_SET.kind:
            continue
        group = ready(earlier(child, doc))
        if not recorded_inputs:
            group["metadata"]["annotations"].pop(INPUTS_ANNOTATION)
        live[child["metadata"]["name"]] = group
    return live


def lws(decision: Decision, name: str = "") -> list[dict[str, Any]]:
    """The LeaderWorkerSet `name` (all: "") if the decision writes it."""
    return [
        c
        for c in decision.apply
        if c["kind"] == "LeaderWorkerSet" and name in ("", c["metadata"]["name"])
    ]


def edit(doc: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """`doc` reconciled, then its spec edited (a new generation)."""
    out = body(reconciled(doc), **{**doc["spec"], **spec})
    out["metadata"]["generation"] = doc["metadata"]["generation"] + 1
    return out


def groups_written(decision: Decision) -> list[str]:
    return sorted(c["metadata"]["name"] for c in lws(decision))


def test_groups_on_an_earlier_template_are_left_as_they_are() -> None:
    doc = body(replicas=2)
    seen = observed(body(reconciled(doc), replicas=2), groups=upgraded(doc), pods=[])
    decision = decide(seen, DEFAULTS, now=NOW)
    assert groups_written(decision) == []
    assert sorted(g["metadata"]["name"] for g in decision.held) == [G0, G1]
    assert set(decision.older) == {G0, G1}
    assert decision.steps is not None
    assert (decision.steps.rolling, decision.steps.updated) == (False, 2)
    status = status_of(seen, decision, [*decision.apply, *decision.held]).status
    assert [g["name"] for g in status["olderTemplateGroups"]] == [G0, G1]
    progressing = condition(status, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "OlderTemplate")
    assert f"{ROLL_ANNOTATION}=$(date +%s)" in progressing["message"]


def test_an_edit_of_their_template_rolls_them_one_at_a_time() -> None:
    doc = body(replicas=2)
    changed = edit(doc, image="registry/vllm-kimi:2")
    decision = decide(observed(changed, groups=upgraded(doc), pods=[]), DEFAULTS, now=NOW)
    assert groups_written(decision) == [G0]  # maxUnavailable 1
    assert decision.older == {}
    (written,) = lws(decision, G0)
    then = recorded(written)
    assert then is not None
    assert then.image == "registry/vllm-kimi:2"


def test_an_edit_that_leaves_their_template_alone_leaves_them_alone() -> None:
    doc = body(replicas=2)
    changed = edit(doc, monitoring={"interval": "30s"})
    decision = decide(observed(changed, groups=upgraded(doc), pods=[]), DEFAULTS, now=NOW)
    assert groups_written(decision) == []
    assert set(decision.older) == {G0, G1}


def test_groups_from_before_the_inputs_were_recorded() -> None:
    """Taken as rendered from the spec the last status reconciled, with the image they run; a
    status of an earlier generation (an edit the earlier operator had not acted on) rolls them."""
    doc = body(replicas=2)
    live = upgraded(doc, recorded_inputs=False)
    seen = observed(body(reconciled(doc), replicas=2), groups=live, pods=[])
    first = decide(seen, DEFAULTS, now=NOW)
    assert set(first.older) == {G0, G1}
    image = edit(doc, image="registry/vllm-kimi:2")
    decision = decide(observed(image, groups=live, pods=[]), DEFAULTS, now=NOW)
    assert (decision.older, groups_written(decision)) == ({}, [G0])
    behind = body({**reconciled(doc), "observedGeneration": 1}, replicas=2)
    decision = decide(observed(behind, groups=live, pods=[]), DEFAULTS, now=NOW)
    assert (decision.older, groups_written(decision)) == ({}, [G0])
    # Found there, they stay while the status's hash of their current template holds: a scale
    # (a new generation, as every autoscaler's) leaves them alone, an image edit rolls them.
    found = status_of(seen, first, [*first.apply, *first.held]).status
    scaled = body(found, **{**doc["spec"], "replicas": 3})
    scaled["metadata"]["generation"] = 3
    decision = decide(observed(scaled, groups=live, pods=[]), DEFAULTS, now=NOW)
    assert (set(decision.older), groups_written(decision)) == ({G0, G1}, [f"{NAME}-g2"])
    image = body(found, **{**doc["spec"], "image": "registry/vllm-kimi:2"})
    image["metadata"]["generation"] = 3
    decision = decide(observed(image, groups=live, pods=[]), DEFAULTS, now=NOW)
    assert (decision.older, groups_written(decision)) == ({}, [G0])


def test_the_roll_template_annotation_rolls_them_and_is_remembered() -> None:
    doc = body(replicas=2)
    asked = body(reconciled(doc), replicas=2)
    asked["metadata"]["annotations"] = {ROLL_ANNOTATION: "1"}
    live = upgraded(doc)
    decision = decide(observed(asked, groups=live, pods=[]), DEFAULTS, now=NOW)
    assert groups_written(decision) == [G0]  # group by group, as any template change
    (written,) = lws(decision, G0)
    assert json.loads(written["metadata"]["annotations"][INPUTS_ANNOTATION])["annotations"] == {
        ROLL_ANNOTATION: "1"
    }
    # A group that already has the current template records the request, in its metadata only
    # (no restart): a later upgrade does not roll it for a request it already answered.
    before = copy.deepcopy(written)
    inputs = json.loads(before["metadata"]["annotations"][INPUTS_ANNOTATION])
    before["metadata"]["annotations"][INPUTS_ANNOTATION] = json.dumps(inputs | {"annotations": {}})
    live[G0] = ready(before)
    decision = decide(observed(asked, groups=live, pods=[]), DEFAULTS, now=NOW)
    stamped = lws(decision, G0)[0]
    assert stamped["spec"] == before["spec"]
    then = recorded(stamped)
    assert then is not None
    assert then.roll == "1"


def test_a_group_the_restart_budget_stopped_takes_the_current_template() -> None:
    """It has no pod left to restart: the template costs nothing."""
    doc = body(replicas=2)
    status = reconciled(doc)
    status["groups"] = [
        {**g, "stopped": True} if g["name"] == G1 else g for g in status.get("groups", [])
    ]
    decision = decide(
        observed(body(status, replicas=2), groups=upgraded(doc), pods=[]), DEFAULTS, now=NOW
    )
    assert set(decision.older) == {G0}
    (written,) = lws(decision, G1)
    assert written["spec"]["replicas"] == 0  # the brake
    labels = written["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"]
    assert labels[ROUTABLE_LABEL] == "true"  # the current template


DISAGGREGATED: dict[str, Any] = {
    "routing": {"mode": "InferencePool"},
    "prefill": {"replicas": 2},
    "rollout": {"maxSurge": 1, "maxUnavailable": 0},
}
CASES = [
    *((path.name, {}) for path in sorted((ROOT / "crds" / "samples").glob("*.yaml"))),
    ("k3-tp8-dspark.yaml", DISAGGREGATED),
]


@pytest.mark.parametrize(("sample", "spec"), CASES)
def test_what_a_group_records_renders_its_template_again(sample: str, spec: dict[str, Any]) -> None:
    """Every sample's recorded inputs (and a disaggregated one's, surge groups included), read
    back and rendered, give each of its groups as the operator renders them: a group is never
    taken for older, nor rolled, by the recording."""
    doc = yaml.safe_load((ROOT / "crds" / "samples" / sample).read_text())
    doc["spec"] |= spec
    report = check_document(doc)
    assert report.deployment is not None
    assert current(report.deployment, DEFAULTS, {}).spec == doc["spec"]  # as the API holds it
    assert assert_rendered_again(doc) > 0


@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    max_examples=examples(200),
)
@given(spec=SPECS, source=st.sampled_from([PVC, HF, PVC | HF]))
def test_any_accepted_spec_renders_its_template_again(
    spec: dict[str, Any], source: dict[str, Any]
) -> None:
    """The same for the random specs of test_one_verdict that validation accepts."""
    doc = edited({"spec": {"model": {"name": "m", "source": source}, **spec}})
    assume(check_document(doc).deployment is not None)
    assert_rendered_again(doc)


def assert_rendered_again(doc: dict[str, Any]) -> int:
    """Each group of `doc` found older when it records its inputs; the groups checked."""
    doc["metadata"] |= {"uid": "uid-1", "annotations": {ROLL_ANNOTATION: "x"}}
    kd = check_document(doc).deployment
    assert kd is not None
    weights = preview_weights(kd)
    children = [with_owner(c, doc) for c in build_children(kd, DEFAULTS, 1, weights=weights)]
    inputs = current(kd, DEFAULTS, {role: w.claim_name for role, w in weights.items()})
    assert recorded({"metadata": {"annotations": {INPUTS_ANNOTATION: inputs.text()}}}) == inputs
    live = {
        c["metadata"]["name"]: earlier(c, doc) | {"metadata": recorded_by(earlier(c, doc), inputs)}
        for c in children
        if c["kind"] == LEADER_WORKER_SET.kind
    }
    found = older(kd, doc, DEFAULTS, inputs, children=children, live=live)
    assert set(found) == set(live)
    return len(live)


def recorded_by(group: dict[str, Any], inputs: Inputs) -> dict[str, Any]:
    """`group`'s metadata recording `inputs`."""
    annotations = {**group["metadata"]["annotations"], INPUTS_ANNOTATION: inputs.text()}
    return {**group["metadata"], "annotations": annotations}


def test_a_new_operator_setting_rolls_nothing_either() -> None:
    """The routing sidecar's image (a chart value) reaches the decode leaders' pods: the groups
    keep the one they run, as after an upgrade."""
    doc = body(**DISAGGREGATED)
    first = decide(observed(doc), DEFAULTS, now=NOW)
    live = {c["metadata"]["name"]: ready(c) for c in first.apply if c["kind"] == "LeaderWorkerSet"}
    seen = observed(body(reconciled(doc), **DISAGGREGATED), groups=live, pods=[])
    assert decide(seen, DEFAULTS, now=NOW).older == {}
    sidecar = dataclasses.replace(DEFAULTS, routing_sidecar_image="registry/routing-sidecar:2")
    decision = decide(seen, sidecar, now=NOW)
    assert set(decision.older) == {G0}  # the decode group: the prefill groups have no sidecar
    assert G0 not in groups_written(decision)  # the prefill groups' writes change nothing:
    assert all(is_updated(live[c["metadata"]["name"]], c) for c in lws(decision))
