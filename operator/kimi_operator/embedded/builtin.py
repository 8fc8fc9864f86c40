"""The resources the embedded API server serves before any CRD is installed: the built-in kinds
that the operator, the chart, kubectl, helm and the stand-in controllers read and write."""

import kmock

from kimi_operator.embedded import rbac, webhooks

CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"
EVICTION = "eviction"  # pods/eviction: a policy/v1 Eviction posted (embedded.eviction)
RBAC_KINDS = ("clusterroles", "clusterrolebindings", "roles", "rolebindings")

BUILT_IN = {
    "v1/namespaces": kmock.ResourceInfo(kind="Namespace", namespaced=False),
    "v1/events": kmock.ResourceInfo(kind="Event", namespaced=True),
    "v1/services": kmock.ResourceInfo(kind="Service", namespaced=True),
    "v1/configmaps": kmock.ResourceInfo(kind="ConfigMap", namespaced=True),
    "apps/v1/deployments": kmock.ResourceInfo(
        kind="Deployment", namespaced=True, subresources={"status"}
    ),
    "autoscaling/v2/horizontalpodautoscalers": kmock.ResourceInfo(
        kind="HorizontalPodAutoscaler", namespaced=True
    ),
    "events.k8s.io/v1/events": kmock.ResourceInfo(kind="Event", namespaced=True),
    "policy/v1/poddisruptionbudgets": kmock.ResourceInfo(
        kind="PodDisruptionBudget", namespaced=True
    ),
    "v1/serviceaccounts": kmock.ResourceInfo(kind="ServiceAccount", namespaced=True),
    "v1/secrets": kmock.ResourceInfo(kind="Secret", namespaced=True),
    "v1/pods": kmock.ResourceInfo(kind="Pod", namespaced=True, subresources={"status", EVICTION}),
    "v1/nodes": kmock.ResourceInfo(kind="Node", namespaced=False, subresources={"status"}),
    "v1/persistentvolumeclaims": kmock.ResourceInfo(
        kind="PersistentVolumeClaim", namespaced=True, subresources={"status"}
    ),
    "batch/v1/jobs": kmock.ResourceInfo(kind="Job", namespaced=True, subresources={"status"}),
    "batch/v1/cronjobs": kmock.ResourceInfo(
        kind="CronJob", namespaced=True, subresources={"status"}
    ),
    "coordination.k8s.io/v1/leases": kmock.ResourceInfo(kind="Lease", namespaced=True),
    f"admissionregistration.k8s.io/v1/{webhooks.CONFIGURATIONS}": kmock.ResourceInfo(
        kind="ValidatingWebhookConfiguration", namespaced=False
    ),
    CRDS: kmock.ResourceInfo(kind="CustomResourceDefinition", namespaced=False),
    **{
        f"{rbac.RBAC_GROUP}/v1/{plural}": kmock.ResourceInfo(
            kind=kind, namespaced=plural.startswith("role")
        )
        for plural, kind in zip(
            RBAC_KINDS, ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"), strict=True
        )
    },
}
