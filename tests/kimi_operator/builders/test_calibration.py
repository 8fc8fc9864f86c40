"""A stored calibration's schedule: the CronJob that keeps it current and what it runs as
(builders/calibration.py), as a 1.33 API server would accept them."""

from typing import Any

import kubernetes_validate

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.bench.job import default_image
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.builders.calibration import CALIBRATION_LABEL
from tests.support.corpus import POOL, SLO
from tests.support.specs import edited

CALIBRATION = {"configMapName": "k3-cal", "key": "tp16.json", "schedule": "0 4 * * 0"}
KINDS = ("ServiceAccount", "Role", "RoleBinding", "CronJob")


def deployment(calibration: dict[str, Any], **edits: Any) -> KimiDeployment:
    slo = dict(SLO) | {"calibration": calibration}
    return KimiDeployment.model_validate(
        edited({"spec.autoscaling": {"maxReplicas": 4, "slo": slo}} | edits)
    )


def calibration_objects(
    kd: KimiDeployment, indices: dict[str, list[int]] | None = None
) -> list[dict[str, Any]]:
    children = build_children(kd, OperatorDefaults(), indices=indices)
    return [c for c in children if c["kind"] in KINDS]


def test_a_schedule_gets_a_cronjob_that_sweeps_one_group_and_writes_the_configmap() -> None:
    objects = calibration_objects(deployment(CALIBRATION))
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        (kind, "k3-calibrate-g") for kind in KINDS
    ]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.33", strict=True)
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == "k3"
    cron = objects[-1]["spec"]
    assert (cron["schedule"], cron["timeZone"], cron["concurrencyPolicy"]) == (
        "0 4 * * 0",
        "Etc/UTC",
        "Forbid",
    )
    assert cron["startingDeadlineSeconds"] == 3600
    assert cron["successfulJobsHistoryLimit"] == cron["failedJobsHistoryLimit"] == 3
    job = cron["jobTemplate"]
    assert job["metadata"]["labels"][CALIBRATION_LABEL] == "k3"
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (0, 3600)
    pod = job["spec"]["template"]["spec"]
    # Not the deployment's pods: the operator lists those by its selector labels.
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] != "kimi-k3"
    assert pod["serviceAccountName"] == "k3-calibrate-g"
    assert pod["automountServiceAccountToken"] is True
    (sweep,) = pod["initContainers"]
    (export,) = pod["containers"]
    assert sweep["image"] == export["image"] == default_image()
    assert sweep["command"] == [
        "kimi-operator", "bench", "--endpoint", "http://k3-g0-0.k3-g0.inference:8000/v1",
        "--profile", "calibration", "--gpus", "16", "--output", "/results/$(JOB_NAME)",
        "--no-progress",
    ]  # fmt: skip
    assert export["command"] == [
        "kimi-operator", "export-calibration", "--calibration", "/results/$(JOB_NAME)",
        "--calibration-drafts", "0", "--config-map", "inference/k3-cal:tp16.json",
    ]  # fmt: skip
    assert {"name": "JOB_NAME", "valueFrom": {"fieldRef": {"fieldPath": (
        "metadata.labels['batch.kubernetes.io/job-name']"
    )}}} in export["env"]  # fmt: skip


def test_its_role_grants_the_one_configmap_and_create() -> None:
    _, role, binding, _ = calibration_objects(deployment(CALIBRATION))
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["k3-cal"],
            "verbs": ["get", "patch"],
        },
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    ]
    assert binding["roleRef"]["name"] == "k3-calibrate-g"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "k3-calibrate-g", "namespace": "inference"}
    ]


def test_the_first_decode_group_kept_is_swept_and_a_decode_leaders_own_vllm() -> None:
    kd = deployment(CALIBRATION)
    cron = calibration_objects(kd, {"g": [2, 5]})[-1]
    sweep = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["initContainers"][0]
    assert "http://k3-g2-0.k3-g2.inference:8000/v1" in sweep["command"]
    prefill = {"replicas": 1, "autoscaling": {"maxReplicas": 3, "slo": {
        "ttftSeconds": 2, "calibration": CALIBRATION | {"key": "prefill.json"},
    }}}  # fmt: skip
    pd = KimiDeployment.model_validate(
        edited(POOL | {"spec.prefill": prefill, "spec.autoscaling": None})
    )
    objects = [o for o in calibration_objects(pd) if o["metadata"]["name"] != "k3-epp"]
    assert [o["metadata"]["name"] for o in objects] == ["k3-calibrate-p"] * 4
    pod = objects[-1]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    # Behind no routing sidecar: the decode leader's vLLM, which prefills too.
    assert "http://k3-g0-0.k3-g0.inference:8200/v1" in pod["initContainers"][0]["command"]
    assert "inference/k3-cal:prefill.json" in pod["containers"][0]["command"]


def test_no_schedule_no_cronjob() -> None:
    assert calibration_objects(deployment({"configMapName": "k3-cal"})) == []
