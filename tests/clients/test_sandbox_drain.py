"""#50's done-when on the sandbox (`kimi-operator demo --serve`), with the real kubectl: a one-group
deployment is Ready; `kubectl drain` of the node its leader runs on completes; meanwhile the
deployment never has fewer than one ready group, a replacement group is Ready on other nodes
before the old group's pods go, and no failure is recorded. What happened is read from kubectl
watches, every change in the order the sandbox made it, not from samples now and then. Without
evacuation (the chart's `evacuation.enabled=false`) the same checks fail: the drain evicts the
leader of the only group. And #56's: one drain of both groups' nodes of a two-group deployment
completes, each group replaced once, nothing restarted after uncordon."""

import io
import json
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from kimi_operator.embedded.chart import CHART
from kimi_operator.embedded.clients import Kubectl
from kimi_operator.embedded.disruption import is_ready
from kimi_operator.embedded.processes import wait
from tests.support.repo import ROOT

pytestmark = pytest.mark.heavy  # started first (tests/conftest.py)

SAMPLE = ROOT / "crds" / "samples" / "k3-tp16-latency.yaml"
NAME, NAMESPACE = "k3-tp16-latency", "inference"
OLD = f"{NAME}-g0"
TIMEOUT = "--timeout=60s"
DRAIN = ("--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s")


class Watch:
    """`kubectl get ... --watch --output-watch-events -o json`, its output read as it comes."""

    def __init__(self, kubectl: Kubectl, *what: str) -> None:
        args = ("get", *what, "-n", NAMESPACE, "--watch", "--output-watch-events", "-o", "json")
        self.process = kubectl.watch(*args)
        self.text: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.text.append(line)

    def started(self) -> bool:
        """The initial list is out: every change from here on is seen."""
        return bool(self.text)

    def seen(self) -> list[dict[str, Any]]:
        """The events read so far, in order (one still coming in left out)."""
        decoder, text, at, found = json.JSONDecoder(), "".join(self.text), 0, []
        while text[at:].strip():
            at += len(text[at:]) - len(text[at:].lstrip())
            try:
                event, at = decoder.raw_decode(text, at)
            except json.JSONDecodeError:
                break
            found.append(event)
        return found

    def events(self) -> list[dict[str, Any]]:
        """Stop watching; the events seen, in order."""
        self.process.terminate()
        self.process.wait(timeout=30)
        self._reader.join(timeout=30)
        return self.seen()


def _owner(pod: Mapping[str, Any]) -> str:
    (ref,) = [r for r in pod["metadata"]["ownerReferences"] if r.get("controller")]
    return str(ref["uid"])


def make_before_break(
    events: Sequence[Mapping[str, Any]], size: int, old: str, node: str
) -> list[str]:
    """What the pods' events show went wrong: a moment with no group of `size` pods all Ready,
    or the pods of group `old` (its LeaderWorkerSet's uid) going while no other group was Ready
    off `node`; or they never went."""
    problems: list[str] = []
    pods: dict[str, Mapping[str, Any]] = {}
    went = served = False  # served: a group was Ready (the initial list comes a pod at a time)
    for at, event in enumerate(events):
        pod = event["object"]
        name = pod["metadata"]["name"]
        if event["type"] == "DELETED":
            pods.pop(name, None)
        else:
            pods[name] = pod
        groups: dict[str, list[Mapping[str, Any]]] = {}
        for each in pods.values():
            groups.setdefault(_owner(each), []).append(each)
        ready = {
            uid: {p["spec"].get("nodeName") for p in members}
            for uid, members in groups.items()
            if len(members) == size
            and all(is_ready(p) and not p["metadata"].get("deletionTimestamp") for p in members)
        }
        served = served or bool(ready)
        if served and not ready:
            problems.append(f"event {at} ({event['type']} {name}): no group ready")
        if _owner(pod) == old and event["type"] == "DELETED" and not went:
            went = True
            if not any(uid != old and node not in nodes for uid, nodes in ready.items()):
                problems.append(f"event {at}: {name} went before a replacement was Ready")
    if not went:
        problems.append("the old group's pods never went")
    return problems


