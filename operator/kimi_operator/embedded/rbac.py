"""Authentication and RBAC as kube-apiserver does them, from the ClusterRoles, Roles and their
bindings stored in the embedded server (the chart's, rendered by `helm template`).

A request with a bearer token the server issued is that user's (a ServiceAccount's); one without a
token is the test's own admin (`system:masters`, allowed everything, as kube-apiserver's loopback
client is); an unknown token is answered 401. Every check made (and its verdict) is recorded, so
that a test can compare what the operator needed with what the chart grants.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

RBAC_GROUP = "rbac.authorization.k8s.io"
ADMIN = "system:admin"
MASTERS = "system:masters"


@dataclass(frozen=True)
class User:
    name: str
    groups: frozenset[str]

    @property
    def admin(self) -> bool:
        return MASTERS in self.groups


ADMIN_USER = User(ADMIN, frozenset({MASTERS, "system:authenticated"}))


def service_account(namespace: str, name: str) -> User:
    return User(
        f"system:serviceaccount:{namespace}:{name}",
        frozenset(
            {
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            }
        ),
    )


@dataclass(frozen=True)
class Attributes:
    """What a resource request asks for (kube-apiserver's RequestInfo); `resource` includes the
    subresource (`kimideployments/status`)."""

    verb: str
    group: str
    resource: str
    namespace: str  # "" for cluster-scoped requests
    name: str = ""

    def __str__(self) -> str:
        scope = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        return f'{self.verb} resource "{self.resource}" in API group "{self.group}" {scope}'


def request_attributes(method: str, path: str, query: Mapping[str, str]) -> Attributes | None:
    """The attributes of a request; None for non-resource URLs (discovery), which every
    authenticated user may read."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    name = rest[1] if len(rest) >= 2 else ""
    if method == "GET":
        watching = query.get("watch", "").lower() in {"true", "1"}
        verb = "watch" if watching else ("get" if name else "list")
    else:
        verbs = {"POST": "create", "PUT": "update", "PATCH": "patch"}
        verb = verbs.get(method) or ("delete" if name else "deletecollection")
    return Attributes(verb, group, resource, namespace, name)


def _matches(rule: Mapping[str, Any], wanted: Attributes) -> bool:
    names = rule.get("resourceNames") or []
    return (
        wanted.group in rule.get("apiGroups", [])
        and wanted.resource in rule.get("resources", [])
        and wanted.verb in rule.get("verbs", [])
        and (not names or wanted.name in names)
    )


def _bound(binding: Mapping[str, Any], user: User) -> bool:
    for subject in binding.get("subjects") or []:
        kind, name = subject.get("kind"), subject.get("name")
        account = f"system:serviceaccount:{subject.get('namespace')}:{name}"
        if (
            (kind == "Group" and name in user.groups)
            or (kind == "User" and name == user.name)
            or (kind == "ServiceAccount" and account == user.name)
        ):
            return True
    return False


class Authorizer:
    """RBAC over a snapshot of the stored roles and bindings (no wildcards: the chart has none,
    and a test refuses them)."""

    def __init__(self, objects: Iterable[Mapping[str, Any]]) -> None:
        by_kind: dict[str, list[Mapping[str, Any]]] = {}
        for obj in objects:
            by_kind.setdefault(obj["kind"], []).append(obj)
        self._cluster_roles = {r["metadata"]["name"]: r for r in by_kind.get("ClusterRole", [])}
        self._roles = {
            (r["metadata"].get("namespace", ""), r["metadata"]["name"]): r
            for r in by_kind.get("Role", [])
        }
        self._cluster_bindings = by_kind.get("ClusterRoleBinding", [])
        self._bindings = by_kind.get("RoleBinding", [])

    def _rules(self, user: User, namespace: str) -> Iterable[Mapping[str, Any]]:
        for binding in self._cluster_bindings:
            if _bound(binding, user):
                yield from self._cluster_roles.get(binding["roleRef"]["name"], {}).get("rules", [])
        if not namespace:
            return
        for binding in self._bindings:
            if binding["metadata"].get("namespace") != namespace or not _bound(binding, user):
                continue
            ref = binding["roleRef"]
            role = (
                self._cluster_roles.get(ref["name"], {})
                if ref["kind"] == "ClusterRole"
                else self._roles.get((namespace, ref["name"]), {})
            )
            yield from role.get("rules", [])

    def allowed(self, user: User, wanted: Attributes) -> bool:
        return user.admin or any(_matches(r, wanted) for r in self._rules(user, wanted.namespace))

    def referred_rules(self, ref: Mapping[str, Any], namespace: str) -> list[Mapping[str, Any]]:
        """The rules of the Role (in `namespace`) or ClusterRole a binding's roleRef names."""
        role = (
            self._cluster_roles.get(ref.get("name", ""), {})
            if ref.get("kind") == "ClusterRole"
            else self._roles.get((namespace, ref.get("name", "")), {})
        )
        return list(role.get("rules", []))


def escalation_refusal(
    user: User,
    rules: Iterable[Mapping[str, Any]],
    namespace: str,
    allowed: Callable[[Attributes], bool],
) -> str:
    """Why kube-apiserver refuses `user` writing a Role with these `rules`, or a binding to a
    role with them, in `namespace` ("" at the cluster scope): every permission granted must be
    held (its RBAC escalation check); "" when they all are. kube-apiserver also lets through
    users allowed the `escalate` (roles) or `bind` (bindings) verb; the chart grants neither, so
    they are not asked for here (an ask would be recorded as a permission the operator needs)."""
    missing = []
    for rule in rules:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule.get("verbs", []):
                    for name in rule.get("resourceNames") or [""]:
                        if not allowed(Attributes(verb, group, resource, namespace, name)):
                            missing.append(
                                f'{{APIGroups:["{group}"], Resources:["{resource}"], '
                                f'Verbs:["{verb}"]}}'
                            )
    if not missing:
        return ""
    groups = " ".join(f'"{g}"' for g in sorted(user.groups))
    return (
        f'user "{user.name}" (groups=[{groups}]) is attempting to grant RBAC permissions not '
        "currently held:\n" + "\n".join(missing)
    )


def forbidden(wanted: Attributes, why: str) -> tuple[str, dict[str, Any]]:
    """(message, details) of the 403 kube-apiserver answers: `<resource> "<name>" is forbidden:
    <why>`."""
    resource = wanted.resource.split("/", 1)[0]
    qualified = f"{resource}.{wanted.group}" if wanted.group else resource
    named = f'{qualified} "{wanted.name}"' if wanted.name else qualified
    details = {"group": wanted.group, "kind": resource} | (
        {"name": wanted.name} if wanted.name else {}
    )
    return f"{named} is forbidden: {why}", details


def owner_references_refusal(
    new: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    this: Attributes,
    allowed: Callable[[Attributes], bool],
    plural_of: Callable[[str, str], str | None],
) -> str:
    """Why the OwnerReferencesPermissionEnforcement admission plugin refuses writing `new` over
    `old` (None: a create) for a user who is `allowed` some attributes; "" when it does not.
    Changing an object's ownerReferences needs `delete` on it (`this`), unless creating it; a
    reference newly blocking its owner's deletion needs `update` on the owner's `finalizers`."""
    refs = (new.get("metadata") or {}).get("ownerReferences") or []
    before = ((old or {}).get("metadata") or {}).get("ownerReferences") or []
    if refs == before:
        return ""
    if old is not None and not allowed(this):
        return "cannot set an ownerRef on a resource you can't delete: , <nil>"
    blocking_before = {r.get("uid") for r in before if r.get("blockOwnerDeletion")}
    for ref in refs:
        if not ref.get("blockOwnerDeletion") or ref.get("uid") in blocking_before:
            continue
        version, kind = ref.get("apiVersion", ""), ref.get("kind", "")
        plural = plural_of(version, kind)
        if plural is None:
            return (
                "cannot set blockOwnerDeletion in this case because cannot find RESTMapping for "
                f'APIVersion {version} Kind {kind}: no matches for kind "{kind}" in version '
                f'"{version}"'
            )
        group = version.rpartition("/")[0]
        owner = Attributes("update", group, f"{plural}/finalizers", this.namespace, ref["name"])
        if not allowed(owner):
            return (
                "cannot set blockOwnerDeletion if an ownerReference refers to a resource you "
                "can't set finalizers on: , <nil>"
            )
    return ""
