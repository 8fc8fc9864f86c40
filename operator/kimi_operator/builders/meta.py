"""Names and labels shared by every child of a KimiDeployment."""

from collections.abc import Mapping
from typing import Any

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders.disaggregation import role_selector

APP_NAME = "kimi-k3"
MANAGER = "kimi-operator"
# Set by LeaderWorkerSet on its pods; "0" is the leader (node rank 0, serves HTTP).
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
# On every serving pod: "true" from its template, set to "false" on the pods of a group leaving
# (drain.py) so that the Service and the InferencePool stop sending it requests while it drains.
ROUTABLE_LABEL = "kimi-operator.io/routable"
ROUTABLE = {ROUTABLE_LABEL: "true"}


# The letter before a group's index in its name: the groups of spec.replicas (decode groups with
# spec.prefill) are `g`, the prefill groups `p`.
GROUP_LETTERS = {"aggregated": "g", "decode": "g", "prefill": "p"}


def group_name(kd: KimiDeployment, group: int, serving: str = "aggregated") -> str:
    """LeaderWorkerSet and ComputeDomain of TP group `group`: `<name>-g<group>` (`-p<group>` for
    a prefill group)."""
    return f"{kd.metadata.name}-{GROUP_LETTERS[serving]}{group}"


def selector_labels(kd: KimiDeployment) -> dict[str, str]:
    return {"app.kubernetes.io/name": APP_NAME, "app.kubernetes.io/instance": kd.metadata.name}


def selector_string(labels: Mapping[str, str]) -> str:
    """Equality labels as a label selector string (`k=v,k2=v2`)."""
    return ",".join(f"{key}={value}" for key, value in labels.items())


def leader_selector(kd: KimiDeployment) -> str:
    """The leader pods (one per TP group; with spec.prefill, per decode group): the scale
    subresource's selector."""
    return selector_string(selector_labels(kd) | {LWS_WORKER_INDEX_LABEL: "0"} | role_selector(kd))


def labels(kd: KimiDeployment, component: str) -> dict[str, str]:
    return selector_labels(kd) | {
        "app.kubernetes.io/managed-by": MANAGER,
        "app.kubernetes.io/component": component,
    }


def metadata(
    kd: KimiDeployment, name: str, component: str, **extra: dict[str, str]
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": kd.metadata.namespace,
        "labels": labels(kd, component),
        **extra,
    }