def _deploy(kubectl: Kubectl, tmp_path: Path, *values: str, replicas: int = 1) -> tuple[str, ...]:
    kubectl.helm(
        "install", "kimi-operator", str(CHART), "-n", "kimi-system", "--create-namespace", *values
    )
    kubectl.run("create", "namespace", NAMESPACE)
    doc = yaml.safe_load(SAMPLE.read_text())
    doc["spec"]["serving"] = {"drainSeconds": 0}  # no vLLM to ask: its requests end at once
    doc["spec"]["replicas"] = replicas
    manifest = tmp_path / "kimi.yaml"
    manifest.write_text(yaml.safe_dump(doc))
    kubectl.run("apply", "-f", str(manifest))
    kd = (f"kimi/{NAME}", "-n", NAMESPACE)
    kubectl.run("wait", "--for=condition=Ready", *kd, TIMEOUT)
    return kd


def _drain_watched(kubectl: Kubectl) -> tuple[str, str, list[str], list[int]]:
    """Drain the node of the group's leader, watched: (the node, kubectl drain's output, what
    the pods' events show went wrong, the deployment's readyReplicas as it changed)."""
    size = int(
        kubectl.run(
            "get", "lws", OLD, "-n", NAMESPACE, "-o", "jsonpath={.spec.leaderWorkerTemplate.size}"
        )
    )
    old = kubectl.run("get", "lws", OLD, "-n", NAMESPACE, "-o", "jsonpath={.metadata.uid}")
    node = kubectl.run("get", "pod", f"{OLD}-0", "-n", NAMESPACE, "-o", "jsonpath={.spec.nodeName}")
    pods, deployment = Watch(kubectl, "pods"), Watch(kubectl, "kimi", NAME)
    wait(lambda: pods.started() and deployment.started(), 30, "the watches")
    drained = kubectl.run("drain", node, *DRAIN)

    def leader_gone() -> bool:  # the API server's DELETED, before drain returned: read by now?
        return any(
            (e["type"], e["object"]["metadata"]["name"]) == ("DELETED", f"{OLD}-0")
            for e in pods.seen()
        )

    wait(leader_gone, 30, "the pods' watch to see the drained leader go")  # a busy machine lags
    problems = make_before_break(pods.events(), size, old, node)
    ready = [int(e["object"]["status"].get("readyReplicas", 0)) for e in deployment.events()]
    return node, drained, problems, ready


