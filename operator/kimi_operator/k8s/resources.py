"""The API resources the operator reads and writes, and how to install the ones a cluster lacks."""

from dataclasses import dataclass

from kimi_operator.api import constants as c


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core API
    version: str
    plural: str
    kind: str
    # For resources from a CRD another project ships: what to tell a user whose cluster lacks it.
    install: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version_path(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    def collection(self, namespace: str) -> str:
        """The path of a namespace's objects; "" for a cluster-scoped resource (Nodes)."""
        scope = f"/namespaces/{namespace}" if namespace else ""
        return f"{self.group_version_path}{scope}/{self.plural}"

    def item(self, namespace: str, name: str) -> str:
        return f"{self.collection(namespace)}/{name}"


KIMI_DEPLOYMENT = Resource(c.GROUP, c.VERSION, c.PLURAL, c.KIND)
LEADER_WORKER_SET = Resource(
    "leaderworkerset.x-k8s.io",
    "v1",
    "leaderworkersets",
    "LeaderWorkerSet",
    install="install LeaderWorkerSet: kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/lws/releases/latest/download/manifests.yaml",
)
COMPUTE_DOMAIN = Resource(
    "resource.nvidia.com",
    "v1beta1",
    "computedomains",
    "ComputeDomain",
    install="install the NVIDIA DRA driver for GPUs: helm install nvidia-dra-driver-gpu "
    "nvidia/nvidia-dra-driver-gpu --namespace nvidia-dra-driver-gpu --create-namespace",
)
POD_MONITOR = Resource(
    "monitoring.coreos.com",
    "v1",
    "podmonitors",
    "PodMonitor",
    install="install the Prometheus Operator (e.g. the kube-prometheus-stack Helm chart), "
    "or set spec.monitoring.podMonitor: false",
)
SCALED_OBJECT = Resource(
    "keda.sh",
    "v1alpha1",
    "scaledobjects",
    "ScaledObject",
    install="install KEDA (helm install keda kedacore/keda --namespace keda --create-namespace)",
)
# spec.routing.mode InferencePool (docs/routing.md): the pool, and the route from a Gateway to it.
INFERENCE_POOL = Resource(
    "inference.networking.k8s.io",
    "v1",
    "inferencepools",
    "InferencePool",
    install="install the Gateway API Inference Extension's CRDs: kubectl apply -f https://github.com/"
    "kubernetes-sigs/gateway-api-inference-extension/releases/download/v1.5.0/manifests.yaml",
)
HTTP_ROUTE = Resource(
    "gateway.networking.k8s.io",
    "v1",
    "httproutes",
    "HTTPRoute",
    install="install the Gateway API (standard channel): kubectl apply --server-side -f https://"
    "github.com/kubernetes-sigs/gateway-api/releases/download/v1.5.1/standard-install.yaml",
)
GATEWAY = Resource("gateway.networking.k8s.io", "v1", "gateways", "Gateway")
# prometheus-adapter serves each external metric as a resource of external.metrics.k8s.io:
# discovering the one the HPA reads tells whether its rules are installed.
EXTERNAL_METRICS = "external.metrics.k8s.io"
HORIZONTAL_POD_AUTOSCALER = Resource(
    "autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler"
)
POD = Resource("", "v1", "pods", "Pod")
NODE = Resource("", "v1", "nodes", "Node")
SERVICE = Resource("", "v1", "services", "Service")
EVENT = Resource("", "v1", "events", "Event")
POD_DISRUPTION_BUDGET = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
JOB = Resource("batch", "v1", "jobs", "Job")
# A stored calibration's schedule (builders/calibration.py).
CRON_JOB = Resource("batch", "v1", "cronjobs", "CronJob")
# The endpoint picker's own objects.
DEPLOYMENT = Resource("apps", "v1", "deployments", "Deployment")
CONFIG_MAP = Resource("", "v1", "configmaps", "ConfigMap")
SERVICE_ACCOUNT = Resource("", "v1", "serviceaccounts", "ServiceAccount")
ROLE = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDING = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
PERSISTENT_VOLUME_CLAIM = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
# Leader election among the operator's replicas (controller/leader.py).
LEASE = Resource("coordination.k8s.io", "v1", "leases", "Lease")

# The children of spec.routing.mode InferencePool only (builders/routing.py).
ROUTING_RESOURCES = (
    INFERENCE_POOL,
    HTTP_ROUTE,
    SERVICE_ACCOUNT,
    ROLE,
    ROLE_BINDING,
    CONFIG_MAP,
    DEPLOYMENT,
)
# What a scheduled calibration runs as, beside its CronJob (builders/calibration.py).
CALIBRATION_RESOURCES = (SERVICE_ACCOUNT, ROLE, ROLE_BINDING)
CHILD_RESOURCES = (
    COMPUTE_DOMAIN,
    LEADER_WORKER_SET,
    SERVICE,
    POD_DISRUPTION_BUDGET,
    POD_MONITOR,
    SCALED_OBJECT,
    HORIZONTAL_POD_AUTOSCALER,
    *ROUTING_RESOURCES,
    CRON_JOB,
)
# The weights cache (builders/weights.py): a deployment's resolve Jobs, and the claims and
# download Jobs it shares with other deployments.
CACHE_RESOURCES = (PERSISTENT_VOLUME_CLAIM, JOB)
BY_KIND = {r.kind: r for r in (KIMI_DEPLOYMENT, *CHILD_RESOURCES, *CACHE_RESOURCES)}
# Served by every cluster: never looked up.
BUILT_IN = frozenset(
    {
        SERVICE,
        POD_DISRUPTION_BUDGET,
        HORIZONTAL_POD_AUTOSCALER,
        JOB,
        CRON_JOB,
        PERSISTENT_VOLUME_CLAIM,
        POD,
        DEPLOYMENT,
        CONFIG_MAP,
        SERVICE_ACCOUNT,
        ROLE,
        ROLE_BINDING,
    }
)
