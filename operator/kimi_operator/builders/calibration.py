"""spec.autoscaling.slo.calibration.schedule (and spec.prefill.autoscaling's): the CronJob that
keeps a role's stored calibration current, and the ServiceAccount, Role and RoleBinding it runs
as (docs/scaling.md, "Keeping it current").

Each run is one pod of the bench image (bench/job.py's pieces, as `bench --render-job` runs
it): an init container sweeps `kimi-operator bench --profile calibration` against the leader of
the deployment's first decode group (one group: through the Service the sweep's batches would be
spread over every group, and the step costs measured would not be one group's), its prompt length
and batch sized to that server by bench; then `kimi-operator export-calibration --config-map`
fits the sweep and writes the document into the slo's ConfigMap key, where the operator reads it
at its next evaluation. The calibration is named after the Job (one name a run), so the
correction learnt on the last one is dropped (slo_roles.py). While a run's Job is active its
load is not read as demand (slo_roles.py, `CALIBRATING`): the Jobs carry `CALIBRATION_LABEL`.
"""

from typing import Any, Final

from kimi_operator.api.spec import CalibrationRef, KimiDeployment
from kimi_operator.bench.job import LABELS, RESULTS_DIR, access, container, default_image, pod
from kimi_operator.builders.disaggregation import serving_roles
from kimi_operator.builders.meta import group_name, metadata
from kimi_operator.builders.vllm_args import http_port
from kimi_operator.plan.capacity import Role
from kimi_operator.plan.configs import deployment_configuration

COMPONENT: Final = "calibration"
# On each run's Job and pod: the KimiDeployment's name (observe.py finds the active runs by it).
CALIBRATION_LABEL: Final = "kimi-operator.io/calibration"
# The schedule is in UTC, whatever the kube-controller-manager's local time zone.
TIME_ZONE: Final = "Etc/UTC"
# A run missed by more than this (the controller down at its time) is skipped, not run later at
# an hour the user did not choose.
STARTING_DEADLINE_S: Final = 3600
# A sweep takes minutes; one that hangs is stopped, so that it neither holds the SLO scaler nor
# keeps the next run from starting (concurrencyPolicy Forbid).
ACTIVE_DEADLINE_S: Final = 3600
HISTORY: Final = 3  # finished runs of each outcome kept, with their pods' logs
JOB_NAME_ENV: Final = "JOB_NAME"
JOB_NAME_FIELD: Final = "metadata.labels['batch.kubernetes.io/job-name']"  # set by the Job


def _mounts() -> list[dict[str, Any]]:
    return [
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "results", "mountPath": RESULTS_DIR},
    ]


def cron_job_name(kd: KimiDeployment, role: Role) -> str:
    """`<name>-calibrate-g` (spec.autoscaling's) or `-p` (spec.prefill.autoscaling's): 52
    characters at most, a CronJob's limit, for a deployment name of 40."""
    return f"{kd.metadata.name}-calibrate-{'g' if role == 'decode' else 'p'}"


def scheduled(kd: KimiDeployment) -> dict[Role, CalibrationRef]:
    """The roles whose stored calibration has a schedule, with it."""
    refs = {role: s.slo.calibration for role, s in kd.spec.slo_scaled.items() if s.slo}
    return {role: ref for role, ref in refs.items() if ref is not None and ref.schedule}


def leader_endpoint(kd: KimiDeployment, group: int) -> str:
    """The OpenAI API of decode group `group`'s leader (its vLLM, behind no routing sidecar),
    through the group's headless Service (LeaderWorkerSet's: `<group>-0.<group>`)."""
    serving = serving_roles(kd.spec)[0]
    name = group_name(kd, group, serving)
    return f"http://{name}-0.{name}.{kd.metadata.namespace}:{http_port(serving)}/v1"


def calibration_children(kd: KimiDeployment, first_group: int) -> list[dict[str, Any]]:
    """For each role with a schedule: ServiceAccount, Role, RoleBinding, CronJob (apply order).
    `first_group`: the lowest index of the decode groups the plan keeps (the one swept). The
    bench image of this operator's version runs them."""
    config = deployment_configuration(kd)
    out: list[dict[str, Any]] = []
    for role, ref in scheduled(kd).items():
        name = cron_job_name(kd, role)
        rules = [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [ref.config_map_name],
                "verbs": ["get", "patch"],
            },
            # RBAC cannot limit `create` to a name (the object has none before it is created):
            # this allows creating any ConfigMap in the namespace, which the CLI does only for
            # the one named when it is not there yet (docs/scaling.md).
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        ]
        out += access(metadata(kd, name, COMPONENT), metadata(kd, name, COMPONENT), rules)
        run = f"{RESULTS_DIR}/$({JOB_NAME_ENV})"  # the calibration's name: the Job's
        sweep = [
            "kimi-operator",
            "bench",
            "--endpoint",
            leader_endpoint(kd, first_group),
            "--profile",
            "calibration",
            "--gpus",
            str(config.gpus),
            "--output",
            run,
            "--no-progress",
        ]
        export = [
            "kimi-operator",
            "export-calibration",
            "--calibration",
            run,
            "--calibration-drafts",
            str(config.draft_tokens),
            "--config-map",
            f"{kd.metadata.namespace}/{ref.config_map_name}:{ref.key}",
        ]
        containers = [
            container(step, default_image(), command, _mounts())
            for step, command in (("sweep", sweep), ("export", export))
        ]
        for each in containers:
            each["env"].append(
                {"name": JOB_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": JOB_NAME_FIELD}}}
            )
        labels = {**LABELS, CALIBRATION_LABEL: kd.metadata.name}
        spec = pod(
            containers[1:],
            [{"name": "tmp", "emptyDir": {}}, {"name": "results", "emptyDir": {}}],
            name,
            init_containers=containers[:1],
        )
        out.append(
            {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": metadata(kd, name, COMPONENT),
                "spec": {
                    "schedule": ref.schedule,
                    "timeZone": TIME_ZONE,
                    "concurrencyPolicy": "Forbid",
                    "startingDeadlineSeconds": STARTING_DEADLINE_S,
                    "successfulJobsHistoryLimit": HISTORY,
                    "failedJobsHistoryLimit": HISTORY,
                    "jobTemplate": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "backoffLimit": 0,  # a sweep is not retried over live traffic
                            "activeDeadlineSeconds": ACTIVE_DEADLINE_S,
                            "template": {"metadata": {"labels": dict(labels)}, "spec": spec},
                        },
                    },
                },
            }
        )
    return out
