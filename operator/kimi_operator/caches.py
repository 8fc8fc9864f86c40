"""The weights caches of one reconcile (docs/weights.md), as pure functions of what it observed
(reconcile/observe.py reads, reconcile/act.py writes): each Hugging Face revision resolved to a
commit once (by a Job; recorded in status), the shared claims and download Jobs to apply, and
whether the weights are ready, reported as the `WeightsReady` condition.

Sharing is done with ownerReferences: each deployment using a cache adds a non-controller
reference to its claim and download Job, so Kubernetes' garbage collector deletes them when the
last of those deployments is deleted. A deployment that stops using a cache (its source changed)
removes its reference, and deletes the object if it was the last. `retain` marks the claim and
takes every reference off it: nobody deletes it from then on but a person.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kimi_operator import conditions as cond
from kimi_operator.api.problem import Problem
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.api.status import WeightsStatus
from kimi_operator.builders.meta import MANAGER
from kimi_operator.builders.weights import (
    CACHE_COMPONENT,
    JOB_NAME_LABEL,
    RETAIN_ANNOTATION,
    cache_name,
    compile_cache_claim,
    hf_sources,
    resolve_job_name,
)
from kimi_operator.k8s.merge import Write, owner_reference
from kimi_operator.k8s.resources import BY_KIND, JOB
from kimi_operator.rollout import epoch

CACHE_SELECTOR = (
    f"app.kubernetes.io/managed-by={MANAGER},app.kubernetes.io/component={CACHE_COMPONENT}"
)
# While a Job runs, look again this often: a running pod's progress shows nowhere that is watched.
POLL_S = 30.0
# A claim still without a volume after this long: StorageUnavailable, not just ClaimPending.
CLAIM_PENDING_LIMIT_S = 600.0
# kube-apiserver's ResourceQuota admission refuses a create with 403 and this in the message.
QUOTA_REFUSAL = "exceeded quota"


def recorded(kd: KimiDeployment, status: Mapping[str, Any]) -> dict[str, WeightsStatus]:
    """The resolutions in `status` that still match the spec's repository and revision (a spec
    change elsewhere never resolves, nor downloads, again). The claim follows the files too."""
    by_role = {w.get("role"): w for w in status.get("weights") or []}
    out: dict[str, WeightsStatus] = {}
    for role, source in hf_sources(kd):
        was = by_role.get(role)
        if was and (was.get("repo"), was.get("revision")) == (source.repo, source.revision):
            commit = was["commit"]
            out[role] = WeightsStatus.model_validate(
                {**was, "claimName": cache_name(source, commit)}
            )
    return out


def _conditions(job: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    conditions = (job.get("status") or {}).get("conditions") or []
    return {c.get("type", ""): c for c in conditions if c.get("status") == "True"}


def termination_message(pods: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a Job's newest pod with a termination message said (the downloader's progress and
    outcome as JSON); {} when none has one yet. `pods`: the Job's pods (`job_pods`)."""
    ordered = sorted(
        pods, key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"])
    )
    for pod in reversed(ordered):
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            state = container.get("state") or {}
            text = (state.get("terminated") or {}).get("message")
            if text:
                try:
                    message = json.loads(text)
                except ValueError:
                    return {"reason": text}
                return message if isinstance(message, dict) else {}
    return {}


def job_pods(job: Mapping[str, Any]) -> str:
    """The label selector of a Job's pods."""
    return f"{JOB_NAME_LABEL}={job['metadata']['name']}"


def completed(job: Mapping[str, Any]) -> bool:
    return "Complete" in _conditions(job)


def finished(job: Mapping[str, Any] | None) -> bool:
    """Whether a Job completed or failed (only then its pods' termination message counts)."""
    return job is not None and bool(_conditions(job))


def unresolved(kd: KimiDeployment, status: Mapping[str, Any]) -> list[str]:
    """The names of the resolve Jobs whose answer `status` does not record yet."""
    done = recorded(kd, status)
    return [resolve_job_name(kd, role, s) for role, s in hf_sources(kd) if role not in done]


@dataclass
class Weights:
    """What a reconcile found of the deployment's weights caches."""

    resolved: dict[str, WeightsStatus]
    ready: bool = True
    # Downloading or resolving: not ready yet, not a failure.
    waiting: list[Problem] = field(default_factory=list)
    failed: list[Problem] = field(default_factory=list)

    def condition(self) -> tuple[cond.Status, str, str]:
        if self.failed:
            return "False", self.failed[0].reason, "; ".join(p.message for p in self.failed)
        if self.waiting:
            return "False", self.waiting[0].reason, "; ".join(p.message for p in self.waiting)
        if not self.ready:  # the reconcile stopped before it could look
            return "Unknown", "NotObserved", "the weights caches could not be read"
        if not self.resolved:
            return "True", "ClaimGiven", "the weights are on the claims the spec names"
        held = ", ".join(f"{w.repo}@{w.commit} in {w.claim_name}" for w in self.resolved.values())
        return "True", "Downloaded", f"downloaded and verified: {held}"


