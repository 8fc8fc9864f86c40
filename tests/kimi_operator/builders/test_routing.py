"""spec.routing.mode InferencePool: the pool selects every group's leader and nothing else, and
the endpoint picker is given only what llm-d-router v0.10.0 knows (its flags, plugin types and
config fields, captured from that release in third_party/) and reads only metrics vLLM 0.33.0
exports (the vendored metric catalog)."""

import csv
import json
import shlex
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.builders.routing import DEFAULT_EPP_IMAGE
from kimi_operator.cli import main
from kimi_operator.embedded.upstream import EPP_RELEASE, VLLM_METRICS, upstream_file
from tests.kimi_operator.builders.cases import CASES, _edited, deployment
from tests.support.repo import ROOT

EPP: dict[str, Any] = yaml.safe_load(upstream_file(EPP_RELEASE).read_text())
ROUTED = sorted(
    name
    for name, (doc, _) in CASES.items()
    if (doc["spec"].get("routing") or {}).get("mode") == "InferencePool"
)


def _children(name: str) -> dict[str, list[dict[str, Any]]]:
    doc, defaults = CASES[name]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for child in build_children(deployment(doc), defaults):
        by_kind.setdefault(child["kind"], []).append(child)
    return by_kind


def _only(children: Mapping[str, list[dict[str, Any]]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [c for c in children[kind] if c["metadata"]["name"] == name]
    return found


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def _matches(child: Mapping[str, Any]) -> dict[str, str]:
    spec = child["spec"]
    if child["kind"] == "Service":
        selector: dict[str, str] = spec["selector"]
        return selector
    found: dict[str, str] = spec["selector"]["matchLabels"]
    return found


def test_there_are_routed_cases() -> None:
    assert len(ROUTED) >= 3


@pytest.mark.parametrize("name", ROUTED)
def test_the_pool_selects_the_leaders_of_every_group_only(name: str) -> None:
    children = _children(name)
    (pool,) = children["InferencePool"]
    selector = _matches(pool)
    groups = children["LeaderWorkerSet"]
    assert len(groups) >= 2
    (target,) = pool["spec"]["targetPorts"]
    for group in groups:
        templates = group["spec"]["leaderWorkerTemplate"]
        leader = templates["leaderTemplate"]["metadata"]["labels"]
        worker = templates["workerTemplate"]["metadata"]["labels"]
        # LeaderWorkerSet labels the leader pod worker-index 0, each worker its index.
        assert _selects(selector, leader | {"leaderworkerset.sigs.k8s.io/worker-index": "0"})
        assert not _selects(selector, worker | {"leaderworkerset.sigs.k8s.io/worker-index": "1"})
        # The port the pool sends to: vLLM's, or on a decode group of spec.prefill its sidecar's.
        pod = templates["leaderTemplate"]["spec"]
        ports = {
            p["containerPort"]: p["name"]
            for c in [*pod["containers"], *pod["initContainers"]]
            for p in c.get("ports", [])
        }
        served_by = "sidecar" if leader.get("llm-d.ai/role") == "decode" else "http"
        assert ports[target["number"]] == served_by


@pytest.mark.parametrize("name", ROUTED)
def test_the_endpoint_picker_pod_is_in_no_serving_selector(name: str) -> None:
    """Else the disruption budget would count it, the PodMonitor scrape it as vLLM, the
    Service and the pool send it requests."""
    children = _children(name)
    kd_name = CASES[name][0]["metadata"]["name"]
    epp = _only(children, "Deployment", f"{kd_name}-epp")
    pod = epp["spec"]["template"]["metadata"]["labels"]
    assert _selects(epp["spec"]["selector"]["matchLabels"], pod)
    assert _selects(_matches(_only(children, "Service", f"{kd_name}-epp")), pod)
    serving = [
        _only(children, "Service", kd_name),
        *children["PodDisruptionBudget"],
        *children.get("PodMonitor", []),
        *children["InferencePool"],
    ]
    for child in serving:
        assert not _selects(_matches(child), pod), child["kind"]


def _args(name: str) -> tuple[dict[str, Any], list[str]]:
    children = _children(name)
    kd_name = CASES[name][0]["metadata"]["name"]
    epp = _only(children, "Deployment", f"{kd_name}-epp")
    (container,) = epp["spec"]["template"]["spec"]["containers"]
    return container, container["args"]


def _flags(args: list[str]) -> dict[str, str]:
    """`--name value` and `--name=value` as pflag reads them (no boolean takes a separate
    value: pflag would read it as a positional argument)."""
    out, rest = {}, list(args)
    while rest:
        arg = rest.pop(0)
        assert arg.startswith("--"), f"positional argument {arg!r}"
        name, eq, value = arg[2:].partition("=")
        kind = EPP["flags"].get(name)
        assert kind is not None, f"--{name} is not a flag of the EPP {EPP['release']}"
        if not eq:
            assert kind != "Bool", f"--{name} {rest[:1]}: a boolean takes --{name}=value"
            value = rest.pop(0)
        out[name] = value
    return out


@pytest.mark.parametrize("name", ROUTED)
def test_epp_args_are_flags_of_the_pinned_release(name: str) -> None:
    container, args = _args(name)
    flags = _flags(args)
    doc = CASES[name][0]
    kd_name, namespace = doc["metadata"]["name"], doc["metadata"]["namespace"]
    assert flags["pool-name"] == kd_name
    assert flags["pool-namespace"] == namespace
    assert flags["pool-group"] == EPP["defaults"]["pool-group"]
    assert all(value.isdigit() for f, value in flags.items() if EPP["flags"][f] == "Int")
    assert all(
        value in ("true", "false") for f, value in flags.items() if EPP["flags"][f] == "Bool"
    )
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["grpc"] == int(flags.get("grpc-port", EPP["defaults"]["grpc-port"]))
    health = int(flags.get("grpc-health-port", EPP["defaults"]["grpc-health-port"]))
    assert ports["grpc-health"] == health
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["grpc"]["port"] == health
        assert container[probe]["grpc"]["service"] in EPP["healthServices"]
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "config")
    assert flags["config-file"].startswith(mount + "/")


def test_an_unknown_flag_or_a_split_boolean_is_caught() -> None:
    """The flag check can fail."""
    with pytest.raises(AssertionError, match="--pool-names is not a flag"):
        _flags(["--pool-names", "x"])
    with pytest.raises(AssertionError, match="a boolean takes"):
        _flags(["--tracing", "false"])


def _config(name: str) -> dict[str, Any]:
    children = _children(name)
    kd_name = CASES[name][0]["metadata"]["name"]
    _, args = _args(name)
    file = _flags(args)["config-file"].rsplit("/", 1)[1]
    config: dict[str, Any] = yaml.safe_load(
        _only(children, "ConfigMap", f"{kd_name}-epp")["data"][file]
    )
    return config


def _config_problems(config: Mapping[str, Any]) -> list[str]:
    schema = EPP["config"]
    problems = []
    if config.get("apiVersion") not in schema["apiVersion"]:
        problems.append(f"apiVersion {config.get('apiVersion')}")
    if config.get("kind") != schema["kind"]:
        problems.append(f"kind {config.get('kind')}")
    problems += [f"field {k}" for k in config if k not in {"apiVersion", "kind", *schema["fields"]}]
    names = set()
    for plugin in config["plugins"]:
        problems += [f"plugin field {k}" for k in plugin if k not in schema["plugin"]]
        if plugin["type"] not in EPP["pluginTypes"]:
            problems.append(f"plugin type {plugin['type']}")
        names.add(plugin.get("name", plugin["type"]))
        params = EPP["pluginParameters"].get(plugin["type"], {})
        problems += _parameter_problems(plugin["type"], plugin.get("parameters", {}), params)
    for source in config.get("dataLayer", {}).get("sources", []):
        problems += [f"dataLayer field {k}" for k in source if k not in schema["dataLayerSource"]]
        for ref in [source["pluginRef"], *(e["pluginRef"] for e in source["extractors"])]:
            if ref not in names:
                problems.append(f"dataLayer pluginRef {ref}")
    problems += [
        f"dataLayer {k}" for k in config.get("dataLayer", {}) if k not in schema["dataLayer"]
    ]
    for profile in config["schedulingProfiles"]:
        problems += [f"profile field {k}" for k in profile if k not in schema["schedulingProfile"]]
        for ref in profile["plugins"]:
            problems += [f"ref field {k}" for k in ref if k not in schema["schedulingPlugin"]]
            if ref["pluginRef"] not in names:
                problems.append(f"pluginRef {ref['pluginRef']}")
    return problems


GO_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "int": int,
    "bool": bool,
    "float64": (int, float),
    "object": dict,
}


