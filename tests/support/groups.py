"""TP groups on the embedded API server during a rollout: a kubelet loop that brings updated
groups up (or holds some down), and an audit of the groups Ready after every write."""

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.kubelet import mark_ready
from kimi_operator.embedded.server import ApiServer
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.resources import LEADER_WORKER_SET
from kimi_operator.rollout import group_of, group_ready, leader_image

Hold = Callable[[Mapping[str, Any]], bool]


@contextmanager
def kubelet(api: EmbeddedApiServer, namespace: str, hold: Hold | None = None) -> Iterator[None]:
    """Mark the groups in `namespace` Ready for their generation every 50 ms while in the block,
    except those `hold` picks (marked starting: never Ready)."""
    stop = threading.Event()
    client = Client(load_configuration(api.url))

    def loop() -> None:
        while not stop.wait(0.05):
            mark_ready(client, namespace, hold=hold or (lambda _: False))

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)
        client.close()


def images(client: Client, namespace: str) -> dict[str, str]:
    """name -> image of every LeaderWorkerSet in `namespace`."""
    return {
        g["metadata"]["name"]: leader_image(g) for g in client.list(LEADER_WORKER_SET, namespace)
    }


@dataclass
class Step:
    """The groups of each deployment right after one write."""

    ready: dict[str, int]  # deployment -> groups Ready for their current generation
    groups: dict[str, set[str]]  # deployment -> names of its LeaderWorkerSets
    images: dict[str, dict[str, str]]  # deployment -> group name -> image


@dataclass
class Audit:
    """Every write's aftermath, recorded on the server's thread while `armed`: the groups of one
    role (`g`: decode, `p`: prefill)."""

    deployments: tuple[str, ...]
    role: str = "g"
    armed: bool = False
    steps: list[Step] = field(default_factory=list)

    def __call__(self, server: ApiServer) -> None:
        if not self.armed:
            return
        groups = server.stored("leaderworkersets")
        step = Step({d: 0 for d in self.deployments}, {}, {})
        for group in groups:
            name = group["metadata"]["name"]
            for deployment in self.deployments:
                found = group_of(deployment, name)
                if found is None or found[0] != self.role:
                    continue
                step.ready[deployment] += group_ready(group)
                step.groups.setdefault(deployment, set()).add(name)
                step.images.setdefault(deployment, {})[name] = leader_image(group)
        self.steps.append(step)

    def least_ready(self, deployment: str) -> int:
        assert self.steps, "no write was audited"
        return min(step.ready[deployment] for step in self.steps)


def audited(api: EmbeddedApiServer, *deployments: str, role: str = "g") -> Audit:
    audit = Audit(deployments, role)
    api.observe(audit)
    return audit
