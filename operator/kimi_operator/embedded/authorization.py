"""Who a request of the embedded API server comes from and what it may do: a bearer token stands
for a ServiceAccount (no token: the cluster admin), every request is authorized by the stored RBAC
objects (embedded.rbac), and a write is refused when its owner references (the
OwnerReferencesPermissionEnforcement admission plugin) or the roles it grants (RBAC's escalation
check) exceed what its writer holds. Every decision about a token's user is kept (`Check`): the
chart's RBAC is compared with them."""

import contextvars
import dataclasses
import uuid
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import kmock

from kimi_operator.embedded import rbac

# The user of the request being served (set by `ApiServer.__call__`).
CURRENT_USER: contextvars.ContextVar[rbac.User] = contextvars.ContextVar(
    "user", default=rbac.ADMIN_USER
)


class Check(NamedTuple):
    """An authorization decision about a user's request (or about what its object says)."""

    user: str
    group: str
    resource: str  # with the subresource: kimideployments/status
    verb: str
    namespaced: bool
    allowed: bool


class Authorization:
    """The tokens given out, the stored RBAC objects' verdicts, and the checks made."""

    def __init__(
        self,
        rbac_objects: Callable[[], list[dict[str, Any]]],
        plural_of: Callable[[str, str], str | None],
    ) -> None:
        self._rbac_objects, self._plural_of = rbac_objects, plural_of
        self._tokens: dict[str, rbac.User] = {}
        self._authorizer: rbac.Authorizer | None = None  # None: to be read again
        self.checks: set[Check] = set()

    def issue_token(self, namespace: str, name: str) -> str:
        """A bearer token for the ServiceAccount `namespace/name`."""
        token = uuid.uuid4().hex
        self._tokens[token] = rbac.service_account(namespace, name)
        return token

    def user_of(self, authorization: str) -> rbac.User | None:
        """The user an Authorization header names; None for an unknown token (401)."""
        scheme, _, token = authorization.partition(" ")
        return self._tokens.get(token) if scheme == "Bearer" else rbac.ADMIN_USER

    def forget_rbac(self) -> None:
        """Roles or bindings changed: read them again at the next decision."""
        self._authorizer = None

    def _stored_rbac(self) -> rbac.Authorizer:
        if self._authorizer is None:
            self._authorizer = rbac.Authorizer(self._rbac_objects())
        return self._authorizer

    def allowed(self, user: rbac.User, wanted: rbac.Attributes) -> bool:
        if user.admin:
            return True
        allowed = self._stored_rbac().allowed(user, wanted)
        namespaced = bool(wanted.namespace)
        self.checks.add(
            Check(user.name, wanted.group, wanted.resource, wanted.verb, namespaced, allowed)
        )
        return allowed

    def refusal(
        self, user: rbac.User, method: str, path: str, query: Mapping[str, str]
    ) -> tuple[str, dict[str, Any]] | None:
        """(message, details) of the 403 Forbidden a request gets; None when it is allowed."""
        wanted = rbac.request_attributes(method, path, query)
        if wanted is None or self.allowed(user, wanted):
            return None
        return rbac.forbidden(wanted, f'User "{user.name}" cannot {wanted}')

    def check_owner_references(
        self, request: kmock.Request, new: Mapping[str, Any], old: Mapping[str, Any] | None
    ) -> None:
        """The OwnerReferencesPermissionEnforcement admission plugin (embedded.rbac)."""
        user = CURRENT_USER.get()
        if user.admin:
            return
        resource = request.resource
        assert resource is not None
        meta = new.get("metadata") or {}
        namespace, name = request.namespace or meta.get("namespace") or "", meta.get("name", "")
        this = rbac.Attributes(
            "delete", resource.group or "", resource.plural or "", namespace, name
        )
        why = rbac.owner_references_refusal(
            new, old, this, lambda wanted: self.allowed(user, wanted), self._plural_of
        )
        if why:
            verb = "create" if old is None else "update"
            message, details = rbac.forbidden(dataclasses.replace(this, verb=verb), why)
            raise kmock.KubernetesError(403, "Forbidden", message, details)

    def check_escalation(
        self, request: kmock.Request, new: Mapping[str, Any], old: Mapping[str, Any] | None
    ) -> None:
        """kube-apiserver's RBAC escalation check (embedded.rbac.escalation_refusal): a role or
        binding written grants nothing its writer does not hold."""
        user, resource = CURRENT_USER.get(), request.resource
        assert resource is not None
        if user.admin or resource.group != rbac.RBAC_GROUP:
            return
        meta = new.get("metadata") or {}
        namespace, name = request.namespace or meta.get("namespace") or "", meta.get("name", "")
        if resource.plural in ("roles", "clusterroles"):
            rules = list(new.get("rules") or [])
        else:
            rules = self._stored_rbac().referred_rules(new.get("roleRef") or {}, namespace)
        why = rbac.escalation_refusal(
            user, rules, namespace, lambda wanted: self.allowed(user, wanted)
        )
        if why:
            verb = "create" if old is None else "update"
            this = rbac.Attributes(verb, resource.group, resource.plural or "", namespace, name)
            raise kmock.KubernetesError(403, "Forbidden", *rbac.forbidden(this, why))
