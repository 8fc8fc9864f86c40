"""A serving pod's host memory with the CPU KV tier (`spec.kvCache.cpuOffload`), as vLLM 0.33.0
lays the tier out on a CUDA platform (docs/kv-cache.md):

- `--kv-offloading-size` is the tier's size in GiB summed over the TP ranks
  (`vllm/config/cache.py`: "the total buffer size summed across all TP ranks"), which
  `config/vllm.py` (`_post_init_kv_transfer_config`) passes to the offloading connector as
  `cpu_bytes_to_use`: perGPU x spec.gpus.
- The tier is one file per node, `/dev/shm/vllm_offload_<engine>.mmap`
  (`v1/kv_offload/cpu/shared_offload_region.py`), each chunk a row with a slot per rank of the TP
  group; each worker pre-faults only its own slots, so a pod holds perGPU x spec.gpusPerNode of
  it. But the file is sized for every rank, and before creating it vLLM checks that /dev/shm has
  that whole size free (`check_shm_free_space`, `RuntimeError: Insufficient space in /dev/shm`).
  A memory-backed emptyDir is a tmpfs no larger than its sizeLimit, the pod's memory limit and
  the node's allocatable memory, so the first two grow by the whole tier (perGPU x spec.gpus).

Quantities are exact integers of bytes (a fraction of a byte, `500m`, rounds up).
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

GIB = 1 << 30
_SUFFIXES = {
    "": 1,
    "m": Decimal("0.001"),
    **{s: 1000**i for i, s in enumerate("kMGTP", 1)},
    **{f"{s}i": 1024**i for i, s in enumerate("KMGTP", 1)},
}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")
# A GB300 NVL72 compute tray: two Grace CPUs' LPDDR5X, about 960 GB (api/pod_options.py).
TRAY_HOST_BYTES = 960 * 10**9
# What a tray keeps beside the serving pod: the kubelet's reservations and eviction threshold, the
# OS, the GPU operator, the DRA driver and IMEX, monitoring and logs.
TRAY_RESERVED_BYTES = 64 * GIB
TRAY_BUDGET_BYTES = TRAY_HOST_BYTES - TRAY_RESERVED_BYTES


def quantity_bytes(quantity: str) -> int:
    """A Kubernetes quantity (api/pod_options.py's QUANTITY) in bytes, rounded up."""
    match = _QUANTITY.match(quantity)
    if match is None:
        raise ValueError(f"not a quantity: {quantity!r}")
    exact = Decimal(match[1]) * _SUFFIXES[match[2] or ""]
    return int(exact.to_integral_value(rounding=ROUND_CEILING))


def quantity_text(size: int) -> str:
    """Bytes as the API server writes a quantity back: the largest binary suffix that divides
    them, so that drift checks compare it equal."""
    for suffix in ("Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = int(_SUFFIXES[suffix])
        if size % unit == 0 and size >= unit:
            return f"{size // unit}{suffix}"
    return str(size)


@dataclass(frozen=True)
class PodMemory:
    """What a serving pod asks for, in bytes; `tier_total` 0 without the CPU tier."""

    request: int
    limit: int
    shared_memory: int  # the /dev/shm emptyDir's sizeLimit
    pinned: int  # the tier's bytes this pod's GPUs fill (perGPU x gpusPerNode)
    tier_total: int  # the tier of the whole TP group (perGPU x gpus): --kv-offloading-size


def pod_memory(
    memory: str, shared_memory: str, per_gpu: str | None, gpus: int, gpus_per_node: int
) -> PodMemory:
    """The memory request grows by the pinned bytes the pod holds; /dev/shm by the whole tier
    (vLLM's free-space check), and the limit to at least /dev/shm (a tmpfs is no larger)."""
    base, shm = quantity_bytes(memory), quantity_bytes(shared_memory)
    if per_gpu is None:
        return PodMemory(base, base, shm, 0, 0)
    share = quantity_bytes(per_gpu)
    pinned, total = share * gpus_per_node, share * gpus
    request = base + pinned
    return PodMemory(request, max(request, shm + total), shm + total, pinned, total)


def offloading_size_gib(per_gpu: str, gpus: int) -> int:
    """vLLM's --kv-offloading-size: the tier of the whole TP group, in GiB."""
    return quantity_bytes(per_gpu) * gpus // GIB


def _gib(size: int) -> str:
    return f"{size / GIB:.0f} GiB"


def host_memory_warnings(spec: Mapping[str, Any]) -> list[str]:
    """Accepted tier sizes that a GB300 tray's host memory cannot hold (the defaulted spec,
    camelCase): the pods would stay Pending, or vLLM stop at start-up."""
    offload = spec["kvCache"].get("cpuOffload")
    if offload is None:
        return []
    resources = spec["resources"]
    gpus, per_node = spec["gpus"], spec["gpusPerNode"]
    mem = pod_memory(resources["memory"], spec["sharedMemory"], offload["perGPU"], gpus, per_node)
    field = "spec.kvCache.cpuOffload.perGPU"
    budget = (
        f"a GB300 tray's {TRAY_HOST_BYTES // 10**9} GB ({_gib(TRAY_HOST_BYTES)}) less "
        f"{_gib(TRAY_RESERVED_BYTES)} for the "
        f"kubelet and node daemons ({_gib(TRAY_BUDGET_BYTES)})"
    )
    warnings = []
    if mem.request > TRAY_BUDGET_BYTES:
        warnings.append(
            f"{field}: each pod asks for {_gib(mem.request)} of memory (resources.memory "
            f"{resources['memory']} + {offload['perGPU']} x {per_node} GPUs of the tier), more "
            f"than {budget}: the pods would not be scheduled on a tray"
        )
    if mem.shared_memory > TRAY_BUDGET_BYTES:
        most = (TRAY_BUDGET_BYTES - quantity_bytes(spec["sharedMemory"])) // gpus // GIB
        warnings.append(
            f"{field}: vLLM sizes each node's /dev/shm file for the whole tier ({offload['perGPU']}"
            f" x {gpus} GPUs) and checks it is free at start-up; with sharedMemory "
            f"{spec['sharedMemory']} that is {_gib(mem.shared_memory)}, more than {budget}, so "
            f"vLLM would stop (keep perGPU at most {most}Gi with spec.gpus {gpus})"
        )
    return warnings