def _failure(job: Mapping[str, Any], message: Mapping[str, Any]) -> str:
    why = _conditions(job)["Failed"]
    reason = message.get("reason") or "no termination message"
    return f"Job {job['metadata']['name']} failed ({why.get('reason', 'Failed')}): {reason}"


# A resolve Job as observed: the Job (None: not there) and its pods' termination message.
Found = tuple[Mapping[str, Any] | None, Mapping[str, Any]]


def resolve(kd: KimiDeployment, status: Mapping[str, Any], jobs: Mapping[str, Found]) -> Weights:
    """The resolutions recorded, plus those a finished resolve Job now gives. `jobs`: the resolve
    Jobs of `unresolved` by name, as found."""
    weights = Weights(recorded(kd, status))
    for role, source in hf_sources(kd):
        if role in weights.resolved:
            continue
        weights.ready = False
        name = resolve_job_name(kd, role, source)
        job, message = jobs.get(name, (None, {}))
        done = _conditions(job) if job is not None else {}
        if job is None or not done:
            where = f"{source.repo}@{source.revision}"
            weights.waiting.append(Problem("Resolving", f"Job {name} resolves {where}"))
            continue
        if "Failed" in done:
            weights.failed.append(Problem("ResolveFailed", _failure(job, message)))
        elif "Complete" in done and message.get("commit"):
            commit = str(message["commit"])
            weights.resolved[role] = WeightsStatus(
                role=role,
                repo=source.repo,
                revision=source.revision,
                commit=commit,
                bytes=int(message.get("bytesTotal", 0)),
                claim_name=cache_name(source, commit),
            )
        else:
            why = f"Job {name} completed without a commit in its termination message"
            weights.failed.append(Problem("ResolveFailed", why))
    return weights


def _progress(message: Mapping[str, Any]) -> str:
    if "filesTotal" not in message:
        return "running"
    return (
        f"{message.get('filesDone', 0)} of {message['filesTotal']} files, "
        f"{message.get('bytesDone', 0)} of {message.get('bytesTotal', 0)} bytes "
        f"(as its last attempt ended: {message.get('phase', '')})"
    )


def downloads(
    weights: Weights,
    live: Sequence[Mapping[str, Any]],
    messages: Mapping[str, Mapping[str, Any]],
    *,
    now: str,
) -> None:
    """Ready once every download Job completed; a failed one fails the weights. `live`: the
    claims and Jobs as they are once applied (same name per cache); `messages`: the termination
    messages of their Jobs' pods by Job name (none for a Job just created); `now` as the status
    writes times."""
    claims = {
        obj["metadata"]["name"]: obj for obj in live if obj["kind"] == "PersistentVolumeClaim"
    }
    phases = {name: (c.get("status") or {}).get("phase", "Pending") for name, c in claims.items()}
    for job in (obj for obj in live if obj["kind"] == JOB.kind):
        done = _conditions(job)
        if "Complete" in done:
            continue
        weights.ready = False
        name = job["metadata"]["name"]
        message = messages.get(name, {})
        if "Failed" in done:
            weights.failed.append(Problem("DownloadFailed", _failure(job, message)))
        elif phases.get(name) == "Pending" and not message:
            weights.waiting.append(_pending(claims[name], now))
        else:
            weights.waiting.append(Problem("Downloading", f"Job {name}: {_progress(message)}"))


def _pending(claim: Mapping[str, Any], now: str) -> Problem:
    """A claim with no volume yet: ClaimPending (a StorageClass that binds on first use waits for
    the Job's pod), then StorageUnavailable once it has waited longer than any provisioner
    should (CLAIM_PENDING_LIMIT_S)."""
    meta = claim["metadata"]
    name = meta["name"]
    since, at = epoch(meta.get("creationTimestamp") or ""), epoch(now)
    waited = at - since if since is not None and at is not None else 0.0
    if waited > CLAIM_PENDING_LIMIT_S:
        storage_class = claim["spec"].get("storageClassName") or "the default StorageClass"
        return Problem(
            "StorageUnavailable",
            f"claim {name} has been Pending for {waited / 60:.0f} min: {storage_class} provisioned "
            f"no volume for it (none left, or no provisioner); kubectl describe pvc {name}",
        )
    return Problem(
        "ClaimPending",
        f"claim {name} is Pending: no volume bound yet (its StorageClass provisions none, "
        f"or waits for the Job's pod); kubectl describe pvc {name}",
    )