def _parameter_problems(where: str, value: Any, schema: Any) -> list[str]:
    """Parameters against the json tags of the plugin's config types in the pinned release (a
    mapping: an object's fields; a name: a Go type)."""
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return [f"{where}: not an object"]
        out = []
        for key, item in value.items():
            if key not in schema:
                out.append(f"{where}.{key}: not a parameter")
            else:
                out += _parameter_problems(f"{where}.{key}", item, schema[key])
        return out
    expected = GO_TYPES[schema]
    ok = isinstance(value, expected) and not (schema != "bool" and isinstance(value, bool))
    return [] if ok else [f"{where}: {value!r} is not a {schema}"]


@pytest.mark.parametrize("name", ROUTED)
def test_epp_config_follows_the_pinned_schema(name: str) -> None:
    assert _config_problems(_config(name)) == []


def test_a_wrong_config_is_caught() -> None:
    config = _config(ROUTED[0])
    config["schedulingProfiles"][0]["plugins"].append({"pluginRef": "nowhere", "weigth": 1})
    config["plugins"].append({"type": "prefix-scorer"})
    assert _config_problems(config) == [
        "plugin type prefix-scorer",
        "ref field weigth",
        "pluginRef nowhere",
    ]


def test_wrong_parameters_and_data_layer_are_caught() -> None:
    config = _config("routed-precise-cpu-offload")
    producer = next(p for p in config["plugins"] if p["type"] == "precise-prefix-cache-producer")
    producer["parameters"]["kvEventsConfig"]["podDiscoveryConfig"]["socketPort"] = "5557"
    producer["parameters"]["tokenProcessorConfig"]["blockSizeToken"] = 16
    config["dataLayer"]["sources"][1]["extractors"].append({"pluginRef": "nowhere"})
    assert _config_problems(config) == [
        "precise-prefix-cache-producer.tokenProcessorConfig.blockSizeToken: not a parameter",
        "precise-prefix-cache-producer.kvEventsConfig.podDiscoveryConfig.socketPort: '5557' is "
        "not a int",
        "dataLayer pluginRef nowhere",
    ]


