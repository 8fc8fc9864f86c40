"""DeleteOptions as kube-apiserver and the garbage collector carry them out, for the embedded API
server (embedded.server): its preconditions (`check_preconditions`), its propagationPolicy, and
the garbage collection after it (`Collector.collect_garbage`).

- **Background** (the default here): the object goes at once (unless it has finalizers); the
  collector then deletes what it owned.
- **Foreground**: the object gets a `deletionTimestamp` and the `foregroundDeletion` finalizer;
  the collector deletes its dependents (in the foreground too) and removes the finalizer once
  none that has `blockOwnerDeletion` is left; then the object goes, if no other finalizer holds
  it. A dependent created meanwhile is deleted as well.
- **Orphan**: the object gets a `deletionTimestamp` and the `orphan` finalizer; the collector
  removes the references to it from its dependents, then the finalizer.

A real collector works asynchronously; this one runs after every write while some object is
terminating (`Collector.settle`), so each step is a write a watch sees, in the real order.
"""

import datetime
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kmock

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
POLICIES = ("Background", "Foreground", "Orphan")
FINALIZER_OF = {"Foreground": FOREGROUND, "Orphan": ORPHAN}

# (resource, namespace, name): how kmock's store keys an object.
Key = tuple[Any, Any, Any]
# Sends a watch event: (resource, type, object).
Announce = Callable[[Any, str, dict[str, Any]], Awaitable[None]]


def propagation_policy(query: Mapping[str, str], body: Any) -> str:
    """The DELETE's policy, from the query or the DeleteOptions body (kubectl sends a body);
    422 for a value kube-apiserver does not know."""
    options = body if isinstance(body, Mapping) else {}
    policy = query.get("propagationPolicy") or options.get("propagationPolicy") or "Background"
    if policy not in POLICIES:
        supported = ", ".join(f'"{p}"' for p in POLICIES)
        message = f'propagationPolicy: Unsupported value: "{policy}": supported values: {supported}'
        raise kmock.KubernetesError(422, "Invalid", message)
    return str(policy)


def check_preconditions(body: Any, obj: Mapping[str, Any], kind: str, group: str) -> None:
    """DeleteOptions.preconditions as kube-apiserver checks them before it deletes (its
    `rest.BeforeDelete`): a uid, then a resourceVersion, other than the object's is refused with
    409 Conflict, the GroupResource named by the kind as kube-apiserver names it there."""
    options = body if isinstance(body, Mapping) else {}
    wanted = options.get("preconditions") or {}
    meta = obj["metadata"]
    uid, version = wanted.get("uid"), wanted.get("resourceVersion")
    if uid is not None and uid != meta.get("uid"):
        why = (
            f"the UID in the precondition ({uid}) does not match the UID in record "
            f"({meta.get('uid')}). The object might have been deleted and then recreated"
        )
    elif version is not None and version != meta.get("resourceVersion"):
        why = (
            f"the ResourceVersion in the precondition ({version}) does not match the "
            f"ResourceVersion in record ({meta.get('resourceVersion')}). The object might have "
            "been modified"
        )
    else:
        return
    name = meta.get("name", "")
    qualified = f"{kind}.{group}" if group else kind
    message = f'Operation cannot be fulfilled on {qualified} "{name}": {why}'
    details = {"name": name, "group": group, "kind": kind}
    raise kmock.KubernetesError(409, "Conflict", message, details)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _refers_to(obj: Mapping[str, Any], uid: str, *, blocking: bool = False) -> bool:
    refs = obj["metadata"].get("ownerReferences") or []
    return any(r.get("uid") == uid and (r.get("blockOwnerDeletion") or not blocking) for r in refs)


