"""The specs the builder tests render: every sample, plus the branches no sample takes."""

import copy
from typing import Any

import yaml

from kimi_operator.api.spec import KimiDeployment, TracingSpec
from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults
from tests.support.repo import ROOT

SAMPLES = sorted((ROOT / "crds" / "samples").glob("*.yaml"))


def _sample(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "crds" / "samples" / name).read_text())
    return loaded


def _edited(name: str, **spec: Any) -> dict[str, Any]:
    doc = copy.deepcopy(_sample(name))
    doc["spec"].update(spec)
    return doc


HF = {
    "huggingface": {
        "repo": "moonshotai/Kimi-K3",
        "revision": "v1",
        "tokenSecretRef": {"name": "hf", "key": "token"},
    }
}

TRACING = {
    "endpoint": "http://otel-collector.observability:4317",
    "samplingRatio": 0.25,
    "detailedTraces": True,
}

# name -> (document, operator defaults)
CASES: dict[str, tuple[dict[str, Any], OperatorDefaults]] = {
    **{p.stem: (yaml.safe_load(p.read_text()), OperatorDefaults()) for p in SAMPLES},
    "huggingface-no-domain-two-groups": (
        _edited(
            "k3-tp8-dspark.yaml",
            model={"name": "moonshotai/Kimi-K3", "source": HF},
            replicas=2,
            computeDomain="Disabled",  # allowed across trays with stock decode only
            decode={"backend": "auto", "maxNumSeqs": 8},
            scheduling={
                "nodeSelector": {"pool": "gb300"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                "priorityClassName": "inference",
                "exclusiveClique": True,
            },
            monitoring={"podMonitor": False},
        ),
        OperatorDefaults(),
    ),
    "single-node-fixed-image": (
        _edited("k3-tp16-stock.yaml", gpus=8, gpusPerNode=8, image="example.com/vllm:fixed"),
        OperatorDefaults(),
    ),
    "compute-domain-api-missing": (
        _edited("k3-tp8-dspark.yaml", decode={"backend": "auto", "maxNumSeqs": 8}),
        OperatorDefaults(
            compute_domain_available=False,
            serving_image="example.com/vllm:1",
            serving_image_vllm_version="0.32.0",  # before the fix: --disable-custom-all-reduce
        ),
    ),
    # A pool without a Gateway of ours (routed to by hand), the operator's EPP image overridden,
    # the KV-cache scorer weighed 0 (left out of the profile), the Gateway's listener named.
    "routed-no-gateway-operator-image": (
        _edited(
            "k3-tp16-routed.yaml",
            routing={
                "mode": "InferencePool",
                "endpointPicker": {"weights": {"kvCacheUtilization": 0, "prefixCache": 5}},
            },
        ),
        OperatorDefaults(epp_image="registry.example/llm-d-router-endpoint-picker:v0.10.0"),
    ),
    # Agent sessions that come back warm: a CPU KV tier, and the picker indexing the leaders' KV
    # events of both tiers (docs/kv-cache.md).
    "routed-precise-cpu-offload": (
        _edited(
            "k3-tp16-routed.yaml",
            routing={"mode": "InferencePool", "prefixScoring": "Precise"},
            kvCache={"cpuOffload": {"perGPU": "32Gi"}},
        ),
        OperatorDefaults(),
    ),
    "routed-listener-own-image": (
        _edited(
            "k3-tp16-routed.yaml",
            routing={
                "mode": "InferencePool",
                "gatewayRef": {"name": "gw", "sectionName": "http"},
                "endpointPicker": {"image": "registry.example/epp@sha256:" + "0" * 64},
            },
        ),
        OperatorDefaults(),
    ),
    # spec.prefill: the public GB300 recipe's shape (TP8 x DCP8 on both roles, one prefill group
    # feeding the decode groups), DSpark drafts, the prefill role's own flags and variables.
    "disaggregated-dspark": (
        _edited(
            "k3-tp8-dspark.yaml",
            replicas=2,
            decode={"maxNumSeqs": 8, "contextParallelSize": 8},
            routing={"mode": "InferencePool"},
            env=[{"name": "SHARED", "value": "both"}, {"name": "ROLE", "value": "decode"}],
            prefill={
                "replicas": 1,
                "engineArgs": ["--max-num-batched-tokens", "16384"],
                "env": [{"name": "ROLE", "value": "prefill"}],
            },
        ),
        OperatorDefaults(),
    ),
    "disaggregated-uncached-tokens": (
        _edited(
            "k3-tp16-routed.yaml",
            replicas=1,
            prefill={"replicas": 1, "decider": "UncachedTokens", "uncachedTokens": 512},
        ),
        OperatorDefaults(),
    ),
    # spec.prefill with precise prefix scoring: the prefix scorers of both profiles read the
    # precise producer's index; both roles publish KV events.
    "disaggregated-precise": (
        _edited(
            "k3-tp16-routed.yaml",
            replicas=1,
            routing={"mode": "InferencePool", "prefixScoring": "Precise"},
            prefill={"replicas": 1, "decider": "UncachedTokens", "uncachedTokens": 512},
        ),
        OperatorDefaults(),
    ),
    # spec.observability.tracing on both roles of spec.prefill: vLLM, the picker and the sidecar
    # export to one collector (docs/observability.md#traces).
    "disaggregated-traced": (
        _edited(
            "k3-tp16-routed.yaml",
            replicas=1,
            prefill={"replicas": 1},
            observability={"tracing": TRACING},
        ),
        OperatorDefaults(),
    ),
    # The chart's tracing default, inherited by a deployment that says nothing of tracing.
    "routed-traced-by-default": (
        _sample("k3-tp16-routed.yaml"),
        OperatorDefaults(tracing=TracingSpec.model_validate({"endpoint": TRACING["endpoint"]})),
    ),
}


def deployment(doc: dict[str, Any]) -> KimiDeployment:
    report = check_document(doc)
    assert report.deployment is not None, report.problems
    return report.deployment