def _precise(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The precise producer's parameters and the prefix scorer's, in a case's EPP config."""
    plugins = {p["type"]: p for p in _config(name)["plugins"]}
    return (
        plugins["precise-prefix-cache-producer"]["parameters"],
        plugins["prefix-cache-scorer"].get("parameters", {}),
    )


def test_precise_scoring_subscribes_to_the_leaders_kv_events() -> None:
    """The picker dials each leader (the pool's endpoints) on the port vLLM publishes on, takes
    the topic vLLM is given, scores with the producer's index, tokenizes with vLLM's own render
    endpoint (on with --enable-scale-out), and its blocks divide vLLM's."""
    producer, scorer = _precise("routed-precise-cpu-offload")
    assert scorer == {"prefixMatchInfoProducerName": "precise-prefix-cache-producer"}
    events = producer["kvEventsConfig"]
    children = _children("routed-precise-cpu-offload")
    template = children["LeaderWorkerSet"][0]["spec"]["leaderWorkerTemplate"]
    (leader,) = template["leaderTemplate"]["spec"]["containers"]
    (worker,) = template["workerTemplate"]["spec"]["containers"]
    args = leader["args"]
    vllm_events = json.loads(args[args.index("--kv-events-config") + 1])
    assert vllm_events["publisher"] == "zmq"
    assert vllm_events["enable_kv_cache_events"] is True
    port = int(vllm_events["endpoint"].rsplit(":", 1)[1])
    assert events["podDiscoveryConfig"]["socketPort"] == port
    assert {"name": "kv-events", "containerPort": port, "protocol": "TCP"} in leader["ports"]
    assert events["discoverPods"] is True
    assert vllm_events["topic"].startswith(events["topicFilter"])
    assert events["topicFilter"] == EPP["kvEventsTopicFilter"]
    # llm-d-router splits the topic on `@`: the third part is the model requests name.
    assert (
        vllm_events["topic"].split("@")[2]
        == CASES["routed-precise-cpu-offload"][0]["spec"]["model"]["name"]
    )
    assert "--enable-scale-out" in args
    assert "--enable-scale-out" not in worker["args"]
    token = next(
        p for p in _config("routed-precise-cpu-offload")["plugins"] if p["type"] == "token-producer"
    )
    assert token["parameters"]["vllm"]["url"] == "http://k3-routed.inference.svc:8000"
    blocks = producer["tokenProcessorConfig"]["blockSizeTokens"]
    assert blocks == EPP["defaultBlockSizeTokens"]


def test_estimated_scoring_keeps_the_pickers_own_estimate() -> None:
    config = _config("k3-tp16-routed")
    assert "dataLayer" not in config
    assert {p["type"] for p in config["plugins"]}.isdisjoint(
        {"precise-prefix-cache-producer", "token-producer", "endpoint-notification-source"}
    )
    prefix = next(p for p in config["plugins"] if p["type"] == "prefix-cache-scorer")
    assert "parameters" not in prefix


def _weights(kd: KimiDeployment) -> dict[str, float]:
    config = next(
        yaml.safe_load(c["data"]["epp-config.yaml"])
        for c in build_children(kd, OperatorDefaults())
        if c["kind"] == "ConfigMap"
    )
    (profile,) = config["schedulingProfiles"]
    return {ref["pluginRef"]: ref["weight"] for ref in profile["plugins"]}


def test_scorer_weights_default_to_llm_d_routers_and_follow_the_spec() -> None:
    pool = {"mode": "InferencePool"}
    default = deployment(_edited("k3-tp16-latency.yaml", routing=pool))
    assert _weights(default) == {
        "queue-scorer": 2,
        "kv-cache-utilization-scorer": 2,
        "prefix-cache-scorer": 3,
    }
    weighed = pool | {"endpointPicker": {"weights": {"queue": 1, "kvCacheUtilization": 0}}}
    edited = deployment(_edited("k3-tp16-latency.yaml", routing=weighed))
    assert _weights(edited) == {"queue-scorer": 1, "prefix-cache-scorer": 3}


def test_epp_image_is_pinned_and_overridable() -> None:
    assert f"{EPP['image']}:{EPP['release']}" == DEFAULT_EPP_IMAGE
    pool = {"mode": "InferencePool"}

    def image(routing: dict[str, Any], defaults: OperatorDefaults) -> str:
        kd = deployment(_edited("k3-tp16-latency.yaml", routing=routing))
        (epp,) = [c for c in build_children(kd, defaults) if c["kind"] == "Deployment"]
        found: str = epp["spec"]["template"]["spec"]["containers"][0]["image"]
        return found

    assert image(pool, OperatorDefaults()) == DEFAULT_EPP_IMAGE
    assert image(pool, OperatorDefaults(epp_image="r.example/epp:1")) == "r.example/epp:1"
    own = pool | {"endpointPicker": {"image": "r.example/epp:2"}}
    assert image(own, OperatorDefaults(epp_image="r.example/epp:1")) == "r.example/epp:2"


def test_mode_service_and_a_missing_pool_api_render_no_routing() -> None:
    routed = deployment(CASES["k3-tp16-routed"][0])
    kinds = {"InferencePool", "HTTPRoute", "Deployment", "ConfigMap", "Role", "RoleBinding"}
    found = {c["kind"] for c in build_children(routed, OperatorDefaults())}
    assert kinds <= found
    without = build_children(routed, OperatorDefaults(inference_pool_available=False))
    assert not kinds & {c["kind"] for c in without}
    plain = deployment(_edited("k3-tp16-routed.yaml", routing={"mode": "Service"}))
    assert not kinds & {c["kind"] for c in build_children(plain, OperatorDefaults())}


def test_the_metrics_the_epp_reads_exist_on_vllm_0_33() -> None:
    with upstream_file(VLLM_METRICS).open() as rows:
        catalog = {row["name"]: row for row in csv.DictReader(rows, delimiter="\t")}
    # Each one it needs, registered by vLLM by default (not only with some option).
    for metric in EPP["vllmMetrics"]:
        assert catalog[metric]["notes"].startswith("default"), metric
    # The LoRA one exists only with --enable-lora, which the operator refuses: read if present.
    for metric in EPP["optionalVllmMetrics"]:
        assert metric in catalog, metric
    info = catalog["vllm:cache_config_info"]["labels"].split(",")
    assert set(EPP["cacheInfoLabels"]) <= set(info)
    # What bench reads around a replay (prefix-cache hit rate).
    assert catalog["vllm:prefix_cache_hits"]["type"] == "counter"
    assert catalog["vllm:prefix_cache_queries"]["type"] == "counter"


@pytest.mark.parametrize("name", ROUTED)
def test_prefix_caching_stays_on(name: str) -> None:
    """The prefix-cache scorer routes to where vLLM's prefix cache holds the prefix."""
    groups = _children(name)["LeaderWorkerSet"]
    for group in groups:
        (container,) = group["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"]
        command = shlex.join([*container.get("command", []), *container.get("args", [])])
        assert "--no-enable-prefix-caching" not in command
        assert "--enable-prefix-caching" in command


def test_the_epp_role_grants_what_upstream_grants_it() -> None:
    children = _children("k3-tp16-routed")
    (role,) = children["Role"]
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    # llm-d-router v0.10.0's chart (routerlib _rbac.yaml, llm-d-router-gateway rbac.yaml).
    read = ("get", "list", "watch")
    expected = {("", "pods", v) for v in read} | {
        ("inference.networking.k8s.io", "inferencepools", v) for v in read
    }
    expected |= {
        (group, resource, v)
        for group in ("inference.networking.x-k8s.io", "llm-d.ai")
        for resource in ("inferenceobjectives", "inferencemodelrewrites")
        for v in read
    }
    assert granted == expected
    (binding,) = children["RoleBinding"]
    (account,) = children["ServiceAccount"]
    (epp,) = children["Deployment"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["name"] == account["metadata"]["name"]
    assert epp["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]


def _routing_objects(children: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What mode InferencePool adds: everything but the groups, the compile-cache claim and the
    deployment's own Service, PodDisruptionBudget and PodMonitor."""
    name = "k3-routed"
    kept = {
        "ComputeDomain",
        "LeaderWorkerSet",
        "PodDisruptionBudget",
        "PodMonitor",
        "PersistentVolumeClaim",
    }
    return [
        c
        for c in children
        if c["kind"] not in kept and (c["kind"], c["metadata"]["name"]) != ("Service", name)
    ]


def test_render_shows_routing_and_docs_show_what_it_renders(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sample = ROOT / "crds" / "samples" / "k3-tp16-routed.yaml"
    assert main(["render", str(sample)]) == 0
    rendered = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    routing = _routing_objects(rendered)
    assert [c["kind"] for c in routing] == [
        "InferencePool",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "HTTPRoute",
    ]
    docs = (ROOT / "docs" / "routing.md").read_text()
    block = docs.split("prints them\n", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    assert list(yaml.safe_load_all(block)) == routing, "docs/routing.md: paste the new render"
