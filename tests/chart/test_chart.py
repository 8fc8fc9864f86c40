"""The chart as `helm` sees it: lint, render with several value sets, every object valid for the API
server that receives it, the CRD equal to crds/, the operator pod hardened, bad values refused."""

import json
import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kimi_operator.builders.autoscaling import DEFAULT_PROMETHEUS_URL, adapter_rules
from kimi_operator.cli import build_parser
from kimi_operator.embedded.admission import CustomResource
from kimi_operator.embedded.upstream import upstream_crd
from kimi_operator.run_args import node_policy, operator_defaults, parse_run_arguments
from tests.support.repo import ROOT

from .helm import CHART, helm, of_kind, template, write_values

KUBERNETES_VERSION = "1.34"
CRD_SOURCE = ROOT / "crds" / "kimi-operator.io_kimideployments.yaml"
CRD_COPY = CHART / "files" / "kimi-operator.io_kimideployments.yaml"
DIGEST = "sha256:" + "ab" * 32
SA_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
OPERATOR_TRACES = "http://otel-collector.observability:4318/v1/traces"
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "namespaced": {"watchNamespaces": ["inference", "research"]},
    "observability": {
        "dashboards": {"enabled": True, "namespace": "monitoring"},
        "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    },
    "digests": {
        "image": {"repository": "registry.example.com/kimi/operator", "digest": DIGEST},
        "servingImage": {"repository": "registry.example.com/kimi/vllm", "digest": DIGEST},
    },
    "replicas": {"replicaCount": 3, "crds": {"keep": False}},
    "standalone": {"leaderElection": {"enabled": False}},
    "autoscaling": {
        "autoscaling": {
            "prometheusUrl": "http://prometheus.example:9090",
            "prometheusAdapter": {"enabled": True},
        }
    },
    "tracing": {
        "tracing": {
            "endpoint": "http://otel-collector.observability:4317",
            "samplingRatio": 0.25,
            "detailedTraces": True,
            # A Grafana Explore link: YAML's and helm's special characters in one argument.
            "uiUrl": 'https://grafana.example/explore?left={"queries":[{"query":"{trace_id}"}]}#x',
        },
        "operator": {"tracesEndpoint": OPERATOR_TRACES},
    },
    # OpenShift's Thanos querier: the ServiceAccount's token and the service CA, KEDA's
    # credentials from a ClusterTriggerAuthentication; and a Secret mounted for whatever else.
    "secured-prometheus": {
        "autoscaling": {
            "prometheusUrl": "https://thanos-querier.openshift-monitoring.svc:9091",
            "prometheusAuth": {
                "bearerTokenFile": SA_TOKEN,
                "caFile": "/etc/prometheus-ca/ca.crt",
                "kedaAuthentication": "ClusterTriggerAuthentication/thanos",
            },
        },
        "operator": {
            "extraVolumes": [{"name": "prometheus-ca", "secret": {"secretName": "thanos-ca"}}],
            "extraVolumeMounts": [
                {"name": "prometheus-ca", "mountPath": "/etc/prometheus-ca", "readOnly": True}
            ],
        },
    },
}


def _custom_resources() -> dict[str, CustomResource]:
    """Kind -> its v1 as the API server admits it, for the custom kinds the chart renders: the
    upstream Prometheus Operator CRDs."""
    crds = [upstream_crd("ServiceMonitor"), upstream_crd("PrometheusRule")]
    return {
        crd["spec"]["names"]["kind"]: CustomResource.of(crd, f"{crd['spec']['group']}/v1")
        for crd in crds
    }


CUSTOM = _custom_resources()


def validate(obj: dict[str, Any]) -> None:
    """Raise unless `obj` is what the API server accepts for its kind."""
    if obj["kind"] in CUSTOM:
        errors = CUSTOM[obj["kind"]].refusals(obj)
        assert not errors, f"{obj['kind']} {obj['metadata']['name']}: {errors}"
    else:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    return {
        name: template(values, tmp_path_factory.mktemp(name)) for name, values in VALUE_SETS.items()
    }


