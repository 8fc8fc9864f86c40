"""spec.prefill rendered: both roles' groups, NIXL on each with its role, the hand-over's variables,
llm-d's role labels, the routing sidecar on decode leaders only (its flags those of llm-d-router
v0.10.0's sidecar, third_party/), and the endpoint picker's P/D profiles for the decider."""

import json
from typing import Any

import pytest
import yaml

from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.embedded.upstream import EPP_RELEASE, upstream_file
from kimi_operator.observability.rules import recording_rules
from tests.kimi_operator.builders.cases import CASES, _edited, deployment
from tests.support.repo import ROOT

RELEASE: dict[str, Any] = yaml.safe_load(upstream_file(EPP_RELEASE).read_text())
SIDECAR = RELEASE["sidecar"]
DISAGGREGATED = sorted(name for name, (doc, _) in CASES.items() if "prefill" in doc["spec"])
AGGREGATED = sorted(set(CASES) - set(DISAGGREGATED))


def _children(name: str) -> list[dict[str, Any]]:
    doc, defaults = CASES[name]
    return build_children(deployment(doc), defaults)


def _groups(name: str) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in _children(name) if c["kind"] == "LeaderWorkerSet"}


def _pods(group: dict[str, Any]) -> dict[str, dict[str, Any]]:
    template = group["spec"]["leaderWorkerTemplate"]
    return {"leader": template["leaderTemplate"], "worker": template["workerTemplate"]}


