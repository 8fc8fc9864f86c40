"""The upstream CRDs (and vLLM's metric catalog) vendored in the repository's third_party/ folder:
the one place the demo, the embedded API server, the tests and the benchmarks find them. Their
sources, versions and licenses are in third_party/README.md."""

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

THIRD_PARTY = Path(__file__).resolve().parents[3] / "third_party"
CRD_FILES = {
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    "ComputeDomain": "resource.nvidia.com_computedomains.yaml",
    "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
    "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
    "ScaledObject": "keda.sh_scaledobjects.yaml",
    "InferencePool": "inference.networking.k8s.io_inferencepools.yaml",
    "HTTPRoute": "gateway.networking.k8s.io_httproutes.yaml",
    "Gateway": "gateway.networking.k8s.io_gateways.yaml",
}
# The kinds of the operator's custom children: an API server needs their CRDs before it runs.
CHILD_KINDS = ("LeaderWorkerSet", "ComputeDomain", "PodMonitor")
# The kinds of spec.routing.mode InferencePool (docs/routing.md), installed where a test or the
# demo routes through a pool; the Gateway is not the operator's, it reads its address.
ROUTING_KINDS = ("InferencePool", "HTTPRoute")
# libyaml's parser where PyYAML was built with it (its wheels are), else PyYAML's own: the same
# documents for a tenth of the CPU (the vendored CRDs: 1.4 s -> 0.14 s). cli.read_documents picks
# the same its own way (the wheel, which `validate` runs from, has no embedded/).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
VLLM_METRICS = "vllm-0.33.0-metrics.tsv"
EPP_RELEASE = "llm-d-router-v0.10.0-epp.yaml"


def upstream_file(name: str) -> Path:
    """The path of a vendored file; a clear error where this is not a clone of the repository."""
    path = THIRD_PARTY / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the upstream CRDs come with a clone of the kimi-operator "
            "repository (third_party/), not with an installed wheel"
        )
    return path


def upstream_crd(kind: str) -> dict[str, Any]:
    """The vendored CRD of `kind` (one of CRD_FILES), parsed."""
    if kind not in CRD_FILES:
        raise KeyError(f"no vendored CRD for kind {kind!r}; vendored: {', '.join(CRD_FILES)}")
    return copy.deepcopy(_parsed(CRD_FILES[kind]))


@functools.cache
def _parsed(name: str) -> dict[str, Any]:
    """A vendored file parsed once per process: every embedded API server installs
    LeaderWorkerSet's 1.3 MB (callers get a copy to change at will)."""
    loaded: dict[str, Any] = yaml.load(upstream_file(name).read_text(), Loader=SAFE_LOADER)
    return loaded


def child_crds() -> list[dict[str, Any]]:
    """The CRDs of the operator's custom children (CHILD_KINDS), in that order."""
    return [upstream_crd(kind) for kind in CHILD_KINDS]
