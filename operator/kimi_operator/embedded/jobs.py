"""A stand-in for the Job controller, a kubelet and a storage provisioner, for the weights Jobs
(builders/weights.py) on the embedded API server: the Jobs run **for real**.

Each claim is bound to a directory of its own under `volumes`; each attempt of a Job runs the
Job's container command (`python -m kimi_kernels.weights ...`) as a local process with the Job's
arguments and environment (Secrets read from the API server, as a kubelet reads them), the
claim's directory in place of its mount, `HF_ENDPOINT` set to the (fake) hub, and a file in place
of `/dev/termination-log`. Each attempt becomes a Pod with the termination message, and the Job's
status is written as the Job controller writes it (`active`, then `succeeded` with `Complete` or
`failed` with `Failed`/`BackoffLimitExceeded` after `backoffLimit` retries). Attempts run back to
back, without the controller's backoff delay.
"""

import base64
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimi_operator.builders.weights import JOB_NAME_LABEL, TERMINATION_LOG
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import JOB, PERSISTENT_VOLUME_CLAIM, POD, Resource

SECRET = Resource("", "v1", "secrets", "Secret")
ATTEMPT_TIMEOUT_S = 120.0


@dataclass
class Attempt:
    job: str
    exit_code: int
    output: str  # stdout and stderr


@dataclass
class JobRunner:
    client: Client
    endpoint: str  # HF_ENDPOINT of every Job: the fake hub
    volumes: Path  # claim <namespace>/<name> is the directory volumes/<namespace>/<name>
    # False: no storage provisioner (claims stay Pending, and so do the pods of their Jobs).
    provision: bool = True
    attempts: list[Attempt] = field(default_factory=list)

    def claim_dir(self, namespace: str, name: str) -> Path:
        return self.volumes / namespace / name

    def bind_claims(self) -> set[tuple[str, str]]:
        """Bind every claim (when provisioning); (namespace, name) of the bound ones."""
        bound = set()
        for claim in self.client.list(PERSISTENT_VOLUME_CLAIM):
            meta = claim["metadata"]
            if self.provision:
                bound.add((meta["namespace"], meta["name"]))
            if not self.provision or (claim.get("status") or {}).get("phase") == "Bound":
                continue
            spec = claim["spec"]
            self.claim_dir(meta["namespace"], meta["name"]).mkdir(parents=True, exist_ok=True)
            status = {
                "phase": "Bound",
                "accessModes": spec["accessModes"],
                "capacity": spec["resources"]["requests"],
            }
            self.client.patch(
                PERSISTENT_VOLUME_CLAIM,
                meta["namespace"],
                meta["name"],
                {"status": status},
                subresource="status",
            )
        return bound

    def run_pending(self) -> list[str]:
        """Bind the claims, run every Job not finished yet whose claims are bound (a pod with an
        unbound claim is not scheduled); `namespace/name` of each run."""
        bound = self.bind_claims()
        ran = []
        for job in self.client.list(JOB):
            conditions = (job.get("status") or {}).get("conditions") or []
            namespace = job["metadata"]["namespace"]
            claims = {
                (namespace, v["persistentVolumeClaim"]["claimName"])
                for v in job["spec"]["template"]["spec"].get("volumes") or []
            }
            finished = any(c.get("type") in ("Complete", "Failed") for c in conditions)
            if not finished and claims <= bound:
                self._run(job)
                ran.append(f"{job['metadata']['namespace']}/{job['metadata']['name']}")
        return ran

    def _env(self, namespace: str, container: Mapping[str, Any]) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", ""), "HF_ENDPOINT": self.endpoint}
        env["HF_HUB_DISABLE_TELEMETRY"] = "1"
        for item in container.get("env") or []:
            ref = (item.get("valueFrom") or {}).get("secretKeyRef")
            if ref is None:
                env[item["name"]] = item.get("value", "")
                continue
            secret = self.client.get(SECRET, namespace, ref["name"]) or {}
            data = secret.get("data") or {}
            if ref["key"] in data:
                env[item["name"]] = base64.b64decode(data[ref["key"]]).decode()
        return env

    def _args(self, namespace: str, pod: Mapping[str, Any], log: Path) -> list[str]:
        """The container's arguments with mounts and the termination log mapped to local paths."""
        (container,) = pod["containers"]
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod.get("volumes") or []
        }
        mounts = {
            m["mountPath"]: str(self.claim_dir(namespace, claims[m["name"]]))
            for m in container.get("volumeMounts") or []
        }
        mounts[TERMINATION_LOG] = str(log)
        args: list[str] = [mounts.get(arg, arg) for arg in container["args"]]
        return args

    def _run(self, job: Mapping[str, Any]) -> None:
        meta = job["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        pod_spec = job["spec"]["template"]["spec"]
        (container,) = pod_spec["containers"]
        assert container["command"] == ["python3", "-m", "kimi_kernels.weights"], container
        self._job_status(job, {"active": 1})
        failed = 0
        for attempt in range(int(job["spec"].get("backoffLimit", 6)) + 1):
            with tempfile.TemporaryDirectory(prefix="kimi-job-") as tmp:
                log = Path(tmp) / "termination-log"
                log.touch()
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "kimi_kernels.weights",
                        *self._args(namespace, pod_spec, log),
                    ],
                    env=self._env(namespace, container),
                    capture_output=True,
                    text=True,
                    timeout=ATTEMPT_TIMEOUT_S,
                    check=False,
                )
                message = log.read_text()
            self.attempts.append(Attempt(name, done.returncode, done.stdout + done.stderr))
            self._pod(job, attempt, done.returncode, message)
            if done.returncode == 0:
                complete = {"type": "Complete", "status": "True", "reason": "Completed"}
                self._job_status(job, {"active": 0, "succeeded": 1, "conditions": [complete]})
                return
            failed += 1
            self._job_status(job, {"active": 1, "failed": failed})
        why = {
            "type": "Failed",
            "status": "True",
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        }
        self._job_status(job, {"active": 0, "failed": failed, "conditions": [why]})

    def _job_status(self, job: Mapping[str, Any], status: dict[str, Any]) -> None:
        meta = job["metadata"]
        self.client.patch(
            JOB, meta["namespace"], meta["name"], {"status": status}, subresource="status"
        )

    def _pod(self, job: Mapping[str, Any], attempt: int, code: int, message: str) -> None:
        meta = job["metadata"]
        name = f"{meta['name']}-{attempt}"
        template = job["spec"]["template"]
        labels = {**template["metadata"].get("labels", {}), JOB_NAME_LABEL: meta["name"]}
        owner = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": labels,
                "ownerReferences": [owner],
            },
            "spec": template["spec"],
        }
        self.client.create(POD, pod)
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "message": message,
        }
        status = {
            "phase": "Succeeded" if code == 0 else "Failed",
            "containerStatuses": [{"name": "download", "state": {"terminated": terminated}}],
        }
        self.client.patch(POD, meta["namespace"], name, {"status": status}, subresource="status")


@contextmanager
def running(runner: JobRunner, every_s: float = 0.05) -> Iterator[JobRunner]:
    """Run pending Jobs in a thread of their own while in the block."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        while not stop.is_set():
            try:
                runner.run_pending()
            except Exception as error:  # reported when the block ends
                errors.append(error)
                return
            stop.wait(every_s)

    thread = threading.Thread(target=loop, name="kimi-jobs", daemon=True)
    thread.start()
    try:
        yield runner
    finally:
        stop.set()
        thread.join()
    if errors:
        raise errors[0]
