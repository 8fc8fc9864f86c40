"""Which nodes a TP group must leave (docs/maintenance.md): the policy the operator is started with
(`NodePolicy`: `kimi-operator run --evacuate-*`, chart values `evacuation.*`) and the nodes found
unfit under it (`UnfitNodes`), kept from the Node watch and shared by every copy of
`OperatorDefaults`, as the default-image gate is. Pure: no client; the watch hands the objects in.

A node is unfit when it is cordoned (`spec.unschedulable`), carries a `NoSchedule` or `NoExecute`
taint whose key the policy names, or a node condition the policy names with status `True` (the
convention of node-problem-detector and NVIDIA's NVSentinel: `True` is the problem). A condition
marked critical lets its groups go without a replacement when none can be placed.
"""

import dataclasses
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# NVIDIA NVSentinel's GPU health conditions (its gpu-health-monitor's and syslog-health-monitor's
# check names, set on the node with status True while failing) and node-problem-detector's kernel
# monitor's.
DEFAULT_CONDITIONS = (
    "GpuXidWatch",
    "GpuNvlinkWatch",
    "GpuPcieWatch",
    "GpuMemWatch",
    "GpuDriverWatch",
    "KernelDeadlock",
    "ReadonlyFilesystem",
)
# The ones a group cannot outlive: a GPU off the bus, NVLink down (a TP group across trays stops).
DEFAULT_CRITICAL = ("GpuPcieWatch", "GpuNvlinkWatch")
# The taints NVSentinel's fault-quarantine rulesets put on failing GPU nodes in its examples.
DEFAULT_TAINTS = ("nvidia.com/gpu-xid-error", "nvidia.com/gpu-nvlink-error")
EFFECTS = ("NoSchedule", "NoExecute")
# Kubernetes' qualified name (a taint's key; a condition's type may also be one): an optional DNS
# subdomain prefix and "/", then a name of 63 characters at most.
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
QUALIFIED_NAME = re.compile(f"({_PREFIX}/)?{_NAME}")
# Node conditions whose True means healthy: naming one would evacuate every healthy node.
HEALTHY_WHEN_TRUE = ("Ready",)
CORDONED, TAINTED, CONDITION = "Cordoned", "Tainted", "NodeCondition"


def check_name(value: str, what: str) -> str:
    """`value` if it is a qualified name (a taint key, a condition type); else ValueError with
    what is wrong, for the flag's and the chart's messages."""
    if not value:
        raise ValueError(f"a {what} must not be empty")
    if len(value.partition("/")[0]) > 253 or not QUALIFIED_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a {what}: expected [prefix/]name, the name 1-63 letters, digits, "
            "'-', '_' or '.' starting and ending with a letter or digit, the prefix a DNS "
            "subdomain (e.g. nvidia.com/gpu-xid-error)"
        )
    if what == "node condition type" and value in HEALTHY_WHEN_TRUE:
        raise ValueError(f"{value!r} is True on a healthy node: name the conditions of a problem")
    return value


@dataclass(frozen=True)
class NodePolicy:
    """What makes a node unfit; `enabled` False: nothing does (no Node is read, and the
    PodDisruptionBudget lets `rollout.maxUnavailable` pods go as before)."""

    enabled: bool = True
    cordoned: bool = True
    taints: tuple[str, ...] = DEFAULT_TAINTS
    conditions: tuple[str, ...] = DEFAULT_CONDITIONS
    critical: tuple[str, ...] = DEFAULT_CRITICAL


@dataclass(frozen=True)
class Unfit:
    """Why a node is unfit: `reason` Cordoned, Tainted or NodeCondition; `detail` the taint or
    condition, with its message."""

    reason: str
    detail: str
    critical: bool = False
    fenced: bool = False  # a condition's, the node also cordoned or tainted

    @property
    def schedulable(self) -> bool:
        """Whether kube-scheduler still places pods there (only conditions make it unfit): a
        group kept off it may have found room only there. Cordoned or tainted: no pod comes
        back to it."""
        return self.reason == CONDITION and not self.fenced

    def text(self, node: str) -> str:
        return f"node {node} {self.detail}" if self.detail else f"node {node} is cordoned"


def unfit(node: Mapping[str, Any], policy: NodePolicy) -> Unfit | None:
    """Why `node` is unfit under `policy` (a critical condition first, then a condition, a taint,
    a cordon), None when it is not."""
    if not policy.enabled:
        return None
    found = []
    for c in (node.get("status") or {}).get("conditions") or []:
        kind = c.get("type", "")
        if kind in policy.conditions and c.get("status") == "True":
            message = f": {c['message']}"[:200] if c.get("message") else ""
            detail = f"has condition {kind}{message}"
            found.append(Unfit(CONDITION, detail, critical=kind in policy.critical))
    spec = node.get("spec") or {}
    for t in spec.get("taints") or []:
        if t.get("key") in policy.taints and t.get("effect") in EFFECTS:
            found.append(Unfit(TAINTED, f"is tainted {t['key']}:{t['effect']}"))
    if policy.cordoned and spec.get("unschedulable"):
        found.append(Unfit(CORDONED, ""))
    first = min(found, key=lambda u: not u.critical, default=None)
    if first is None or all(u.reason == CONDITION for u in found):
        return first
    return dataclasses.replace(first, fenced=first.reason == CONDITION)


class UnfitNodes:
    """The nodes found unfit, by name, as the Node watch hands them in (thread-safe)."""

    def __init__(self, policy: NodePolicy | None = None) -> None:
        self.policy = policy or NodePolicy()
        self._unfit: dict[str, Unfit] = {}
        self._lock = threading.Lock()
        # Until the Node watch has listed, which nodes are unfit is not known (no policy: none).
        self._listed = not self.policy.enabled

    def listed(self) -> bool:
        """The Node watch handed on its whole list: from now on what is unfit is known; whether
        it was not known before (a relist after 410 Gone changes nothing)."""
        with self._lock:
            first, self._listed = not self._listed, True
        return first

    def observe(self, event_type: str | None, node: Mapping[str, Any]) -> bool:
        """A Node watch event (None: listed); whether what is unfit changed."""
        name = str((node.get("metadata") or {}).get("name", ""))
        found = None if event_type == "DELETED" else unfit(node, self.policy)
        with self._lock:
            before = self._unfit.get(name)
            if found is None:
                self._unfit.pop(name, None)
            else:
                self._unfit[name] = found
        return before != found

    def now(self) -> dict[str, Unfit] | None:
        """A copy: one reconcile decides from one view; None before the Node watch has listed
        (unknown is not fit: group_set.py)."""
        with self._lock:
            return dict(self._unfit) if self._listed else None