@dataclass
class Collector:
    """The deletions in progress in one store of objects (kmock's `objects`), and the garbage
    collector: what an object deleted owned goes after it."""

    objects: Any
    announce: Announce
    next_version: Callable[[], str]
    terminating: set[Key] = field(default_factory=set)  # keys with a deletionTimestamp
    # uids of the objects that exist: added by each create, recomputed by each collection.
    uids: set[str] = field(default_factory=set)

    async def delete(self, key: Key, obj: Any, policy: str) -> dict[str, Any]:
        """A DELETE of a stored object: gone now, or marked for its finalizers (the policy's
        added); the object as answered."""
        meta = obj.raw["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        wanted = FINALIZER_OF.get(policy)
        if wanted is not None and wanted not in finalizers:
            finalizers.append(wanted)
        if not finalizers:
            raw: dict[str, Any] = obj.raw
            obj.delete()
            await self.announce(key[0], "DELETED", raw)
            return raw
        change = {
            "deletionTimestamp": meta.get("deletionTimestamp") or _now(),
            "deletionGracePeriodSeconds": 0,
            "finalizers": finalizers,
            "resourceVersion": self.next_version(),
        }
        obj.patch({"metadata": change})
        self.terminating.add(key)
        await self.announce(key[0], "MODIFIED", obj.raw)
        marked: dict[str, Any] = obj.raw
        return marked

    async def settle(self) -> bool:
        """One pass of the collector over the terminating objects; whether it changed any."""
        changed = False
        for key in list(self.terminating):
            obj = self.objects[key] if key in self.objects else None  # noqa: SIM401 (no .get)
            if obj is None or obj.deleted:
                self.terminating.discard(key)
                continue
            changed |= await self._settle_one(key, obj)
        return changed

    def _dependents(self, uid: str) -> list[tuple[Key, Any]]:
        return [
            (key, obj)
            for key, obj in self.objects.items()
            if not obj.deleted and _refers_to(obj.raw, uid)
        ]

    async def _settle_one(self, key: Key, obj: Any) -> bool:
        """Orphan or delete its dependents, remove the finalizers that are done; whether it
        wrote anything."""
        meta = obj.raw["metadata"]
        uid, finalizers = meta["uid"], list(meta.get("finalizers") or [])
        wrote = False
        if ORPHAN in finalizers:
            for dependent_key, dependent in self._dependents(uid):
                refs = dependent.raw["metadata"].get("ownerReferences") or []
                kept = [r for r in refs if r.get("uid") != uid]
                change = {"ownerReferences": kept or None, "resourceVersion": self.next_version()}
                dependent.patch({"metadata": change})
                await self.announce(dependent_key[0], "MODIFIED", dependent.raw)
                wrote = True
            finalizers.remove(ORPHAN)
        if FOREGROUND in finalizers:
            for dependent_key, dependent in self._dependents(uid):
                if not dependent.raw["metadata"].get("deletionTimestamp"):
                    await self.delete(dependent_key, dependent, "Foreground")
                    wrote = True
            if not any(_refers_to(d.raw, uid, blocking=True) for _, d in self._dependents(uid)):
                finalizers.remove(FOREGROUND)
        if finalizers == list(meta.get("finalizers") or []):
            return wrote
        if finalizers:
            change = {"finalizers": finalizers, "resourceVersion": self.next_version()}
            obj.patch({"metadata": change})
            await self.announce(key[0], "MODIFIED", obj.raw)
            return True
        raw = obj.raw
        obj.delete()
        self.terminating.discard(key)
        await self.announce(key[0], "DELETED", raw)
        return True

    async def collect_orphan(self, key: Key) -> None:
        """Delete a just created object whose owner is already gone (a race the real garbage
        collector also settles)."""
        if key not in self.objects or self.objects[key].deleted:
            return
        raw = self.objects[key].raw
        owners = {ref.get("uid") for ref in raw["metadata"].get("ownerReferences") or []}
        if owners and not owners & self.uids:
            self.objects[key].delete()
            await self.announce(key[0], "DELETED", raw)

    def _live_uids(self) -> set[str]:
        self.uids = {obj.raw["metadata"]["uid"] for obj in self.objects.values() if not obj.deleted}
        return self.uids

    async def collect_garbage(self) -> None:
        """Delete every object whose owners are all gone, until none is left; an object that
        keeps some owner loses its references to the others (as Kubernetes' collector does)."""
        while True:
            if await self.settle():
                continue
            alive = self._live_uids()
            orphans = []
            for key, obj in self.objects.items():
                if obj.deleted:
                    continue
                raw = obj.raw
                refs = raw["metadata"].get("ownerReferences") or []
                kept = [ref for ref in refs if ref.get("uid") in alive]
                if refs and not kept:
                    orphans.append((key, raw))
                elif len(kept) < len(refs):
                    change = {"ownerReferences": kept, "resourceVersion": self.next_version()}
                    obj.patch({"metadata": change})
                    await self.announce(key[0], "MODIFIED", obj.raw)
            if not orphans:
                return
            for key, raw in orphans:
                self.objects[key].delete()
                await self.announce(key[0], "DELETED", raw)
