"""spec.observability.tracing in every component: vLLM's flags as vLLM 0.33.0's own parser reads
them, the OpenTelemetry variables each SDK reads (llm-d-router v0.10.0's, captured in third_party/),
service names and resource attributes per role, and the operator's default inherited or
overridden."""

import dataclasses
from collections.abc import Iterator
from typing import Any

import yaml

from kimi_operator.api.owned_env import TRACING_ENV
from kimi_operator.api.spec import KimiDeployment, TracingSpec
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.embedded.upstream import EPP_RELEASE, upstream_file
from tests.kimi_operator.builders.cases import CASES, TRACING, deployment
from tests.support.pods import expand
from tests.support.vllm_cli import parse

LLM_D: dict[str, Any] = yaml.safe_load(upstream_file(EPP_RELEASE).read_text())["tracing"]
REFS = {"LWS_LEADER_ADDRESS": "10.0.0.1", "LWS_WORKER_INDEX": "1"}  # as Kubernetes fills them in
NODE = "gb300-tray-07"


def _render(case: str, defaults: OperatorDefaults | None = None) -> list[dict[str, Any]]:
    doc, case_defaults = CASES[case]
    return build_children(deployment(doc), defaults or case_defaults)


@dataclasses.dataclass(frozen=True)
class Running:
    """A container of a rendered pod template, where the kubelet runs it."""

    where: str  # Kind/name/container
    owner: str  # the LeaderWorkerSet's or Deployment's name
    container: dict[str, Any]
    labels: dict[str, str]  # the pod template's

    def env(self) -> dict[str, str]:
        """The variables as the kubelet sets them: the downward API's from the pod, each `$(VAR)`
        of an earlier variable expanded."""
        fields = {
            "metadata.name": f"{self.owner}-0",
            "metadata.namespace": "inference",
            "spec.nodeName": NODE,
            "status.podIP": "10.0.0.2",
            **{f"metadata.labels['{k}']": v for k, v in self.labels.items()},
        }
        out: dict[str, str] = {}
        for entry in self.container.get("env", []):
            if "valueFrom" in entry:
                out[entry["name"]] = fields[entry["valueFrom"]["fieldRef"]["fieldPath"]]
            else:
                out[entry["name"]] = expand(entry["value"], out)
        return out


def _running(children: list[dict[str, Any]]) -> Iterator[Running]:
    """Every container of every pod template the children hold."""
    for child in children:
        spec = child.get("spec", {})
        if child["kind"] == "LeaderWorkerSet":
            templates = [
                spec["leaderWorkerTemplate"][t] for t in ("leaderTemplate", "workerTemplate")
            ]
        elif child["kind"] == "Deployment":
            templates = [spec["template"]]
        else:
            continue
        name = child["metadata"]["name"]
        for template in templates:
            pod = template["spec"]
            for container in pod.get("initContainers", []) + pod["containers"]:
                where = f"{child['kind']}/{name}/{container['name']}"
                yield Running(where, name, container, template["metadata"]["labels"])


def _resource(env: dict[str, str]) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in env["OTEL_RESOURCE_ATTRIBUTES"].split(","))


TRACING_NAMES = frozenset(e.name for e in TRACING_ENV)


def test_nothing_is_traced_unless_asked() -> None:
    """The picker's tracing is on by default in llm-d-router: written off; the sidecar's is off."""
    for run in _running(_render("disaggregated-uncached-tokens")):
        args, env = run.container.get("args", []), run.container.get("env", [])
        assert not [e for e in env if e["name"].startswith("OTEL_")], run.where
        assert not [a for a in args if "otlp" in a or "detailed-traces" in a], run.where
        tracing = [a for a in args if a.startswith("--tracing")]
        assert tracing == (["--tracing=false"] if run.where.endswith("/epp") else []), run.where


def test_every_component_is_traced_with_its_service_name_and_attributes() -> None:
    services = {}
    for run in _running(_render("disaggregated-traced")):
        if run.container["name"] == "preflight":  # the node checks before vLLM: no spans
            assert not [e for e in run.container["env"] if e["name"] in TRACING_NAMES]
            continue
        env = run.env()
        services[run.where] = env["OTEL_SERVICE_NAME"]
        assert env["OTEL_TRACES_SAMPLER"] == LLM_D["sampler"] == "parentbased_traceidratio"
        assert float(env["OTEL_TRACES_SAMPLER_ARG"]) == TRACING["samplingRatio"]
        resource = _resource(env)
        role = env["OTEL_SERVICE_NAME"].removeprefix("k3-routed-")
        expected = {
            "k8s.namespace.name": "inference",
            "k8s.pod.name": f"{run.owner}-0",
            "k8s.node.name": NODE,
            "kimi.deployment": "k3-routed",
            "kimi.role": role,
        }
        if run.owner != "k3-routed-epp":  # a serving pod's: its TP group
            expected["kimi.group"] = run.owner
        assert resource == expected, run.where
    assert services == {
        "LeaderWorkerSet/k3-routed-g0/routing-sidecar": "k3-routed-sidecar",
        "LeaderWorkerSet/k3-routed-g0/vllm": "k3-routed-decode",
        "LeaderWorkerSet/k3-routed-p0/vllm": "k3-routed-prefill",
        "Deployment/k3-routed-epp/epp": "k3-routed-epp",
    }


