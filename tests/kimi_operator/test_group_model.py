"""The group set's model check (#56; docs/architecture.md, "The group set"): the state machine of
tests/support/group_model.py over random interleavings of rack drains, restarts, edits, scaling
and failures against the operator's own decision code. `make test` runs fifteen interleavings,
the same each time; `KIMI_MODEL_CHECK=long` (make test-model) a thousand, or
`KIMI_MODEL_CHECK_EXAMPLES` of them, random each run: hypothesis prints the steps of a failure
and the seed that replays it."""

import os
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings

from tests.support.group_model import Fleet, played

LONG = os.environ.get("KIMI_MODEL_CHECK") == "long"
EXAMPLES = int(os.environ.get("KIMI_MODEL_CHECK_EXAMPLES") or (1000 if LONG else 15))


Fleet.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=25 if LONG else 10,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=not LONG,
)
test_the_group_set_under_interleaved_events = Fleet.TestCase


def drained_extras_after_a_scale_down(m: Fleet) -> None:
    """Found by the model check (drains lasting two steps): extras of a scale-down 3 -> 1,
    drained while the rollout rewrote the member, were taken off `updatedReplicas`, which they
    never counted in: -1, and the status refused."""
    m.cordon({"tray-3", "tray-4"})
    m.template_edited()
    m.kubectl_drain({"tray-5", "tray-7"})
    m.template_edited()
    m.time_passes()
    m.time_passes()
    m.template_edited()
    m.scaled(3)
    m.time_passes()
    m.cordon({"tray-9", "tray-2", "tray-5", "tray-4"})
    m.cordon({"tray-9", "tray-2", "tray-5", "tray-8"})
    m.template_edited()
    m.template_edited()
    m.scaled(3)
    m.drain_the_rack()
    m.scaled(1)
    m.kubectl_drain({"tray-9"})
    m.time_passes()
    m.uncordon("tray-2")
    m.template_edited()
    m.time_passes()


def kept_off_nodes_that_healed(m: Fleet) -> None:
    """Found by the model check: groups made while nodes had conditions were kept off them by a
    required node affinity; once every node was fit, the only room left was on those nodes, and
    a group stayed Pending for ever (SETTLED). Now a preference (placement.kept_off)."""
    m.condition("tray-1", "GpuXidWatch")
    m.scaled(3)
    m.drain_the_rack()
    m.condition("tray-0", "GpuXidWatch")
    m.scaled(3)
    m.condition("tray-0", "GpuPcieWatch")
    m.condition("tray-1", "GpuPcieWatch")
    m.template_edited()
    m.condition("tray-6", "GpuPcieWatch")
    m.scaled(3)
    m.condition("tray-5", "GpuPcieWatch")
    m.template_edited()
    m.drain_the_rack()
    m.condition("tray-6", "GpuXidWatch")
    m.template_edited()
    m.drain_the_rack()
    m.scaled(3)
    m.scaled(2)
    m.template_edited()
    m.template_edited()
    m.condition("tray-5", "GpuXidWatch")
    m.scaled(1)
    m.condition("tray-1", "GpuXidWatch")
    m.condition("tray-9", "GpuPcieWatch")
    m.scaled(3)


def moved_between_failing_nodes(m: Fleet) -> None:
    """Found by the model check: with room only on other nodes with a condition, a group kept
    off its own failing node (a preference) went to another failing node, was evacuated from
    that one, and so on (LOOP). A group on a node it was made to keep off stays, and says so."""
    m.kubectl_drain({"tray-6"})
    m.condition("tray-0", "GpuPcieWatch")
    m.time_passes()
    m.condition("tray-9", "GpuPcieWatch")
    m.kubectl_drain({"tray-3", "tray-1"})
    m.condition("tray-6", "GpuXidWatch")
    m.condition("tray-4", "GpuXidWatch")
    m.condition("tray-7", "GpuXidWatch")
    m.time_passes()
    m.uncordon("tray-6")
    m.condition("tray-6", "GpuPcieWatch")
    m.condition("tray-2", "GpuPcieWatch")
    m.condition("tray-8", "GpuXidWatch")
    m.condition("tray-7", "GpuXidWatch")
    m.time_passes()
    m.time_passes()
    m.time_passes()
    m.uncordon("tray-2")
    m.time_passes()
    m.time_passes()
    m.kubectl_drain({"tray-9", "tray-0", "tray-3"})
    m.condition("tray-9", "GpuPcieWatch")
    m.kubectl_drain({"tray-2", "tray-7"})
    m.uncordon("tray-1")
    m.uncordon("tray-0")


def drained_off_a_node_it_was_kept_off(m: Fleet) -> None:
    """Found by the long run (3,000 interleavings): g0, made while tray-2 had a condition and
    placed there for want of room elsewhere, was then drained (`kubectl drain` of tray-2): it
    was never evacuated, since it had found room only there, and the drain never completed
    (DRAIN). A node that keeps new pods off (cordoned, tainted) is always left: no replacement
    can come back to it."""
    m.kubectl_drain({"tray-9", "tray-2"})
    m.time_passes()
    m.time_passes()
    m.condition("tray-1", "GpuPcieWatch")
    m.condition("tray-5", "GpuPcieWatch")
    m.condition("tray-2", "GpuPcieWatch")
    m.uncordon("tray-9")
    m.kubectl_drain({"tray-9", "tray-2"})
    m.uncordon("tray-5")
    m.condition("tray-9", "GpuPcieWatch")
    m.time_passes()
    m.time_passes()
    m.uncordon("tray-9")
    m.time_passes()
    m.uncordon("tray-7")
    m.time_passes()
    m.time_passes()
    m.condition("tray-8", "GpuPcieWatch")
    m.condition("tray-2", "GpuPcieWatch")
    m.condition("tray-6", "GpuXidWatch")
    m.uncordon("tray-2")
    m.uncordon("tray-9")
    m.condition("tray-4", "GpuPcieWatch")
    m.condition("tray-7", "GpuXidWatch")
    m.kubectl_drain({"tray-9", "tray-2"})


@pytest.mark.parametrize(
    "steps",
    [
        kept_off_nodes_that_healed,
        moved_between_failing_nodes,
        drained_off_a_node_it_was_kept_off,
        drained_extras_after_a_scale_down,
    ],
)
def test_what_the_model_check_found_stays_fixed(steps: Callable[[Fleet], None]) -> None:
    """Each interleaving a long run found, replayed (hypothesis's steps, as printed)."""
    played(steps)
