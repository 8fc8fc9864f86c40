"""The SLO scaler in a reconcile (slo_roles.py): what it asks Prometheus, the count it renders and
remembers for each role, and the count it keeps when it cannot decide alone. The sizing itself is
slo_scaling's (tests/kimi_operator/test_slo_scaling.py); a virtual clock, no cluster."""

import random
import time
from dataclasses import replace
from typing import Any

import pytest
import yaml

from kimi_operator import slo_roles
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.api.status import KimiDeploymentStatus
from kimi_operator.cli import EXIT_INVALID
from kimi_operator.plan.capacity import Role
from kimi_operator.plan.costs import scaled
from kimi_operator.plan.stored import document
from kimi_operator.prefill_scaling import POLL_S, Load
from kimi_operator.reconcile.status import Outcome, slo_outcome
from kimi_operator.rollout import TIME_FORMAT
from kimi_operator.slo_scaling import UNAVAILABLE
from tests.fuzz.harness import run_cli
from tests.support.corpus import POOL, SLO
from tests.support.specs import edited

NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:00:30Z"
START = 1_767_225_600.0  # NOW
URL = "http://prometheus:9090"
# A busy agent load: long prompts mostly cached, 400 tokens out, on one serving group.
BUSY = {
    slo_roles.RATE: 6.0,
    slo_roles.PROMPT: 20_000.0,
    slo_roles.OUTPUT: 400.0,
    slo_roles.HITS: 0.8,
    slo_roles.SERVING: 1.0,
    slo_roles.TTFT: 1.0,
    slo_roles.DECODE: 50.0,
}


def deployment(**edits: Any) -> KimiDeployment:
    # A copy of SLO: `edited` sets a dotted path's field in the dict it was given.
    return KimiDeployment.model_validate(
        edited({"spec.autoscaling": {"maxReplicas": 4, "slo": dict(SLO)}} | edits)
    )


def disaggregated(**slo: Any) -> KimiDeployment:
    prefill = {"replicas": 1, "autoscaling": {"maxReplicas": 3, "slo": {"ttftSeconds": 2} | slo}}
    return KimiDeployment.model_validate(
        edited(POOL | {"spec.prefill": prefill, "spec.autoscaling": None})
    )


def test_each_role_reads_its_own_series_at_the_slo_percentiles() -> None:
    kd = deployment(
        **{"spec.autoscaling.slo.ttftPercentile": 99, "spec.autoscaling.slo.decodePercentile": 50}
    )
    asked = slo_roles.queries(kd, "decode")
    where = '{namespace="inference", deployment="k3", role!="prefill"}'
    assert asked[slo_roles.TTFT] == f"max(kimi_role:time_to_first_token_seconds:p99_5m{where})"
    assert asked[slo_roles.DECODE] == (
        f"min(kimi_role:decode_tokens_per_second_per_user:p50_5m{where})"
    )
    assert asked[slo_roles.RATE] == f"sum(kimi_role:requests:rate_5m{where})"
    pd = disaggregated()
    assert slo_roles.roles(pd) == ["prefill"]
    assert slo_roles.queries(pd, "decode") == {}
    assert 'role="prefill"}' in slo_roles.queries(pd, "prefill")[slo_roles.SERVING]


def test_nothing_served_yet_is_no_reading() -> None:
    assert slo_roles.reading({slo_roles.RATE: 1.0, slo_roles.SERVING: None}, NOW) is None
    assert slo_roles.reading({slo_roles.RATE: None, slo_roles.SERVING: 1.0}, NOW) is None
    found = slo_roles.reading({slo_roles.RATE: 0.0, slo_roles.SERVING: 2.0}, NOW)
    assert found is not None
    assert (found.serving_groups, found.prompt_tokens, found.ttft_s) == (2, None, None)


def test_the_count_is_rendered_and_remembered_never_written_to_the_spec() -> None:
    kd = deployment()
    scaled = slo_roles.evaluate(kd, {}, {"decode": Load(BUSY)}, now=NOW, url=URL)
    assert scaled.status is not None
    decided = scaled.status["decode"]["desiredReplicas"]
    assert decided > 1  # 6 requests/s of 20K-token prompts: more than one group
    assert scaled.kd.spec.replicas == decided
    assert kd.spec.replicas == 1  # the spec as written: the operator never writes it
    assert [n.reason for n in scaled.notices] == ["SloScaled"]
    assert scaled.status["decode"]["needed"]["fewer"]["replicas"] == decided - 1
    # The status the controller writes carries it, and names the operator as the autoscaler.
    result = slo_outcome(Outcome({"autoscaler": ""}), scaled)
    assert result.status["autoscaler"] == "kimi-operator/slo"
    assert result.requeue_after_s == 30.0
    KimiDeploymentStatus.model_validate(result.status)
    # The next reconcile, with nothing read (a check of the children), finds the same count.
    assert slo_roles.recorded(kd, result.status).spec.replicas == decided


