"""How many agent sessions a GB300 group of Kimi K3 holds in HBM, and whether a trace's do.

What a session keeps on each GPU of its group: the MLA KV of every token of its context (24 MLA
layers of a 512-wide latent and a 64-wide rope key, one byte each in the FP8 e4m3 cache the fast
path's kernels read; every tensor-parallel rank keeps the whole latent) and, once, the KDA state
of each of the other 69 layers (a 128 x 128 FP32 matrix a head, 96 heads, and a BF16 convolution
window of 3 steps over its q, k and v channels; split over the ranks). What is left for them is
HBM at the configured utilization less the rank's share of the ~1.5 TB checkpoint and a reserve
for activations, graphs and the drafter.

Sources: Kimi K3's layer counts and checkpoint size from the public recipes (docs/weights.md);
the MLA widths from vLLM 0.33.0 (docs/architecture.md); the KDA heads, head size and window from
vLLM 0.33.0's K3 kernels (`models/kimi_k3/amd/specialized_decode/mono/attention/kda.py`: 12 local
heads at TP8, head size 128, a convolution of 4). Assumed: the reserve. The planner's prefix
cache never evicts; where the trace's open sessions do not fit, its hits are too optimistic.
"""

import math
from dataclasses import dataclass
from typing import Final

from kimi_operator.bench.results import Results

HBM_BYTES: Final = 288e9  # a GB300 GPU (HBM3e)
CHECKPOINT_BYTES: Final = 1.497e12  # 93 layers x 16.10 GB (docs/weights.md)
MLA_LAYERS: Final = 24
KDA_LAYERS: Final = 93 - MLA_LAYERS
MLA_ENTRY: Final = 512 + 64  # latent + rope key, one FP8 byte each
KDA_HEADS: Final = 96
KDA_HEAD_SIZE: Final = 128
KDA_STATE_BYTES: Final = 4  # FP32 recurrent state
KDA_CONV_STEPS: Final = 3  # a window of 4 keeps the 3 steps before the new one
KDA_CONV_BYTES: Final = 2  # BF16
RESERVE_BYTES: Final = 12e9  # assumed: activations, CUDA graphs, the drafter, communication
UTILIZATION: Final = 0.90  # spec.kvCache.gpuMemoryUtilizationPercent's default


@dataclass(frozen=True)
class GroupMemory:
    gpus: int
    kv_bytes_per_token: float  # on each GPU
    state_bytes_per_session: float  # on each GPU
    free_bytes: float  # on each GPU, for KV and state

    def sessions(self, context_tokens: int) -> int:
        """Sessions of this many tokens the group holds at once."""
        each = context_tokens * self.kv_bytes_per_token + self.state_bytes_per_session
        return max(math.floor(self.free_bytes / each), 0)


def group_memory(gpus: int) -> GroupMemory:
    weights = CHECKPOINT_BYTES / gpus
    state = KDA_LAYERS * (
        KDA_HEADS * KDA_HEAD_SIZE * KDA_HEAD_SIZE * KDA_STATE_BYTES
        + 3 * KDA_HEADS * KDA_HEAD_SIZE * KDA_CONV_STEPS * KDA_CONV_BYTES
    )
    return GroupMemory(
        gpus=gpus,
        kv_bytes_per_token=float(MLA_LAYERS * MLA_ENTRY),
        state_bytes_per_session=state / gpus,
        free_bytes=HBM_BYTES * UTILIZATION - weights - RESERVE_BYTES,
    )


@dataclass(frozen=True)
class Fit:
    sessions_held: int  # of the trace's longest session context, per group
    longest_context_tokens: int
    open_sessions_per_group: int  # at the busiest moment of the plan
    fits: bool


def fit(gpus: int, longest_context: int, open_sessions: int, groups: int) -> Fit:
    """The trace's open sessions, shared evenly over the groups, against what each holds."""
    held = group_memory(gpus).sessions(longest_context)
    per_group = math.ceil(open_sessions / max(groups, 1))
    return Fit(held, longest_context, per_group, per_group <= held)


def open_sessions(results: Results) -> int:
    """The most tasks (agent sessions) open at once: from a task's first send to its last token,
    its context stays in the prefix cache for its next turn."""
    events = sorted(
        (edge, change)
        for task in results.tasks
        if task.start_s is not None and task.completion_s is not None
        for edge, change in ((task.start_s, 1), (task.start_s + task.completion_s, -1))
    )
    most = current = 0
    for _, change in events:  # an end before a start at the same moment (-1 sorts first)
        current += change
        most = max(most, current)
    return most


def longest_context(results: Results) -> int:
    """The most tokens one request holds (a modelled request always has its prompt length)."""
    return (
        max((r.prompt_tokens or 0) + r.output_tokens for r in results.requests)
        if results.requests
        else 0
    )
