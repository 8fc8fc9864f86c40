"""`spec.prefill`: what differs between the prefill and the decode groups (docs/disaggregation.md).

Both roles run the spec's engine flags; on top of them, vLLM 0.33.0's NixlConnector
(`vllm/distributed/kv_transfer/kv_connector/v1/nixl/`) with the role it plays, the variables of its
handshake, and on the decode leaders llm-d-router v0.10.0's routing sidecar, which the endpoint
picker's requests reach first: it has the prefill group the picker named (header
`x-prefiller-host-port`) prefill the prompt, then hands the request to its own vLLM with the
`kv_transfer_params` the prefill returned. What the sidecar and the picker are given is checked
against that release (third_party/llm-d-router-v0.10.0-epp.yaml).
"""

import json
from typing import Any, Literal

from kimi_operator.api.owned_env import DISAGGREGATION_ENV, NIXL_SIDE_CHANNEL_PORT
from kimi_operator.api.spec import KimiDeployment, KimiDeploymentSpec

# A group's part in serving: both stages (no spec.prefill), or one of them.
Serving = Literal["aggregated", "prefill", "decode"]
# llm-d's role label (filter/bylabel/roles.go), which the picker's role filters read.
ROLE_LABEL = "llm-d.ai/role"
# The sidecar takes the pool's target port (HTTP_PORT) on decode leaders, where vLLM moves to
# llm-d's default model server port; prefill leaders serve the pool's port themselves.
DECODE_VLLM_PORT = 8200
DEFAULT_ROUTING_SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.10.0"
SIDECAR_NAME = "routing-sidecar"
# NixlConnector's roles: vLLM 0.33.0 deprecates kv_both for it (nixl/connector.py).
KV_ROLES: dict[Serving, str] = {"prefill": "kv_producer", "decode": "kv_consumer"}


def serving_roles(spec: KimiDeploymentSpec) -> tuple[Serving, ...]:
    """The roles of the deployment's groups: decode first (the groups of spec.replicas)."""
    return ("aggregated",) if spec.prefill is None else ("decode", "prefill")


def role_selector(kd: KimiDeployment) -> dict[str, str]:
    """With spec.prefill, the decode groups' pods only: the Service's (it reaches their vLLM,
    which then prefills too: only the pool's picker pairs a request with a prefill group) and the
    scale subresource's selector."""
    return {} if kd.spec.prefill is None else {ROLE_LABEL: "decode"}


def kv_transfer_flags(serving: Serving) -> list[str]:
    """The connector of a disaggregated role. A failed load fails the request (vLLM's default,
    written out): `recompute` would prefill on the decode group, which disaggregation avoids."""
    if serving == "aggregated":
        return []
    config = {
        "kv_connector": "NixlConnector",
        "kv_role": KV_ROLES[serving],
        "kv_load_failure_policy": "fail",
    }
    return ["--kv-transfer-config", json.dumps(config, separators=(",", ":"))]


def role_engine_args(spec: KimiDeploymentSpec, serving: Serving) -> list[str]:
    """The user's flags for a role: spec.engineArgs, then the prefill role's own."""
    extra = spec.prefill.engine_args if serving == "prefill" and spec.prefill else []
    return [*spec.engine_args, *extra]


def handover_env(serving: Serving) -> list[dict[str, Any]]:
    """NIXL's variables (api/owned_env.py): the DS conv state layout, and the handshake's side
    channel on the pod's own IP, from the downward API."""
    if serving == "aggregated":
        return []
    env: list[dict[str, Any]] = []
    for owned in DISAGGREGATION_ENV:
        if owned.value:
            env.append({"name": owned.name, "value": owned.value})
        else:
            pod_ip = {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}
            env.append({"name": owned.name, "valueFrom": pod_ip})
    return env


def role_env(kd: KimiDeployment, serving: Serving) -> list[dict[str, Any]]:
    """The user's variables for a role: spec.env, the prefill role's own replacing a name."""
    env = [e.model_dump(exclude_none=True) for e in kd.spec.env]
    if serving != "prefill" or kd.spec.prefill is None:
        return env
    own = [e.model_dump(exclude_none=True) for e in kd.spec.prefill.env]
    names = {e["name"] for e in own}
    return [e for e in env if e["name"] not in names] + own


def side_channel_port() -> dict[str, Any]:
    """The handshake's listener runs in the engine core: on the group's leader."""
    return {"name": "nixl", "containerPort": NIXL_SIDE_CHANNEL_PORT, "protocol": "TCP"}


def sidecar_args(http_port: int) -> list[str]:
    """Plain HTTP (the gateway speaks it to the pool's port); NIXL; the local vLLM's port."""
    return [
        f"--port={http_port}",
        f"--model-server-port={DECODE_VLLM_PORT}",
        "--kv-connector=nixlv2",
        "--secure-proxy=false",
    ]


def routing_sidecar(image: str, http_port: int, security: dict[str, Any]) -> dict[str, Any]:
    """A native sidecar (an init container that keeps running): up before vLLM, down after it."""
    return {
        "name": SIDECAR_NAME,
        "image": image,
        "command": ["/app/pd-sidecar"],  # the image's entrypoint (llm-d's Dockerfile.sidecar)
        "restartPolicy": "Always",
        "args": sidecar_args(http_port),
        "ports": [{"name": "sidecar", "containerPort": http_port, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": "1", "memory": "1Gi"},
            "limits": {"memory": "1Gi"},
        },
        "securityContext": dict(security),
    }


def _plugin(kind: str, **parameters: Any) -> dict[str, Any]:
    return {"type": kind, **({"parameters": parameters} if parameters else {})}


def picker_plugins(kd: KimiDeployment) -> list[dict[str, Any]]:
    """The picker's plugins of disaggregation: the role filters, the decider of spec.prefill and
    the profile handler that runs the prefill profile when the decider says so."""
    prefill = kd.spec.prefill
    if prefill is None:
        return []
    if prefill.decider == "UncachedTokens":
        decider = _plugin("prefix-based-pd-decider", nonCachedTokens=prefill.uncached_tokens)
    else:
        decider = _plugin("always-disagg-pd-decider")
    return [
        _plugin("prefill-filter"),
        _plugin("decode-filter"),
        decider,
        _plugin("disagg-profile-handler", deciders={"prefill": decider["type"]}),
    ]


def scheduling_profiles(kd: KimiDeployment, scorers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One profile of the scorers; with spec.prefill a decode and a prefill profile, each behind
    its role's filter (the names disagg-profile-handler looks for by default)."""
    if kd.spec.prefill is None:
        return [{"name": "default", "plugins": scorers}]
    return [
        # Copies: one object in two places would be a YAML alias in the ConfigMap.
        {"name": role, "plugins": [{"pluginRef": f"{role}-filter"}, *map(dict, scorers)]}
        for role in ("decode", "prefill")
    ]