def _vllm(pod: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod["spec"]["containers"]
    (container,) = containers
    assert container["name"] == "vllm"
    return container


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_there_are_cases_of_both_deciders() -> None:
    deciders = {CASES[n][0]["spec"]["prefill"].get("decider", "Always") for n in DISAGGREGATED}
    assert deciders == {"Always", "UncachedTokens"}


@pytest.mark.parametrize("name", DISAGGREGATED)
def test_each_role_has_its_groups_its_connector_role_and_its_label(name: str) -> None:
    spec = CASES[name][0]["spec"]
    kd_name = CASES[name][0]["metadata"]["name"]
    groups = _groups(name)
    decode = [f"{kd_name}-g{i}" for i in range(spec["replicas"])]
    prefill = [f"{kd_name}-p{i}" for i in range(spec["prefill"]["replicas"])]
    assert sorted(groups) == sorted(decode + prefill)
    for group_name, group in groups.items():
        role, kv_role = (
            ("decode", "kv_consumer") if group_name in decode else ("prefill", "kv_producer")
        )
        for pod in _pods(group).values():
            assert pod["metadata"]["labels"]["llm-d.ai/role"] == role
            args = _vllm(pod)["args"]
            config = json.loads(_flag(args, "--kv-transfer-config"))
            assert config == {
                "kv_connector": "NixlConnector",
                "kv_role": kv_role,
                "kv_load_failure_policy": "fail",
            }


@pytest.mark.parametrize("name", DISAGGREGATED)
def test_both_roles_share_every_setting_the_handshake_compares(name: str) -> None:
    """Model, TP, DCP, cache dtypes, backend, graphs, drafts: the same flags on both roles."""
    shared = (
        "--tensor-parallel-size",
        "--decode-context-parallel-size",
        "--kv-cache-dtype",
        "--additional-config",
        "--compilation-config",
        "--served-model-name",
    )
    values = {}
    for group in _groups(name).values():
        args = _vllm(_pods(group)["leader"])["args"]
        found = tuple(_flag(args, f) for f in shared)
        drafts = _flag(args, "--speculative-config") if "--speculative-config" in args else ""
        values[group["metadata"]["name"]] = (args[0], *found, drafts)
    assert len(set(values.values())) == 1, values


@pytest.mark.parametrize("name", DISAGGREGATED)
def test_the_handover_variables_and_the_side_channel_port(name: str) -> None:
    for group in _groups(name).values():
        for node, pod in _pods(group).items():
            vllm = _vllm(pod)
            env = {e["name"]: e for e in vllm["env"]}
            assert env["VLLM_SSM_CONV_STATE_LAYOUT"]["value"] == "DS"
            host = env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"]["fieldRef"]["fieldPath"]
            assert host == "status.podIP"
            port = int(env["VLLM_NIXL_SIDE_CHANNEL_PORT"]["value"])
            declared = [p["containerPort"] for p in vllm["ports"] if p["name"] == "nixl"]
            assert declared == ([port] if node == "leader" else [])


@pytest.mark.parametrize("name", DISAGGREGATED)
def test_the_sidecar_runs_on_decode_leaders_only_in_front_of_vllm(name: str) -> None:
    for group in _groups(name).values():
        for node, pod in _pods(group).items():
            sidecars = [c for c in pod["spec"]["initContainers"] if c["name"] == "routing-sidecar"]
            role = pod["metadata"]["labels"]["llm-d.ai/role"]
            if (role, node) != ("decode", "leader"):
                assert sidecars == []
                continue
            (sidecar,) = sidecars
            assert sidecar["restartPolicy"] == "Always"  # a native sidecar: up before vLLM
            assert sidecar["image"] == f"{SIDECAR['image']}:{RELEASE['release']}"
            flags = dict(a[2:].split("=", 1) for a in sidecar["args"])
            assert set(flags) <= set(SIDECAR["flags"]) - {"vllm-port"}  # that one is deprecated
            assert flags["kv-connector"] in SIDECAR["kvConnectors"]
            assert flags["kv-connector"] == "nixlv2"
            assert flags["secure-proxy"] == "false"  # the gateway speaks plain HTTP to the pool
            http = next(p for p in _vllm(pod)["ports"] if p["name"] == "http")
            assert int(flags["model-server-port"]) == http["containerPort"]
            assert _flag(_vllm(pod)["args"], "--port") == flags["model-server-port"]
            (listens,) = sidecar["ports"]
            assert int(flags["port"]) == listens["containerPort"] != http["containerPort"]


@pytest.mark.parametrize("name", DISAGGREGATED)
def test_the_prefill_role_gets_its_own_flags_and_variables_last(name: str) -> None:
    spec = CASES[name][0]["spec"]
    own_args = spec["prefill"].get("engineArgs", [])
    own_env = {e["name"]: e["value"] for e in spec["prefill"].get("env", [])}
    shared_env = {e["name"]: e["value"] for e in spec.get("env", [])}
    for group in _groups(name).values():
        for pod in _pods(group).values():
            vllm = _vllm(pod)
            env = {e["name"]: e.get("value") for e in vllm["env"]}
            names = [e["name"] for e in vllm["env"]]
            assert len(names) == len(set(names))
            if pod["metadata"]["labels"]["llm-d.ai/role"] == "prefill":
                assert vllm["args"][len(vllm["args"]) - len(own_args) :] == own_args
                assert env.items() >= (shared_env | own_env).items()
            else:
                assert env.items() >= shared_env.items()
                assert not own_args or vllm["args"][-len(own_args) :] != own_args


def _epp_config(name: str) -> dict[str, Any]:
    (config_map,) = [c for c in _children(name) if c["kind"] == "ConfigMap"]
    config: dict[str, Any] = yaml.safe_load(config_map["data"]["epp-config.yaml"])
    return config


@pytest.mark.parametrize("name", DISAGGREGATED)
def test_the_pickers_profiles_follow_the_decider_and_the_pinned_release(name: str) -> None:
    prefill = CASES[name][0]["spec"]["prefill"]
    config = _epp_config(name)
    plugins = {p["type"]: p.get("parameters", {}) for p in config["plugins"]}
    for kind, known in RELEASE["pluginParameters"].items():
        assert set(plugins.get(kind, {})) <= set(known), kind
    for kind in ("prefill-filter", "decode-filter"):
        assert plugins[kind] == {}  # the role filters take no parameters
    handler_type = "disagg-profile-handler"
    handler = plugins[handler_type]
    assert set(handler["deciders"]) <= set(RELEASE["pluginParameters"][handler_type]["deciders"])
    decider = handler["deciders"]["prefill"]
    assert decider in plugins
    if prefill.get("decider") == "UncachedTokens":
        assert decider == "prefix-based-pd-decider"
        assert plugins[decider] == {"nonCachedTokens": prefill["uncachedTokens"]}
    else:
        assert decider == "always-disagg-pd-decider"
    profiles = {
        p["name"]: [r["pluginRef"] for r in p["plugins"]] for p in config["schedulingProfiles"]
    }
    assert set(profiles) == {"decode", "prefill"}  # disagg-profile-handler's default names
    for role, refs in profiles.items():
        assert refs[0] == f"{role}-filter"
        assert "prefix-cache-scorer" in refs  # the handler's README: both profiles need it
        assert role in RELEASE["roles"][f"{role}-filter"]
    assert "decode" not in RELEASE["roles"]["prefill-filter"]
    assert "prefill" not in RELEASE["roles"]["decode-filter"]


@pytest.mark.parametrize("name", DISAGGREGATED)
def test_the_service_reaches_decode_leaders_only(name: str) -> None:
    kd_name = CASES[name][0]["metadata"]["name"]
    (service,) = [
        c for c in _children(name) if (c["kind"], c["metadata"]["name"]) == ("Service", kd_name)
    ]
    assert service["spec"]["selector"]["llm-d.ai/role"] == "decode"


@pytest.mark.parametrize("name", AGGREGATED)
def test_without_prefill_nothing_of_it_is_rendered(name: str) -> None:
    text = yaml.safe_dump_all(_children(name))
    for mark in ("llm-d.ai/role", "kv-transfer-config", "routing-sidecar", "NIXL", "disagg"):
        assert mark not in text


def test_a_checked_flag_can_fail() -> None:
    """The sidecar check catches a flag the release does not have."""
    name = DISAGGREGATED[0]
    kd = deployment(CASES[name][0])
    children = build_children(kd, OperatorDefaults())
    leader = next(c for c in children if c["kind"] == "LeaderWorkerSet")["spec"]
    sidecar = leader["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["initContainers"][-1]
    flags = {a[2:].split("=", 1)[0] for a in [*sidecar["args"], "--prefiller-port=1"]}
    assert flags - set(SIDECAR["flags"]) == {"prefiller-port"}


def test_the_sidecar_image_is_the_releases_and_the_operator_can_move_it() -> None:
    kd = deployment(CASES[DISAGGREGATED[0]][0])

    def images(defaults: OperatorDefaults) -> set[str]:
        return {
            c["image"]
            for child in build_children(kd, defaults)
            if child["kind"] == "LeaderWorkerSet"
            for c in child["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"][
                "initContainers"
            ]
            if c["name"] == "routing-sidecar"
        }

    assert images(OperatorDefaults()) == {f"{SIDECAR['image']}:{RELEASE['release']}"}
    mirrored = "registry.example/llm-d-router-disagg-sidecar:v0.10.0"
    assert images(OperatorDefaults(routing_sidecar_image=mirrored)) == {mirrored}


def test_the_docs_example_renders_what_the_docs_say() -> None:
    docs = (ROOT / "docs" / "disaggregation.md").read_text()
    spec_block = docs.split("## The spec\n", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    doc = _edited("k3-tp16-routed.yaml", **yaml.safe_load(spec_block)["spec"])
    doc["metadata"]["name"] = "k3-pd"
    children = build_children(deployment(doc), OperatorDefaults())
    groups = sorted(c["metadata"]["name"] for c in children if c["kind"] == "LeaderWorkerSet")
    assert groups == ["k3-pd-g0", "k3-pd-g1", "k3-pd-p0"]
    for name in groups:
        assert f"`{name}`" in docs
    (config_map,) = [c for c in children if c["kind"] == "ConfigMap"]
    rendered = yaml.safe_load(config_map["data"]["epp-config.yaml"])
    shown = docs.split("decider:\n\n```yaml\n", 1)[1].split("schedulingProfiles:", 1)[0]
    assert yaml.safe_load(shown) == rendered["plugins"][-len(yaml.safe_load(shown)) :]


@pytest.mark.parametrize("name", DISAGGREGATED)
def test_scraped_series_say_their_role_which_the_autoscalers_rules_leave_out(name: str) -> None:
    (monitor,) = [c for c in _children(name) if c["kind"] == "PodMonitor"]
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        relabel = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
        # Prometheus's name for a pod label: non-alphanumerics as underscores.
        assert relabel["role"] == ["__meta_kubernetes_pod_label_llm_d_ai_role"]
    autoscaler_rules = [
        r["expr"]
        for r in recording_rules()
        if r["record"].startswith(
            ("kimi:serving_groups:", "kimi:num_requests_waiting:", "kimi:kv_cache_usage_perc:")
        )
    ]
    assert len(autoscaler_rules) == 3
    assert all('{role!="prefill"}' in expr for expr in autoscaler_rules)
