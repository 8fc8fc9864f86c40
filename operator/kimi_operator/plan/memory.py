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

The CPU KV tier (spec.kvCache.cpuOffload, docs/kv-cache.md) holds the sessions HBM does not: each
rank keeps its own share of a session there, as in HBM, so the tier per GPU that holds them is
their count times a session's bytes on one GPU. A returning turn then loads its context over
NVLink-C2C instead of computing it again; the load rate is assumed (C2C_LOAD_BYTES_PER_S), the
prefill cost is the calibration's. The simulated steps take a tier hit as a GPU hit: the load
time is reported beside them, not simulated.

A disaggregated request's hand-over moves the same bytes: each decode rank reads, from its prefill
rank, the MLA KV of the prompt tokens its group does not hold and its share of the KDA state, all
ranks at once, at an assumed NIXL rate over NVLink (NIXL_BYTES_PER_S).
"""

import math
from dataclasses import dataclass
from typing import Final

from kimi_operator.api.host_memory import GIB
from kimi_operator.bench.results import Results
from kimi_operator.plan.costs import KvTransfer, StepCosts, attention_pairs

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
# Assumed: what one GPU loads from the tier per second (NVLink-C2C joins a Grace to its two GPUs
# at 900 GB/s both ways together; vLLM's transfers are chunked copies, shared with its stores).
C2C_LOAD_BYTES_PER_S: Final = 200e9
# Assumed: what one GPU reads from another over NIXL within an NVL72 domain. NVLink 5 gives a GB300
# GPU 1.8 TB/s, both ways together (NVIDIA's GB300 NVL72 figures): 900 GB/s one way, half of it
# taken. Over the trays' ConnectX-8 NICs instead (800 Gb/s a GPU) it would be 100 GB/s.
NIXL_BYTES_PER_S: Final = 450e9


@dataclass(frozen=True)
class GroupMemory:
    gpus: int
    kv_bytes_per_token: float  # on each GPU
    state_bytes_per_session: float  # on each GPU
    free_bytes: float  # on each GPU, for KV and state

    def session_bytes(self, context_tokens: int) -> float:
        """What one session of this many tokens keeps on each GPU (in HBM, or in the tier)."""
        return context_tokens * self.kv_bytes_per_token + self.state_bytes_per_session

    def sessions(self, context_tokens: int) -> int:
        """Sessions of this many tokens the group holds at once."""
        return max(math.floor(self.free_bytes / self.session_bytes(context_tokens)), 0)


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


def nixl_transfer(gpus: int) -> KvTransfer:
    """The built-in hand-over of a group of `gpus` (no calibration measured NIXL's time)."""
    memory = group_memory(gpus)
    return KvTransfer(
        fixed_s=memory.state_bytes_per_session / NIXL_BYTES_PER_S,
        per_token_s=memory.kv_bytes_per_token / NIXL_BYTES_PER_S,
        source=f"assumed: {memory.kv_bytes_per_token:.0f} B a token and the KDA state per GPU "
        f"at {NIXL_BYTES_PER_S / 1e9:.0f} GB/s (NVLink)",
    )


@dataclass(frozen=True)
class Fit:
    sessions_held: int  # of the trace's longest session context, per group
    longest_context_tokens: int
    open_sessions_per_group: int  # at the busiest moment of the plan
    fits: bool
    # The CPU tier for the open sessions HBM does not hold (0 and 0 GiB when it holds them all),
    # and a returning turn of the longest context: loaded from the tier, or computed again.
    sessions_in_tier: int = 0
    tier_per_gpu_gib: int = 0
    returning_from_tier_s: float = 0.0
    returning_recomputed_s: float = 0.0


def recompute_seconds(costs: StepCosts, tokens: int) -> float:
    """A prompt of this many tokens prefilled alone, none cached (the calibration's costs)."""
    prefill = costs.prefill
    return (
        prefill.fixed_s
        + prefill.per_token_s * tokens
        + prefill.per_attention_pair_s * attention_pairs(0, tokens)
    )


def fit(gpus: int, longest_context: int, open_sessions: int, groups: int, costs: StepCosts) -> Fit:
    """The trace's open sessions, shared evenly over the groups, against what each holds in HBM,
    and the CPU tier (per GPU, whole GiB) that holds the rest."""
    memory = group_memory(gpus)
    held = memory.sessions(longest_context)
    per_group = math.ceil(open_sessions / max(groups, 1))
    session = memory.session_bytes(longest_context)
    in_tier = max(per_group - held, 0)
    return Fit(
        sessions_held=held,
        longest_context_tokens=longest_context,
        open_sessions_per_group=per_group,
        fits=per_group <= held,
        sessions_in_tier=in_tier,
        tier_per_gpu_gib=math.ceil(in_tier * session / GIB),
        returning_from_tier_s=session / C2C_LOAD_BYTES_PER_S,
        returning_recomputed_s=recompute_seconds(costs, longest_context),
    )


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
