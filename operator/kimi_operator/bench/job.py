"""`bench --render-job`: the same benchmark as a Kubernetes Job inside the cluster.

Inside the cluster the client sits next to the Service, as users' applications do, and its
network path is the same for both deployments of an A/B pair. The Job runs the bench image (the
operator image built with the `bench` extra: the `kimi-operator` CLI and matplotlib for the plots;
the operator image itself has no matplotlib); pin another with `--image`.
"""

import copy
import re
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

from kimi_operator.api.constants import GROUP, PLURAL

# images/operator/Dockerfile built with EXTRAS=bench (scripts/build-images.sh). Tagged with this
# package's version.
BENCH_IMAGE_REPOSITORY: Final = "ghcr.io/kimi-operator/kimi-operator-bench"
RESULTS_DIR: Final = "/results"
TRACE_DIR: Final = "/trace"
TRACE_FILE: Final = "trace.jsonl"
NONROOT: Final = 65532
MAX_NAME: Final = 63
CONFIGMAP_LIMIT: Final = 1_000_000  # bytes a ConfigMap may hold (1 MiB less overhead)
LABELS: Final = {
    "app.kubernetes.io/name": "kimi-operator-bench",
    "app.kubernetes.io/part-of": "kimi-operator",
}


def default_image() -> str:
    try:
        tag = version("kimi-operator")
    except PackageNotFoundError:
        tag = "latest"
    return f"{BENCH_IMAGE_REPOSITORY}:{tag}"


def job_name(target: str, profile: str) -> str:
    """kimi-bench-<target>-<profile>, made a valid object name (DNS label)."""
    label = re.sub(r"[^a-z0-9-]+", "-", target.lower()).strip("-") or "endpoint"
    return f"kimi-bench-{label}-{profile}"[:MAX_NAME].rstrip("-")


def _metadata(name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(LABELS)}


def access(
    account: dict[str, Any], where: dict[str, Any], rules: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A ServiceAccount (`account`: its metadata) and a Role granting it `rules`, with their
    RoleBinding (`where`: their metadata, in the namespace the rules apply to). Each object
    has metadata of its own (a YAML dump would otherwise show anchors)."""
    name = where["name"]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": copy.deepcopy(account)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": copy.deepcopy(where),
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": copy.deepcopy(where),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": account["name"],
                    "namespace": account["namespace"],
                }
            ],
        },
    ]


def _access(name: str, namespace: str, deployment: tuple[str, str]) -> list[dict[str, Any]]:
    """A service account (in the Job's namespace) allowed to read the one KimiDeployment."""
    target_namespace, target = deployment
    read = {
        "apiGroups": [GROUP],
        "resources": [PLURAL],
        "resourceNames": [target],
        "verbs": ["get"],
    }
    return access(_metadata(name, namespace), _metadata(name, target_namespace), [read])


def container(
    name: str, image: str, command: list[str], mounts: list[dict[str, Any]]
) -> dict[str, Any]:
    """A container of the bench image running `command`, unprivileged, its root read-only."""
    return {
        "name": name,
        "image": image,
        "command": command,
        "env": [{"name": "MPLCONFIGDIR", "value": "/tmp"}],
        # No CPU limit: throttling the client would show up as inter-token latency.
        "resources": {
            "requests": {"cpu": "2", "memory": "1Gi"},
            "limits": {"memory": "4Gi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }


def pod(
    containers: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    service_account: str | None,
    init_containers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A bench pod's spec: run once as the image's non-root user, with an API token only where it
    has a service account of its own."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": service_account is not None,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NONROOT,
            "runAsGroup": NONROOT,
            "fsGroup": NONROOT,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        **({"initContainers": init_containers} if init_containers else {}),
        "containers": containers,
        "volumes": volumes,
    }
    if service_account is not None:
        spec["serviceAccountName"] = service_account
    return spec


def render_job(
    *,
    name: str,
    namespace: str,
    image: str,
    bench_args: list[str],
    deployment: tuple[str, str] | None,
    trace_text: str | None,
    results_claim: str | None,
) -> list[dict[str, Any]]:
    """The manifests, in apply order: [ServiceAccount, Role, RoleBinding,] [ConfigMap,] Job.

    `bench_args` are the run's options; the Job adds where the trace and results live.
    `deployment` is the KimiDeployment's (namespace, name) when the Job resolves it.
    """
    manifests: list[dict[str, Any]] = []
    if deployment is not None:
        manifests += _access(name, namespace, deployment)
    args = [*bench_args, "--output", f"{RESULTS_DIR}/{name}", "--force"]
    volumes: list[dict[str, Any]] = [
        {"name": "tmp", "emptyDir": {}},
        {
            "name": "results",
            **(
                {"persistentVolumeClaim": {"claimName": results_claim}}
                if results_claim
                else {"emptyDir": {}}
            ),
        },
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "results", "mountPath": RESULTS_DIR},
    ]
    if trace_text is not None:
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _metadata(name, namespace),
                "data": {TRACE_FILE: trace_text},
            }
        )
        volumes.append({"name": "trace", "configMap": {"name": name}})
        mounts.append({"name": "trace", "mountPath": TRACE_DIR, "readOnly": True})
        args += ["--trace", f"{TRACE_DIR}/{TRACE_FILE}"]
    spec = pod(
        [container("bench", image, ["kimi-operator", "bench", *args], mounts)],
        volumes,
        name if deployment is not None else None,
    )
    manifests.append(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": _metadata(name, namespace),
            "spec": {
                "backoffLimit": 0,  # a benchmark that failed half-way is not retried over itself
                "ttlSecondsAfterFinished": 7 * 24 * 3600,
                "template": {"metadata": {"labels": dict(LABELS)}, "spec": spec},
            },
        }
    )
    return manifests