def test_lint() -> None:
    result = helm("lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("name", VALUE_SETS)
def test_lint_with_values(name: str, tmp_path: Path) -> None:
    helm("lint", "--strict", str(CHART), "--values", str(write_values(tmp_path, VALUE_SETS[name])))


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_object_is_valid(name: str, rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered[name]
    assert objects
    for obj in objects:
        validate(obj)
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "kimi-operator"
        assert labels["app.kubernetes.io/instance"] == "kimi"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_validation_catches_a_bad_object(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The validation above can fail: a wrong field in a built-in kind and in a ServiceMonitor."""
    (deployment,) = of_kind(rendered["defaults"], "Deployment")
    deployment["spec"]["replica"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)
    (monitor,) = of_kind(rendered["observability"], "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(AssertionError, match="intervall"):
        validate(monitor)


def test_default_install(rendered: dict[str, list[dict[str, Any]]]) -> None:
    kinds = sorted(o["kind"] for o in rendered["defaults"])
    assert kinds == [
        "ClusterRole",
        "ClusterRole",  # reading Nodes (evacuation)
        "ClusterRoleBinding",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "Deployment",
        "Deployment",  # the admission webhook's
        "PodDisruptionBudget",  # the admission webhook's
        "Role",  # the leader-election Lease's
        "RoleBinding",
        "Secret",  # the admission webhook's CA and certificate
        "Service",
        "Service",  # the admission webhook's
        "ServiceAccount",
        "ValidatingWebhookConfiguration",
    ]


# --- the CRD ---------------------------------------------------------------------------------


def test_chart_copy_of_the_crd_is_crds() -> None:
    assert CRD_COPY.read_text() == CRD_SOURCE.read_text(), "run `make crd`"


def test_rendered_crd_is_crds(rendered: dict[str, list[dict[str, Any]]]) -> None:
    (crd,) = of_kind(rendered["defaults"], "CustomResourceDefinition")
    assert crd["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
    assert crd["metadata"].pop("labels")["app.kubernetes.io/part-of"] == "kimi-operator"
    assert crd == yaml.safe_load(CRD_SOURCE.read_text())


def test_crds_not_kept_when_asked(rendered: dict[str, list[dict[str, Any]]]) -> None:
    (crd,) = of_kind(rendered["replicas"], "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "kimideployments.kimi-operator.io"
    assert "annotations" not in crd["metadata"]


def test_no_crds_when_disabled(tmp_path: Path) -> None:
    objects = template({"crds": {"enabled": False}}, tmp_path)
    assert not of_kind(objects, "CustomResourceDefinition")


# --- the operator's pod ------------------------------------------------------------------------


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = of_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_operator_pod_is_hardened(rendered: dict[str, list[dict[str, Any]]]) -> None:
    (deployment,) = of_kind(rendered["defaults"], "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 1
    assert "strategy" not in deployment["spec"]  # rolling: the new pod stands by for the Lease
    (standalone,) = of_kind(rendered["standalone"], "Deployment")
    assert standalone["spec"]["strategy"] == {"type": "Recreate"}  # never two at once
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = _container(rendered["defaults"])
    security = container["securityContext"]
    assert security["runAsUser"] == 65532
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]
    health = next(p for p in container["ports"] if p["name"] == "health")
    assert health["containerPort"] == 8081
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}


def _parsed(objects: list[dict[str, Any]]) -> Any:
    """The container's arguments as `kimi-operator run` (the image's entrypoint) reads them."""
    return build_parser().parse_args(["run", *_container(objects)["args"]])


def test_operator_arguments(rendered: dict[str, list[dict[str, Any]]]) -> None:
    args = _parsed(rendered["defaults"])
    assert args.serving_image == "ghcr.io/kimi-operator/vllm-kimi:0.33.0"
    assert args.namespace is None
    assert args.health_address == "0.0.0.0:8081"
    assert args.metrics_address == "0.0.0.0:8080"
    assert (args.resync_interval, args.workers) == (60, 16)
    container = _container(rendered["defaults"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8081, "metrics": 8080}
    assert _parsed(rendered["namespaced"]).namespace == ["inference", "research"]


def test_leader_election_arguments(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """On by default (a rolling update of the operator never runs two at once): the release's
    Lease in the release's namespace, which the chart's Role lets it read and renew."""
    args = _parsed(rendered["replicas"])
    assert args.leader_elect
    assert (args.leader_elect_resource_name, args.leader_elect_resource_namespace) == (
        "kimi-kimi-operator",
        "kimi-system",
    )
    durations = (
        args.leader_elect_lease_duration,
        args.leader_elect_renew_deadline,
        args.leader_elect_retry_period,
    )
    assert durations == (15, 10, 2)
    (role,) = [
        r for r in of_kind(rendered["replicas"], "Role") if "leader" in r["metadata"]["name"]
    ]
    assert role["metadata"]["namespace"] == "kimi-system"
    names = [rule.get("resourceNames") for rule in role["rules"]]
    assert names == [None, ["kimi-kimi-operator"]]  # only `create` is not limited to the Lease
    standalone = rendered["standalone"]
    assert not _parsed(standalone).leader_elect
    assert not [r for r in of_kind(standalone, "Role") if "leader" in r["metadata"]["name"]]


def test_images_by_digest(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert _container(rendered["defaults"])["image"] == "ghcr.io/kimi-operator/kimi-operator:0.1.0"
    container = _container(rendered["digests"])
    assert container["image"] == f"registry.example.com/kimi/operator@{DIGEST}"
    serving = _parsed(rendered["digests"]).serving_image
    assert serving == f"registry.example.com/kimi/vllm@{DIGEST}"


def test_metrics_service_and_monitor(rendered: dict[str, list[dict[str, Any]]]) -> None:
    (service,) = of_kind(rendered["observability"], "Service")
    (deployment,) = of_kind(rendered["observability"], "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]
    (monitor,) = of_kind(rendered["observability"], "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"] == selector
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_service_monitor_needs_the_service(tmp_path: Path) -> None:
    values = {"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}}
    result = helm(
        "template", "kimi", str(CHART), "--values", str(write_values(tmp_path, values)), check=False
    )
    assert result.returncode != 0
    assert "metrics.serviceMonitor.enabled needs metrics.service.enabled" in result.stderr


# --- dashboards and alerts -------------------------------------------------------------------


def test_one_configmap_per_dashboard(rendered: dict[str, list[dict[str, Any]]]) -> None:
    dashboards = sorted((CHART / "dashboards").glob("*.json"))
    maps = of_kind(rendered["observability"], "ConfigMap")
    assert len(maps) == len(dashboards)
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["namespace"] == "monitoring"
    contents = {name: text for m in maps for name, text in m["data"].items()}
    assert contents == {d.name: d.read_text().rstrip("\n") for d in dashboards}


def test_dashboards_from_whatever_json_is_there(tmp_path: Path) -> None:
    """The ConfigMaps follow the files (not a fixed list); the label is configurable."""
    chart = tmp_path / "kimi-operator"
    shutil.copytree(CHART, chart)
    shutil.rmtree(chart / "dashboards", ignore_errors=True)
    (chart / "dashboards").mkdir()
    (chart / "dashboards" / "extra.json").write_text(json.dumps({"title": "Extra"}))
    values = {"dashboards": {"enabled": True, "label": "team-dashboards", "labelValue": "yes"}}
    (config_map,) = of_kind(template(values, tmp_path, chart=chart), "ConfigMap")
    assert config_map["metadata"]["labels"]["team-dashboards"] == "yes"
    assert config_map["metadata"]["namespace"] == "kimi-system"
    assert json.loads(config_map["data"]["extra.json"]) == {"title": "Extra"}


def test_prometheus_rule_is_a_toggle(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert not of_kind(rendered["defaults"], "PrometheusRule")
    (rule,) = of_kind(rendered["observability"], "PrometheusRule")
    assert rule["spec"]["groups"]


def test_prometheus_adapter_rules_are_a_toggle(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    assert not [c for c in of_kind(rendered["defaults"], "ConfigMap") if "config.yaml" in c["data"]]
    (config,) = [
        c
        for c in of_kind(rendered["autoscaling"], "ConfigMap")
        if c["metadata"]["name"].endswith("-prometheus-adapter")
    ]
    assert yaml.safe_load(config["data"]["config.yaml"]) == adapter_rules()
    assert _parsed(rendered["autoscaling"]).prometheus_url == "http://prometheus.example:9090"
    assert _parsed(rendered["defaults"]).prometheus_url == DEFAULT_PROMETHEUS_URL


def test_prometheus_credentials_reach_the_operator(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    args = _parsed(rendered["secured-prometheus"])
    assert (args.prometheus_bearer_token_file, args.prometheus_ca_file) == (
        SA_TOKEN,
        "/etc/prometheus-ca/ca.crt",
    )
    assert args.keda_authentication == "ClusterTriggerAuthentication/thanos"
    # What `run`, the demo and the sandbox configure the operator with, from those arguments.
    configured = operator_defaults(args)
    assert (configured.prometheus_token_file, configured.prometheus_ca_file) == (
        SA_TOKEN,
        "/etc/prometheus-ca/ca.crt",
    )
    assert configured.keda_authentication == "ClusterTriggerAuthentication/thanos"
    endpoint_picker = VALUES["endpointPicker"]
    assert (configured.epp_image, configured.routing_sidecar_image) == (
        endpoint_picker["image"],
        endpoint_picker["routingSidecarImage"],
    )
    (deployment,) = of_kind(rendered["secured-prometheus"], "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert {"name": "prometheus-ca", "secret": {"secretName": "thanos-ca"}} in pod["volumes"]
    mounts = _container(rendered["secured-prometheus"])["volumeMounts"]
    assert {"name": "prometheus-ca", "mountPath": "/etc/prometheus-ca", "readOnly": True} in mounts
    defaults = _parsed(rendered["defaults"])
    assert (defaults.prometheus_bearer_token_file, defaults.keda_authentication) == ("", "")


def test_the_tracing_default_reaches_the_operator(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """What a deployment without spec.observability.tracing inherits (docs/observability.md)."""
    configured = operator_defaults(_parsed(rendered["tracing"])).tracing
    assert configured is not None
    assert (
        configured.model_dump(by_alias=True)
        == {"protocol": "grpc"} | VALUE_SETS["tracing"]["tracing"]
    )
    assert operator_defaults(_parsed(rendered["defaults"])).tracing is None
    assert not [a for a in _container(rendered["defaults"])["args"] if "trac" in a]


def test_the_operators_own_spans_are_off_unless_asked(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """operator.tracesEndpoint: the operator's reconciles as spans (docs/observability.md)."""
    assert _parsed(rendered["tracing"]).operator_traces_endpoint == OPERATOR_TRACES
    assert _parsed(rendered["defaults"]).operator_traces_endpoint == ""


# --- values: schema and documentation --------------------------------------------------------

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())


def _keys(schema: dict[str, Any], value: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, its schema, its default in values.yaml) for every key of values.yaml."""
    out = []
    for key, sub in value.items():
        dotted = f"{path}{key}"
        assert key in schema["properties"], f"{dotted} is in values.yaml but not in the schema"
        prop = schema["properties"][key]
        out.append((dotted, prop, sub))
        if prop.get("additionalProperties") is False:
            out += _keys(prop, sub, f"{dotted}.")
    return out


def test_schema_describes_every_key_with_its_default() -> None:
    assert SCHEMA["additionalProperties"] is False
    for dotted, prop, default in _keys(SCHEMA, VALUES):
        assert prop.get("description"), f"{dotted}: no description"
        assert "default" in prop, f"{dotted}: no default"
        assert prop["default"] == default, f"{dotted}: default differs"
        if prop.get("type") == "object" and "properties" in prop:
            assert prop["additionalProperties"] is False, f"{dotted}: additionalProperties"
            assert set(prop["properties"]) == set(default), f"{dotted}: keys differ"


def test_readme_has_every_key() -> None:
    readme = (CHART / "README.md").read_text()
    for dotted, prop, default in _keys(SCHEMA, VALUES):
        if prop.get("additionalProperties") is False:
            continue  # its keys have rows of their own
        row = f"| `{dotted}` | `{json.dumps(default)}` | {prop['description']} |"
        assert row in readme, f"README.md lacks the row of {dotted}: {row}"


BAD_VALUES = [
    (
        {"replicaCount": 2, "leaderElection": {"enabled": False}},
        "at '/leaderElection/enabled': value must be true",
    ),
    ({"leaderElection": {"retryPeriodSeconds": 0}}, "at '/leaderElection/retryPeriodSeconds'"),
    ({"replicas": 1}, "additional properties 'replicas' not allowed"),
    ({"image": {"digest": "sha256:nothex"}}, "at '/image/digest'"),
    ({"crds": {"keep": "yes"}}, "at '/crds/keep': got string, want boolean"),
    ({"watchNamespaces": ["Not_A_Namespace"]}, "at '/watchNamespaces/0'"),
    ({"servingImage": {"tag": "", "digest": ""}}, "at '/servingImage'"),
    ({"metrics": {"serviceMonitor": {"interval": "30 seconds"}}}, "interval"),
    ({"operator": {"metricsPort": 70000}}, "at '/operator/metricsPort': maximum"),
    (
        {"autoscaling": {"prometheusAuth": {"kedaAuthentication": "Secret/thanos"}}},
        "at '/autoscaling/prometheusAuth/kedaAuthentication'",
    ),
    (
        {"autoscaling": {"prometheusAuth": {"bearerTokenFile": "token"}}},
        "at '/autoscaling/prometheusAuth/bearerTokenFile'",
    ),
    ({"evacuation": {"taints": [""]}}, "at '/evacuation/taints/0'"),  # a taint without a key
    ({"evacuation": {"taints": ["=true:NoSchedule"]}}, "at '/evacuation/taints/0'"),
    ({"evacuation": {"conditions": ["GPU Xid"]}}, "at '/evacuation/conditions/0'"),
    ({"evacuation": {"conditions": ["Ready"]}}, "at '/evacuation/conditions/0'"),
    ({"evacuation": {"criticalConditions": ["nvidia.com/"]}}, "/evacuation/criticalConditions/0"),
    ({"tracing": {"samplingRatio": 1.5}}, "at '/tracing/samplingRatio': maximum"),
    ({"tracing": {"endpoint": "https://otel:4317"}}, "at '/tracing/endpoint'"),
    ({"tracing": {"uiUrl": "https://jaeger.example/trace/"}}, "at '/tracing/uiUrl'"),
    ({"operator": {"tracesEndpoint": "otel:4318"}}, "at '/operator/tracesEndpoint'"),
]


@pytest.mark.parametrize(("values", "message"), BAD_VALUES)
def test_bad_values_are_refused(values: dict[str, Any], message: str, tmp_path: Path) -> None:
    result = helm(
        "template", "kimi", str(CHART), "--values", str(write_values(tmp_path, values)), check=False
    )
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr


@pytest.mark.parametrize(
    "durations",
    [{"renewDeadlineSeconds": 15}, {"retryPeriodSeconds": 10}, {"leaseDurationSeconds": 5}],
)
def test_leader_election_durations_out_of_order_are_refused(
    durations: dict[str, int], tmp_path: Path
) -> None:
    """The order the operator would refuse at start (a crash loop), refused at install."""
    values = write_values(tmp_path, {"leaderElection": durations})
    result = helm("template", "kimi", str(CHART), "--values", str(values), check=False)
    assert result.returncode != 0
    wanted = (
        "leaderElection: needs retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds"
    )
    assert wanted in result.stderr


def test_evacuation_values_become_the_operators_flags(tmp_path: Path) -> None:
    """What the chart renders is what `kimi-operator run` reads (the sandbox runs it so), and
    evacuation off reads no Node: no flag for it, no ClusterRole on nodes."""
    values = {"evacuation": {"taints": ["example.com/maintenance"], "cordoned": False}}
    policy = node_policy(parse_run_arguments(_operator_args(template(values, tmp_path))))
    assert (policy.enabled, policy.cordoned, policy.taints) == (
        True,
        False,
        ("example.com/maintenance",),
    )
    assert policy.critical == ("GpuPcieWatch", "GpuNvlinkWatch")
    (tmp_path / "off").mkdir()
    off = template({"evacuation": {"enabled": False}}, tmp_path / "off")
    assert not node_policy(parse_run_arguments(_operator_args(off))).enabled
    rules = [r for o in of_kind(off, "ClusterRole") for r in o["rules"]]
    assert not [r for r in rules if "nodes" in r["resources"]]


def _operator_args(rendered: list[dict[str, Any]]) -> list[str]:
    containers = [
        c
        for d in of_kind(rendered, "Deployment")
        for c in d["spec"]["template"]["spec"]["containers"]
        if c["name"] == "operator"
    ]
    args: list[str] = containers[0]["args"]
    return args


def test_a_critical_condition_not_evacuated_on_is_refused(tmp_path: Path) -> None:
    values = {"evacuation": {"conditions": ["GpuXidWatch"], "criticalConditions": ["GpuPcieWatch"]}}
    result = helm(
        "template", "kimi", str(CHART), "--values", str(write_values(tmp_path, values)), check=False
    )
    assert result.returncode != 0
    assert "evacuation.criticalConditions: GpuPcieWatch is not in evacuation.conditions" in (
        result.stderr
    )


def test_notes_say_what_was_installed_and_what_to_apply() -> None:
    result = helm("install", "kimi", str(CHART), "--dry-run=client", "--namespace", "kimi-system")
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "the KimiDeployment CRD (kimideployments.kimi-operator.io), kept on uninstall" in notes
    assert "RBAC: a ClusterRole" in notes
    assert "kubectl apply -n inference -f crds/samples/k3-tp16-latency.yaml" in notes
    assert (ROOT / "crds" / "samples" / "k3-tp16-latency.yaml").exists()


@pytest.mark.parametrize(("version", "accepted"), [("1.31.9", False), ("1.32.0", True)])
def test_the_chart_needs_a_kubernetes_with_dra(version: str, accepted: bool) -> None:
    """ComputeDomains hand out IMEX channels through Dynamic Resource Allocation: the NVIDIA DRA
    driver needs Kubernetes 1.32 or later (docs/install.md)."""
    result = helm("template", "kimi", str(CHART), "--kube-version", version, check=False)
    assert (result.returncode == 0) is accepted, result.stderr
    if not accepted:
        assert "requires kubeVersion: >=1.32.0-0" in result.stderr