def test_the_prefill_role_sets_the_prefill_count() -> None:
    pd = disaggregated()
    load = Load({**BUSY, slo_roles.DECODE: None})
    scaled = slo_roles.evaluate(pd, {}, {"prefill": load}, now=NOW, url=URL)
    assert scaled.status is not None
    assert set(scaled.status) == {"prefill"}
    assert scaled.kd.spec.prefill is not None
    assert scaled.kd.spec.prefill.replicas == scaled.status["prefill"]["desiredReplicas"]
    assert scaled.kd.spec.replicas == pd.spec.replicas
    assert slo_outcome(Outcome({"autoscaler": ""}), scaled).status["autoscaler"] == ""


def test_another_autoscaler_on_the_count_is_refused_and_the_count_kept() -> None:
    kd = deployment()
    decided = {
        "desiredReplicas": 3,
        "message": "decided earlier",
        "lastScaleTime": NOW,
        "recommendations": [{"at": NOW, "replicas": 3}],
    }
    old = {"sloAutoscaler": {"decode": decided}}
    hpa = "HorizontalPodAutoscaler/k3-by-hand"
    scaled = slo_roles.evaluate(kd, old, {"decode": Load(BUSY)}, now=LATER, shared=[hpa], url=URL)
    assert scaled.kd.spec.replicas == 3
    assert scaled.status == old["sloAutoscaler"]  # nothing decided, nothing written
    (problem,) = scaled.problems
    assert problem.reason == slo_roles.SHARED
    assert problem.message.startswith(f"{hpa} also targets this KimiDeployment's scale")
    assert "keeps 3 groups" in problem.message
    assert scaled.notices == []


def test_no_answer_keeps_the_count_and_says_which_prometheus_and_why() -> None:
    kd = deployment()
    old = {"sloAutoscaler": {"decode": {"desiredReplicas": 2}}}
    scaled = slo_roles.evaluate(kd, old, {"decode": Load(error="HTTP 503")}, now=LATER, url=URL)
    assert scaled.kd.spec.replicas == 2
    (problem,) = scaled.problems
    assert problem.reason == UNAVAILABLE
    assert problem.message == (
        f"no answer from Prometheus {URL} for the decode groups' load (HTTP 503): keeping 2 "
        "decode groups"
    )
    silent = slo_roles.evaluate(kd, old, {"decode": Load({})}, now=LATER, url=URL)
    assert "no value for sum(kimi_role:requests:rate_5m{" in silent.problems[0].message


def _autoscaler(kind: str, name: str, target: dict[str, str], owner: str = "") -> dict[str, Any]:
    refs = [{"uid": owner, "controller": True}] if owner else []
    return {
        "kind": kind,
        "metadata": {"name": name, "ownerReferences": refs},
        "spec": {"scaleTargetRef": target},
    }


def test_foreign_autoscalers_are_the_others_on_this_deployments_count() -> None:
    kd = deployment()
    this = {"apiVersion": "kimi-operator.io/v1alpha1", "kind": "KimiDeployment", "name": "k3"}
    listed = [
        _autoscaler("HorizontalPodAutoscaler", "mine", this, owner="uid-k3"),
        _autoscaler("HorizontalPodAutoscaler", "by-hand", this),
        _autoscaler("ScaledObject", "keda", this),
        _autoscaler("HorizontalPodAutoscaler", "other", this | {"name": "k3-canary"}),
        _autoscaler("HorizontalPodAutoscaler", "web", {"kind": "Deployment", "name": "k3"}),
    ]
    assert slo_roles.foreign(kd, "uid-k3", listed) == [
        "HorizontalPodAutoscaler/by-hand",
        "ScaledObject/keda",
    ]


@pytest.mark.parametrize(
    ("groups", "seconds"),
    [
        ([], slo_roles.DEFAULT_STARTUP_S),
        ([("k3-p0", "2026-01-01T00:00:00Z", 900.0)], 900.0),  # another role's, for want of one
        (
            [
                ("k3-g0", "2026-01-01T00:00:00Z", 2400.0),  # cold
                ("k3-g1", "2026-01-01T02:00:00Z", 600.0),  # warm caches: the latest start
                ("k3-p0", "2026-01-01T03:00:00Z", 300.0),
            ],
            600.0,
        ),
    ],
)
def test_the_forecast_looks_ahead_by_the_roles_last_start(
    groups: list[tuple[str, str, float]], seconds: float
) -> None:
    status = {"groups": [{"name": n, "startedAt": at, "startupSeconds": s} for n, at, s in groups]}
    assert slo_roles.startup_seconds(deployment(), status, "decode") == seconds


