"""A bare LeaderWorkerSet for the tests of the sandbox's nodes, scheduler and group stand-in."""

from typing import Any

NS = "default"


def one_tray_group(name: str, size: int) -> dict[str, Any]:
    """A LeaderWorkerSet of `size` one-tray pods (4 GPUs each, no placement rules) in NS."""
    pod = {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 4}}}
            ]
        },
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {"size": size, "leaderTemplate": pod, "workerTemplate": pod},
        },
    }