def terminating(obj: Mapping[str, Any]) -> Problem | None:
    """A shared cache being deleted (its last user let go of it, or a person deleted it; a claim
    stays while a pod mounts it): never joined, nor mounted by a new pod (they would wait for a
    claim that is going away). It is made anew once it is gone."""
    meta = obj["metadata"]
    if not meta.get("deletionTimestamp"):
        return None
    return Problem(
        "CacheTerminating",
        f"{obj['kind']} {meta['name']} is being deleted (since {meta['deletionTimestamp']}): not "
        "used until it is gone, then made anew; a pod that still mounts it keeps it "
        f"(kubectl describe {obj['kind'].lower()} {meta['name']})",
    )


def _users(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    refs: list[dict[str, Any]] = obj["metadata"].get("ownerReferences") or []
    return refs


def shared_write(
    desired: Mapping[str, Any],
    actual: Mapping[str, Any] | None,
    owner: Mapping[str, Any],
    retain: bool,
) -> Write | None:
    """Create a cache object, or add this deployment to the users of the one there (`actual`);
    never patch its spec (a claim's and a Job's are mostly immutable, and other users share it).
    None: nothing to write."""
    resource = BY_KIND[desired["kind"]]
    meta = desired["metadata"]
    mine = {**owner_reference(owner), "controller": False}
    kept = retain and resource.kind == "PersistentVolumeClaim"
    new = {**desired, "metadata": {**meta, "ownerReferences": [] if kept else [mine]}}
    if kept:
        new["metadata"]["annotations"] = {**meta.get("annotations", {}), RETAIN_ANNOTATION: "true"}
    if actual is None:
        # Kept: nobody's reference to add, so one made meanwhile by another deployment is as good.
        return Write("create", resource, meta["namespace"], meta["name"], new, exists_ok=kept)
    annotations = actual["metadata"].get("annotations") or {}
    refs = _users(actual)
    if kept and (refs or RETAIN_ANNOTATION not in annotations):
        change: dict[str, Any] = {
            "annotations": {RETAIN_ANNOTATION: "true"},
            "ownerReferences": None,
        }
    elif not kept and RETAIN_ANNOTATION not in annotations and mine["uid"] not in _uids(refs):
        change = {"ownerReferences": [*refs, mine]}
    else:
        return None
    change["resourceVersion"] = actual["metadata"].get("resourceVersion")
    return Write("patch", resource, meta["namespace"], meta["name"], {"metadata": change})


def retained(kd: KimiDeployment, weights: Weights) -> set[str]:
    """The claims kept for good once made (`cache.retain`): nobody's reference is put on them.
    The namespace's compile-cache claim always: every deployment of the namespace may use it, and
    joining it by reference would have them all patch one object (conflicts without end under
    churn); it is created once and deleted by a person."""
    compile_cache = compile_cache_claim(kd)
    return {
        weights.resolved[role].claim_name
        for role, source in hf_sources(kd)
        if source.cache.retain and role in weights.resolved
    } | ({compile_cache["metadata"]["name"]} if compile_cache is not None else set())


def _uids(refs: Sequence[Mapping[str, Any]]) -> set[str]:
    return {ref.get("uid", "") for ref in refs}


def releases(
    listed: Mapping[str, Sequence[Mapping[str, Any]]], uid: str, keep: set[tuple[str, str]]
) -> list[Write]:
    """Stop using the caches (`listed` by CACHE_SELECTOR, by kind) this deployment uses but no
    longer wants: take its reference off, and delete the object when it was the last user. Both
    are conditional on the object as listed: a deployment that joined meanwhile makes the
    delete fail (409), never lose the cache it has just joined."""
    out = []
    for kind, obj in ((kind, obj) for kind, objs in listed.items() for obj in objs):
        resource = BY_KIND[kind]
        meta = obj["metadata"]
        name, refs = meta["name"], _users(obj)
        if (kind, name) in keep or uid not in _uids(refs):
            continue
        others = [ref for ref in refs if ref.get("uid") != uid]
        if others:
            change = {"ownerReferences": others, "resourceVersion": meta.get("resourceVersion")}
            out.append(Write("patch", resource, meta["namespace"], name, {"metadata": change}))
        else:
            out.append(Write.delete(resource, obj))
    return out