def test_objectives_no_count_can_meet_are_refused_saying_what_can_be() -> None:
    """The admission webhook's and validate's verdict: a 50 ms TTFT on 16K-token agent turns
    is beyond any number of TP16 groups; 2 s and 40 tok/s per user are not."""
    assert slo_roles.refusals(deployment()) == []
    hopeless = deployment(**{"spec.autoscaling.slo": {"ttftSeconds": 0.05}})
    (problem,) = slo_roles.refusals(hopeless)
    assert problem.path == "spec.autoscaling.slo"
    assert problem.message.startswith(
        "spec.autoscaling.slo: TTFT p90 <= 0.05 s cannot be met on 16 GPUs a group"
    )
    assert "gets TTFT p90" in problem.message  # what the shape meets at best
    doc = edited({"spec.autoscaling": {"maxReplicas": 4, "slo": {"ttftSeconds": 0.05}}})
    code, out, _ = run_cli(["validate", "-"], yaml.safe_dump(doc).encode())
    assert code == EXIT_INVALID
    assert out.startswith(f"<stdin>: {problem.message}")


def test_a_steady_load_writes_no_status_and_a_change_of_load_does() -> None:
    """The controller writes status only when it differs from what it read (controller/loop.py):
    a steady load, read every poll within ±2% (a 5-minute rate wanders), settles to one status;
    a doubled load changes it at once."""
    kd = deployment(**{"spec.autoscaling.scaleDownStabilizationSeconds": 600})
    noise = random.Random(7)
    status: dict[str, Any] = {}
    written = []
    for poll in range(200):
        busy = BUSY | {slo_roles.RATE: 12.0} if poll >= 160 else BUSY
        values = {key: value * noise.uniform(0.98, 1.02) for key, value in busy.items()}
        groups = (status.get("sloAutoscaler") or {}).get("decode", {}).get("desiredReplicas", 1)
        values[slo_roles.SERVING] = groups
        now = time.strftime(TIME_FORMAT, time.gmtime(START + poll * POLL_S))
        scaled = slo_roles.evaluate(kd, status, {"decode": Load(values)}, now=now, url=URL)
        result = slo_outcome(Outcome(dict(status)), scaled)
        written.append(result.status != status)
        status = result.status
    settled = 60  # polls: 30 minutes, past the stabilization window and the correction
    assert written[:settled].count(True) >= 1
    assert not any(written[settled:160]), [i for i, w in enumerate(written) if w]
    assert written[160]


def test_the_memory_between_writes_is_used_only_while_status_shows_its_view() -> None:
    """Holt and the correction go on from the process's last view while status still shows the
    view written beside it; another replica's write, an edit or a restart: from status."""
    kd = deployment()
    unmeasured = BUSY | {slo_roles.TTFT: None, slo_roles.DECODE: None}  # no errors to show
    scaled = slo_roles.evaluate(kd, {}, {"decode": Load(unmeasured)}, now=NOW, url=URL)
    assert scaled.status is not None
    written = scaled.status["decode"]  # as the controller writes it and reads it back
    assert slo_roles._remembered(kd, "decode", written) is not None
    other = written | {"forecast": written["forecast"] | {"level": 99.0}}
    assert slo_roles._remembered(kd, "decode", other) is None
    assert slo_roles._remembered(deployment(**{"metadata.name": "k4"}), "decode", written) is None
    slo_roles.forget(kd.metadata.namespace, kd.metadata.name)  # the deployment was deleted
    assert slo_roles._remembered(kd, "decode", written) is None


STORED = {"configMapName": "k3-calibration"}
WHERE = "ConfigMap k3-calibration, key calibration.json"
# Two groups on the built-in.
STEADY: dict[Role, Load] = {"decode": Load({**BUSY, slo_roles.RATE: 2.0})}


def calibrated(**slo: Any) -> KimiDeployment:
    """The deployment of `deployment()` with its slo naming a stored calibration."""
    return deployment(**{"spec.autoscaling.slo": SLO | {"calibration": STORED} | slo})


