"""Idempotent, minimal apply: create what is missing, patch what differs, write nothing otherwise.

"Differs" is judged like `kubectl apply` (k8s/merge.py, which decides it without I/O): every
field the operator sets must have its value in the cluster (fields the API server or other
controllers add are left alone), and fields the operator set last time but no longer sets are
removed. What was last applied is kept in an annotation on the child.
"""

from collections.abc import Callable, Mapping
from typing import Any

from kimi_operator.k8s.client import Client
from kimi_operator.k8s.errors import NotOwned, OwnerTerminating
from kimi_operator.k8s.merge import Applied, Write, adoptable, drift_patch, owned_by
from kimi_operator.k8s.resources import BY_KIND

OWNER_NOT_CURRENT = "the owner is gone or being deleted"  # since this reconcile read it


def _label(obj: Mapping[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def owner_is_current(client: Client, owner: Mapping[str, Any]) -> bool:
    """Read afresh: whether `owner` still exists, as the same object, and is not being deleted.
    Asked before adopting an orphan (as client-go's ControllerRefManager does): the reconcile's
    copy of the owner may predate an orphan deletion, whose orphans must stay orphans."""
    meta = owner["metadata"]
    found = client.get(BY_KIND[owner["kind"]], meta["namespace"], meta["name"])
    found_meta = (found or {}).get("metadata") or {}
    return found_meta.get("uid") == meta["uid"] and not found_meta.get("deletionTimestamp")


def apply_child(
    client: Client,
    desired: Mapping[str, Any],
    owner_uid: str,
    into: Applied,
    *,
    likely_missing: bool = False,
    owner_current: Callable[[], bool] = lambda: True,
) -> None:
    """Create, patch or leave alone one child. `likely_missing` (a deployment never reconciled
    before): try to create first and read only if the name is taken. `owner_current`: asked
    before a child found missing is created again or an orphan adopted (a garbage collector
    may have removed it because the owner is being deleted since this reconcile read it)."""
    resource = BY_KIND[desired["kind"]]
    namespace, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
    if likely_missing and client.create_if_absent(resource, desired):
        into.live.append(dict(desired))
        into.created.append(_label(desired))
        return
    actual = client.get(resource, namespace, name)
    if actual is None:
        if not owner_current():
            raise OwnerTerminating(
                f"{resource.kind} {namespace}/{name} not created: {OWNER_NOT_CURRENT}"
            )
        into.live.append(client.create(resource, desired))
        into.created.append(_label(desired))
        return
    if not owned_by(actual, owner_uid):
        if not adoptable(actual, desired):
            raise NotOwned(
                f"{resource.kind} {namespace}/{name} exists and is not owned by this "
                "KimiDeployment; rename the deployment or delete that object"
            )
        if not owner_current():
            raise OwnerTerminating(
                f"{resource.kind} {namespace}/{name} not adopted: {OWNER_NOT_CURRENT}"
            )
    patch = drift_patch(actual, desired)
    if patch is None:
        into.live.append(actual)
        return
    # Decided from this read: refused (409) if the object changed since, or was made anew.
    patch["metadata"]["resourceVersion"] = actual["metadata"]["resourceVersion"]
    into.live.append(client.patch(resource, namespace, name, patch))
    into.patched.append(_label(desired))


def perform(client: Client, write: Write, into: Applied) -> None:
    """Send `write`, recorded in `into` (a create of a shared object already there: nothing)."""
    label = f"{write.resource.kind}/{write.name}"
    if write.verb == "delete":
        if client.delete(
            write.resource, write.namespace, write.name, precondition=write.precondition
        ):
            into.deleted.append(label)
        return
    assert write.body is not None  # create and patch carry one
    if write.verb == "create":
        if not write.exists_ok:
            client.create(write.resource, dict(write.body))
            into.created.append(label)
        elif client.create_if_absent(write.resource, write.body):
            into.created.append(label)
        return
    client.patch(write.resource, write.namespace, write.name, dict(write.body))
    into.patched.append(label)