def test_a_drain_replaces_the_group_first_on_the_sandbox(
    sandbox: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    _, kubeconfig = sandbox
    kubectl = Kubectl(kubeconfig, io.StringIO(), tmp_path / "home")
    kd = _deploy(kubectl, tmp_path)

    node, drained, problems, ready = _drain_watched(kubectl)
    assert f"node/{node} drained" in drained.splitlines(), drained  # stderr: its retries
    assert problems == []
    assert min(ready) >= 1, ready

    # The replacement serves in the group's place, and is a member like any other: once the
    # node is uncordoned nothing is made again and nothing restarts (one start in all).
    def group_names() -> list[str]:
        names = kubectl.run("get", "lws", "-n", NAMESPACE, "-o", "name").split()
        return [name.rsplit("/", 1)[1] for name in names]

    replacement = f"{NAME}-g1"
    assert group_names() == [replacement]
    uid = kubectl.run("get", "lws", replacement, "-n", NAMESPACE, "-o", "jsonpath={.metadata.uid}")
    kubectl.run("uncordon", node)

    def settled() -> bool:
        return not kubectl.run("get", *kd, "-o", "jsonpath={.status.evacuations}")

    wait(settled, 60, "the evacuation's end")
    kubectl.run("wait", "--for=jsonpath={.status.readyReplicas}=1", *kd, TIMEOUT)
    assert group_names() == [replacement]
    assert uid == kubectl.run(
        "get", "lws", replacement, "-n", NAMESPACE, "-o", "jsonpath={.metadata.uid}"
    )
    assert kubectl.run(
        "get", "pods", "-n", NAMESPACE, f"--field-selector=spec.nodeName={node}"
    ) == (f"No resources found in {NAMESPACE} namespace.")
    groups = json.loads(kubectl.run("get", *kd, "-o", "jsonpath={.status.groups}"))
    assert [(g["name"], g["restarts"], g.get("lastFailure")) for g in groups] == [
        (replacement, 0, None)
    ]
    assert kubectl.run("get", *kd, "-o", "jsonpath={.status.stoppedGroups}") == "0"


def test_one_drain_of_both_groups_nodes_completes_on_the_sandbox(
    sandbox: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    """#56's done-when with the real kubectl: one `kubectl drain` naming both leaders' nodes of a
    two-group deployment (kubectl cordons them all first, as a rack's maintenance does)
    completes; the deployment never has fewer than two ready groups once both were, no failure
    is recorded, exactly two new groups are made, and nothing restarts after uncordon. Before
    the group set, the second group was never evacuated and kubectl gave up after its
    timeout."""
    _, kubeconfig = sandbox
    kubectl = Kubectl(kubeconfig, io.StringIO(), tmp_path / "home")
    kd = _deploy(kubectl, tmp_path, replicas=2)
    old = [f"{NAME}-g0", f"{NAME}-g1"]
    nodes = [
        kubectl.run("get", "pod", f"{g}-0", "-n", NAMESPACE, "-o", "jsonpath={.spec.nodeName}")
        for g in old
    ]
    deployment = Watch(kubectl, "kimi", NAME)
    wait(deployment.started, 30, "the watch")
    drained = kubectl.run("drain", *nodes, *DRAIN)
    assert all(f"node/{n} drained" in drained.splitlines() for n in nodes), drained
    ready = [int(e["object"]["status"].get("readyReplicas", 0)) for e in deployment.events()]
    assert min(ready) >= 2, ready

    def groups() -> dict[str, str]:
        found = kubectl.run("get", "lws", "-n", NAMESPACE, "-o", "json")
        return {g["metadata"]["name"]: g["metadata"]["uid"] for g in json.loads(found)["items"]}

    after = groups()
    assert len(after) == 2, after  # one start per group
    assert not set(after) & set(old), after
    kubectl.run("uncordon", *nodes)
    wait(
        lambda: not kubectl.run("get", *kd, "-o", "jsonpath={.status.evacuations}"),
        60,
        "the evacuations' end",
    )
    kubectl.run("wait", "--for=jsonpath={.status.readyReplicas}=2", *kd, TIMEOUT)
    assert groups() == after  # nothing made again, nothing restarted
    records = json.loads(kubectl.run("get", *kd, "-o", "jsonpath={.status.groups}"))
    assert [(g["restarts"], g.get("lastFailure")) for g in records] == [(0, None)] * 2


def test_without_evacuation_the_drain_takes_the_only_group(
    sandbox: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    """The checks above can fail: the budget lets the drain evict the leader at once, and the
    group is gone until the sandbox's LeaderWorkerSet recreates it elsewhere."""
    _, kubeconfig = sandbox
    kubectl = Kubectl(kubeconfig, io.StringIO(), tmp_path / "home")
    _deploy(kubectl, tmp_path, "--set", "evacuation.enabled=false")

    node, drained, problems, _ = _drain_watched(kubectl)
    assert f"pod/{OLD}-0 evicted" in drained
    assert f"node/{node} drained" in drained.splitlines(), drained  # stderr: its retries
    assert any("no group ready" in p for p in problems), problems
    assert any("went before a replacement was Ready" in p for p in problems), problems