def stored(kd: KimiDeployment, slower: float = 1.5, **changes: Any) -> dict[str, Any]:
    """The ConfigMap a user made from `kimi-operator export-calibration`: a calibration of the
    deployment's shape, its steps `slower` times as long as the built-in's."""
    builtin = slo_roles.scaler(kd, "decode").calibration
    measured = replace(
        builtin,
        name="k3-measured",
        origin="measured: runs/k3",
        costs=scaled(builtin.costs, slower),
        **changes,
    )
    return {"k3-calibration": {"data": {"calibration.json": document(measured)}}}


def test_a_stored_calibration_of_a_slower_server_sizes_more_groups() -> None:
    """The same load, read twice 30 s apart: on the deployment's own calibration, which measured
    steps 1.5 times as long as the GB300 built-in's, it needs more groups, and status says which
    calibration each count was sized on."""
    builtin, kd = deployment(), calibrated()
    maps = stored(kd)
    assert slo_roles.calibration_maps(kd) == ["k3-calibration"]
    assert slo_roles.calibration_maps(builtin) == []
    on_builtin = slo_roles.evaluate(builtin, {}, STEADY, now=NOW, url=URL)
    on_stored = slo_roles.evaluate(kd, {}, STEADY, now=NOW, url=URL, maps=maps)
    assert on_builtin.status is not None
    assert on_stored.status is not None
    assert on_stored.problems == []
    assert (on_builtin.kd.spec.replicas, on_stored.kd.spec.replicas) == (2, 3)
    assert on_stored.status["decode"]["calibration"] == {
        "name": "k3-measured",
        "origin": "measured: runs/k3",
        "configMap": WHERE,
    }
    assert on_builtin.status["decode"]["calibration"]["name"] == (
        "gb300-tp16-latency_specialized-nodraft"
    )
    old, old_builtin = {"sloAutoscaler": on_stored.status}, {"sloAutoscaler": on_builtin.status}
    again = slo_roles.evaluate(kd, old, STEADY, now=LATER, url=URL, maps=maps)
    same = slo_roles.evaluate(builtin, old_builtin, STEADY, now=LATER, url=URL)
    assert again.kd.spec.replicas > same.kd.spec.replicas  # each corrected by what it measured
    KimiDeploymentStatus.model_validate({"sloAutoscaler": again.status})


def test_a_correction_learnt_on_another_calibration_is_not_carried_over() -> None:
    kd = calibrated()
    first = slo_roles.evaluate(deployment(), {}, STEADY, now=NOW, url=URL)
    assert first.status is not None
    learnt = first.status["decode"] | {"correction": {"slower": 1.9}}

    def slower(memory: dict[str, Any]) -> float:
        old = {"sloAutoscaler": {"decode": memory}}
        found = slo_roles.evaluate(kd, old, STEADY, now=LATER, maps=stored(kd))
        assert found.status is not None
        return float(found.status["decode"]["correction"]["slower"])

    fresh = {k: v for k, v in learnt.items() if k != "correction"}
    assert slower(learnt) == slower(fresh)  # learnt on the built-in: dropped
    unnamed = {k: v for k, v in learnt.items() if k != "calibration"}
    assert slower(unnamed) == slower(fresh)  # not recorded: the built-in's, dropped too
    mine = learnt | {"calibration": {"name": "k3-measured", "origin": "measured: runs/k3"}}
    assert slower(mine) > slower(fresh)  # learnt on this one: kept

    # On the built-in, a memory from before the calibration was recorded keeps its correction.
    builtin = deployment()

    def on_builtin(memory: dict[str, Any]) -> float:
        old = {"sloAutoscaler": {"decode": memory}}
        found = slo_roles.evaluate(builtin, old, STEADY, now=LATER)
        assert found.status is not None
        return float(found.status["decode"]["correction"]["slower"])

    assert on_builtin(unnamed) == on_builtin(learnt) > on_builtin(fresh)


