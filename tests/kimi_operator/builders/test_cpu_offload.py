"""spec.kvCache.cpuOffload: vLLM's --kv-offloading-size is the tier of the whole TP group, and the
pods grow by what vLLM 0.33.0 puts in host memory and in /dev/shm (docs/kv-cache.md)."""

from typing import Any

import pytest

from kimi_operator.api.host_memory import quantity_bytes, quantity_text
from kimi_operator.api.validation import check_document
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.builders.vllm_args import leader_args, worker_args
from tests.kimi_operator.builders.cases import deployment
from tests.support.corpus import CORPUS
from tests.support.pods import pod_specs
from tests.support.specs import edited

OFFLOADED = [(name, edits) for name, edits, valid in CORPUS if valid and "cpu-offload" in name]


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _pods(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [pod for _, pod in pod_specs(build_children(deployment(doc), OperatorDefaults()))]


def test_there_are_offloaded_corpus_specs() -> None:
    assert len(OFFLOADED) >= 6


@pytest.mark.parametrize("edits", [e for _, e in OFFLOADED], ids=[n for n, _ in OFFLOADED])
def test_every_rank_gets_the_tier_of_the_whole_group_in_gib(edits: dict[str, Any]) -> None:
    spec = deployment(edited(edits)).spec
    per_gpu = edits["spec.kvCache.cpuOffload"]["perGPU"]
    assert per_gpu.endswith("Gi")
    expected = str(int(per_gpu[:-2]) * spec.gpus)  # vLLM: the total across TP ranks, in GiB
    for args in (leader_args(spec), worker_args(spec)):
        assert _value(args, "--kv-offloading-size") == expected
        assert _value(args, "--kv-offloading-backend") == "native"
        assert args.count("--kv-offloading-size") == 1


# (perGPU, gpus, gpusPerNode) -> (memory request, limit, /dev/shm), with resources.memory 512Gi
# and sharedMemory 64Gi: the request grows by perGPU x gpusPerNode (the slots the pod's ranks
# fill), /dev/shm by perGPU x gpus (vLLM's file holds every rank's slots and must fit whole), and
# the limit is at least /dev/shm (a memory-backed emptyDir is no larger than the pod's limit).
SIZES = [
    (("32Gi", 16, 4), ("640Gi", "640Gi", "576Gi")),
    (("48Gi", 16, 4), ("704Gi", "832Gi", "832Gi")),
    (("64Gi", 8, 4), ("768Gi", "768Gi", "576Gi")),
    (("64Gi", 8, 8), ("1Ti", "1Ti", "576Gi")),
    (("1Gi", 16, 4), ("516Gi", "516Gi", "80Gi")),
]


@pytest.mark.parametrize(("shape", "expected"), SIZES, ids=[str(s) for s, _ in SIZES])
def test_pods_grow_by_the_pinned_bytes_and_dev_shm_by_the_whole_tier(
    shape: tuple[str, int, int], expected: tuple[str, str, str]
) -> None:
    per_gpu, gpus, per_node = shape
    request, limit, shm = expected
    doc = edited(
        {
            "spec.kvCache.cpuOffload": {"perGPU": per_gpu},
            "spec.gpus": gpus,
            "spec.gpusPerNode": per_node,
            "spec.decode.backend": "auto",  # any group shape
        }
    )
    pods = _pods(doc)
    assert pods
    for pod in pods:
        (dshm,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
        assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": shm}
        for container in [*pod["initContainers"], *pod["containers"]]:
            assert container["resources"]["requests"]["memory"] == request
            assert container["resources"]["limits"]["memory"] == limit


def test_without_the_tier_memory_and_dev_shm_are_the_specs() -> None:
    doc = edited({"spec.resources": {"memory": "700G"}, "spec.sharedMemory": "1.5Ti"})
    for pod in _pods(doc):
        (dshm,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
        assert dshm["emptyDir"]["sizeLimit"] == "1.5Ti"
        (vllm,) = pod["containers"]
        assert vllm["resources"]["requests"]["memory"] == "700G"
        assert not [a for a in vllm["args"] if a.startswith("--kv-offloading")]


def test_decimal_and_fractional_quantities_add_up_exactly() -> None:
    doc = edited(
        {
            "spec.kvCache.cpuOffload": {"perGPU": "1Gi"},
            "spec.resources": {"memory": "500G"},
            "spec.sharedMemory": "1.5Gi",
        }
    )
    (pod, *_) = _pods(doc)
    (vllm,) = pod["containers"]
    # 500e9 + 4 x 2^30 bytes = 504,294,967,296 = 492,475,554 KiB; 1.5 GiB + 16 GiB = 17.5 GiB
    assert vllm["resources"]["requests"]["memory"] == "492475554Ki"
    assert pod["volumes"][0]["emptyDir"]["sizeLimit"] == "17920Mi"


@pytest.mark.parametrize(
    ("quantity", "size"),
    [("1", 1), ("500m", 1), ("1k", 1000), ("1.5Gi", 3 << 29), ("2Ti", 2 << 40), ("0.5M", 500_000)],
)
def test_quantities_in_bytes(quantity: str, size: int) -> None:
    assert quantity_bytes(quantity) == size


@pytest.mark.parametrize(
    ("size", "text"), [(1 << 40, "1Ti"), (3 << 29, "1536Mi"), (1000, "1000"), (2048, "2Ki")]
)
def test_bytes_as_the_api_server_writes_them(size: int, text: str) -> None:
    assert quantity_text(size) == text


def test_a_malformed_quantity_is_an_error() -> None:
    with pytest.raises(ValueError, match="not a quantity: '12GB'"):
        quantity_bytes("12GB")


def _warnings(**spec: Any) -> list[str]:
    report = check_document(edited({f"spec.{k}": v for k, v in spec.items()}))
    assert report.deployment is not None, [str(p) for p in report.problems]
    return report.warnings


def test_a_tier_a_tray_cannot_hold_is_accepted_with_a_warning_naming_the_field() -> None:
    assert _warnings(kvCache={"cpuOffload": {"perGPU": "32Gi"}}) == []
    assert _warnings(kvCache={"cpuOffload": {"perGPU": "47Gi"}}) == []
    # 48Gi x 16 + 64Gi = 832 GiB of /dev/shm: over a tray's 960 GB (894 GiB) less 64 GiB.
    (shm,) = _warnings(kvCache={"cpuOffload": {"perGPU": "48Gi"}})
    assert shm.startswith("spec.kvCache.cpuOffload.perGPU: vLLM sizes each node's /dev/shm")
    assert "keep perGPU at most 47Gi with spec.gpus 16" in shm
    # TP 8 on two trays: twice as much per GPU (the request, 256Gi + 4 x 96Gi, fits).
    small = {"memory": "256Gi"}
    assert _warnings(gpus=8, resources=small, kvCache={"cpuOffload": {"perGPU": "95Gi"}}) == []
    (tp8,) = _warnings(gpus=8, resources=small, kvCache={"cpuOffload": {"perGPU": "96Gi"}})
    assert "keep perGPU at most 95Gi with spec.gpus 8" in tp8
    # The request itself: 512Gi + 4 x 80Gi = 832 GiB.
    both = _warnings(resources={"memory": "512Gi"}, kvCache={"cpuOffload": {"perGPU": "80Gi"}})
    assert [w.split(":")[0] for w in both] == ["spec.kvCache.cpuOffload.perGPU"] * 2
    assert "the pods would not be scheduled" in both[0]
    assert _warnings(resources={"memory": "64Gi"}, sharedMemory="64Gi", gpus=8) == []