def _serving_args(children: list[dict[str, Any]]) -> Iterator[tuple[str, list[str]]]:
    for run in _running(children):
        if run.container["name"] == "vllm":
            yield run.where, [expand(a, REFS) for a in run.container["args"]]


def test_vllm_reads_the_collector_and_detailed_traces_on_every_role(vllm_parser: Any) -> None:
    children = _render("disaggregated-traced")
    parsed = 0
    for where, args in _serving_args(children):
        values = parse(vllm_parser, args)
        assert values is not None, where
        assert values["otlp_traces_endpoint"] == TRACING["endpoint"], where
        assert values["collect_detailed_traces"] == ["all"], where
        parsed += 1
    assert parsed == 4  # the leader and worker templates of a decode and a prefill group
    for run in _running(children):
        if run.container["name"] == "vllm":
            assert run.env()["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "grpc"


def test_without_detailed_traces_vllm_gets_the_collector_alone(vllm_parser: Any) -> None:
    for where, args in _serving_args(_render("routed-traced-by-default")):
        values = parse(vllm_parser, args)
        assert values is not None, where
        assert values["otlp_traces_endpoint"] == TRACING["endpoint"], where
        assert values["collect_detailed_traces"] is None, where


def test_the_picker_and_sidecar_get_what_llm_d_router_reads() -> None:
    """InitTracing's own variables (and the downward API's for the attributes), an exporter it
    builds for OTLP, and nothing of vLLM's."""
    runs = _running(_render("disaggregated-traced"))
    llm_d = [r for r in runs if r.container["name"] not in ("vllm", "preflight")]
    assert {r.container["name"] for r in llm_d} == {"epp", "routing-sidecar"}
    for run in llm_d:
        env = run.env()
        otel = {name for name in env if name.startswith("OTEL_")}
        assert otel <= set(LLM_D["environment"]), run.where
        assert LLM_D["exporters"][env["OTEL_TRACES_EXPORTER"]] == "grpc"
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == TRACING["endpoint"]
        assert "--tracing=true" in run.container["args"]


def test_the_serving_pods_get_exactly_the_variables_the_spec_env_may_not_set() -> None:
    for run in _running(_render("disaggregated-traced")):
        if run.container["name"] == "vllm":
            names = {e["name"] for e in run.container["env"]}
            assert names >= TRACING_NAMES, run.where
            assert {n for n in names if n.startswith("OTEL_")} <= TRACING_NAMES, run.where


def _traced(kd: KimiDeployment, default: TracingSpec | None) -> dict[str, str]:
    """The decode leader's tracing variables with the operator's `default`."""
    children = build_children(kd, dataclasses.replace(OperatorDefaults(), tracing=default))
    leaders = [r for r in _running(children) if r.container["name"] == "vllm"]
    env = leaders[0].env()
    return {k: v for k, v in env.items() if k in TRACING_NAMES}


def test_a_deployment_inherits_the_operators_default_or_overrides_it() -> None:
    doc, _ = CASES["k3-tp16-routed"]
    default = TracingSpec.model_validate({"endpoint": TRACING["endpoint"], "samplingRatio": 0.5})
    inherited = _traced(deployment(doc), default)
    assert inherited["OTEL_TRACES_SAMPLER_ARG"] == "0.5"
    assert _traced(deployment(doc), None) == {}

    def spec(tracing: dict[str, Any]) -> KimiDeployment:
        edited = dict(doc, spec={**doc["spec"], "observability": {"tracing": tracing}})
        return deployment(edited)

    own = _traced(spec({"endpoint": TRACING["endpoint"], "samplingRatio": 1}), default)
    assert own["OTEL_TRACES_SAMPLER_ARG"] == "1.0"
    assert _traced(spec({"endpoint": ""}), default) == {}  # the default turned off
    assert _traced(spec(TRACING), None)["OTEL_SERVICE_NAME"] == "k3-routed-decode"