@pytest.mark.parametrize(
    ("maps", "why"),
    [
        ({}, "ConfigMap k3-calibration not found in namespace inference"),
        (
            {"k3-calibration": {"data": {"k3.json": "{}"}}},
            "ConfigMap k3-calibration has no key calibration.json (its keys: k3.json)",
        ),
        (
            {"k3-calibration": {"data": {"calibration.json": "{"}}},
            f"{WHERE} is not a calibration document: not JSON: Expecting property name",
        ),
        (
            {"k3-calibration": {"data": {"calibration.json": '{"kind": "KimiCalibration"}'}}},
            f"{WHERE} is not a calibration document: version None, not 1",
        ),
        (
            "gpus",
            f"{WHERE} is a calibration of another shape: it measured GPUs a group 8, the "
            "deployment has 16",
        ),
        (
            "drafts",
            f"{WHERE} is a calibration of another shape: it measured draft tokens 3, the "
            "deployment has 0",
        ),
    ],
)
def test_a_calibration_that_cannot_be_used_is_degraded_and_the_builtin_sizes(
    maps: dict[str, Any] | str, why: str
) -> None:
    kd = calibrated()
    if maps == "gpus":
        maps = stored(kd, gpus=8)
    elif maps == "drafts":
        maps = stored(kd, draft_tokens=3)
    assert isinstance(maps, dict)
    found = slo_roles.evaluate(kd, {}, STEADY, now=NOW, url=URL, maps=maps)
    on_builtin = slo_roles.evaluate(deployment(), {}, STEADY, now=NOW, url=URL)
    (problem,) = found.problems
    assert problem.reason == slo_roles.CALIBRATION
    name = "gb300-tp16-latency_specialized-nodraft"
    assert problem.message.startswith(f"spec.autoscaling.slo.calibration: {why}")
    assert problem.message.endswith(
        f"; the decode groups are sized on the built-in {name} calibration meanwhile"
    )
    assert found.kd.spec.replicas == on_builtin.kd.spec.replicas
    assert found.status is not None
    assert found.status["decode"]["calibration"]["name"] == name


def test_the_prefill_roles_calibration_is_its_own_field() -> None:
    pd = disaggregated(calibration=STORED)
    load = Load({**BUSY, slo_roles.DECODE: None})
    found = slo_roles.evaluate(pd, {}, {"prefill": load}, now=NOW, url=URL)
    (problem,) = found.problems
    assert problem.message.startswith(
        "spec.prefill.autoscaling.slo.calibration: ConfigMap k3-calibration not found"
    )


def test_the_webhook_refuses_on_the_builtin_it_reads_no_configmap() -> None:
    """Admission reads nothing from the cluster: an slo naming a calibration is judged on the
    built-in for its shape, as one naming none."""
    kd = deployment(**{"spec.autoscaling.slo": {"ttftSeconds": 0.05, "calibration": STORED}})
    (problem,) = slo_roles.refusals(kd)
    assert "(gb300-tp16-latency_specialized-nodraft calibration)" in problem.message
    assert slo_roles.refusals(calibrated()) == []


def test_a_calibration_sweeps_load_is_not_demand_the_count_and_learning_hold() -> None:
    """On a virtual clock, a reading every 30 s: a steady load, then ten minutes of a sweep's
    load (eight times the rate, slow answers) while its Job runs, then the steady load again.
    Held, the count, forecast and correction are what they were before the sweep; read as
    demand (the same readings without the Job), the sweep adds groups and is learnt from."""
    kd = deployment()
    steady = Load(BUSY | {slo_roles.RATE: 1.0})
    sweep = Load(BUSY | {slo_roles.RATE: 8.0, slo_roles.TTFT: 30.0, slo_roles.DECODE: 5.0})

    def run(calibrating: list[str]) -> list[dict[str, Any]]:
        status: dict[str, Any] = {}
        seen = []
        for i in range(40):
            now = time.strftime(TIME_FORMAT, time.gmtime(START + 30 * i))
            swept = 10 <= i < 30
            load = sweep if swept else steady
            scaled = slo_roles.evaluate(
                kd,
                status,
                {"decode": load},
                now=now,
                url=URL,
                calibrating=calibrating if swept else (),
            )
            assert scaled.status is not None
            status = {"sloAutoscaler": scaled.status}
            seen.append(scaled.status["decode"])
        return seen

    slo_roles.forget("inference", "k3")
    held = run(["k3-calibrate-g-29483520"])
    before = held[9]
    for during in held[10:30]:
        assert during == before | {"message": during["message"]}
        assert during["message"] == (
            "held while calibration Job k3-calibrate-g-29483520 runs: its sweep loads the "
            f"groups, so the load read now is not demand; keeping {before['desiredReplicas']} "
            "decode groups, learning nothing from it"
        )
    assert held[-1]["desiredReplicas"] == before["desiredReplicas"]
    assert held[-1]["correction"] == before["correction"]
    KimiDeploymentStatus.model_validate({"sloAutoscaler": {"decode": held[20]}})
    slo_roles.forget("inference", "k3")
    demand = run([])
    assert max(s["desiredReplicas"] for s in demand[10:30]) > before["desiredReplicas"]
    assert demand[29]["correction"] != before["correction"]
