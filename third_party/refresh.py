"""Download the vendored upstream CRDs again at their pinned versions (needs network; no test runs
it): `python third_party/refresh.py [--ref FILE=REF ...]`. Prints each file's git blob hash, to be
recorded in README.md. The vLLM metric catalog and the endpoint picker's flags are not downloaded:
README.md says how they were made.

To move a CRD to a newer upstream version, pass its tag or commit (`--ref
keda.sh_scaledobjects.yaml=v2.21.0`), run the tests, then update PINS and README.md."""

import argparse
import hashlib
import sys
import urllib.request
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent


class Pin(NamedTuple):
    repo: str
    ref: str  # a tag, or a commit where the file is in no release
    path: str


PINS = {
    "leaderworkerset.x-k8s.io_leaderworkersets.yaml": Pin(
        "kubernetes-sigs/lws",
        "060ab4da17eea1f0865fcbd3236bb1075e2cea32",
        "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    ),
    "resource.nvidia.com_computedomains.yaml": Pin(
        "kubernetes-sigs/dra-driver-nvidia-gpu",
        "v0.4.1",
        "deployments/helm/dra-driver-nvidia-gpu/crds/resource.nvidia.com_computedomains.yaml",
    ),
    **{
        f"monitoring.coreos.com_{plural}.yaml": Pin(
            "prometheus-operator/prometheus-operator",
            "v0.93.0",
            f"example/prometheus-operator-crd/monitoring.coreos.com_{plural}.yaml",
        )
        for plural in ("podmonitors", "servicemonitors", "prometheusrules")
    },
    "keda.sh_scaledobjects.yaml": Pin(
        "kedacore/keda", "v2.20.2", "config/crd/bases/keda.sh_scaledobjects.yaml"
    ),
    # The versions llm-d-router v0.10.0 (the endpoint picker) is built against (its go.mod).
    "inference.networking.k8s.io_inferencepools.yaml": Pin(
        "kubernetes-sigs/gateway-api-inference-extension",
        "v1.5.0",
        "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml",
    ),
    **{
        f"gateway.networking.k8s.io_{plural}.yaml": Pin(
            "kubernetes-sigs/gateway-api",
            "v1.5.1",
            f"config/crd/standard/gateway.networking.k8s.io_{plural}.yaml",
        )
        for plural in ("httproutes", "gateways")
    },
}


def git_blob_hash(data: bytes) -> str:
    """What `git hash-object` prints for a file with these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", action="append", default=[], metavar="FILE=REF")
    refs = dict(item.partition("=")[::2] for item in parser.parse_args(argv).ref)
    wrong = sorted(name for name, ref in refs.items() if name not in PINS or not ref)
    if wrong:
        parser.error(f"--ref FILE=REF: {wrong} not of that form; FILE is one of {sorted(PINS)}")
    for name, pin in PINS.items():
        ref = refs.get(name, pin.ref)
        url = f"https://raw.githubusercontent.com/{pin.repo}/{ref}/{pin.path}"
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
        (HERE / name).write_bytes(data)
        print(f"{name}\t{pin.repo}@{ref}\t{len(data)} bytes\tblob {git_blob_hash(data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
