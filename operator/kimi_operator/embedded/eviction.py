"""The pods/eviction subresource as kube-apiserver serves it (its EvictionREST,
pkg/registry/core/pod/storage/eviction.go): a policy/v1 Eviction posted for a pod, what
`kubectl drain` sends.

A pod already terminal, Pending or terminating is deleted without asking a budget. Otherwise
the PodDisruptionBudgets of its namespace whose selector matches it (an empty selector matches
none here) decide: more than one is a 500; none lets it go; with one, a pod not Ready goes
without spending the budget when the budget's policy is `AlwaysAllow` or its application is
healthy (`currentHealthy >= desiredHealthy > 0`); else a budget not yet observed at its
generation or with no disruption allowed answers 429 TooManyRequests with upstream's words and
the DisruptionBudget cause, and one that allows it is spent (`disruptionsAllowed` decremented,
the pod noted in `disruptedPods`). The pod gets the `DisruptionTarget` condition
(`EvictionByEvictionAPI`), then is deleted with the Eviction's deleteOptions (preconditions,
propagation; there is no graceful deletion here). The budget's status is made true again by the
disruption controller's stand-in (embedded.disruption).
"""

import datetime
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp.web
import kmock

from kimi_operator.embedded.deletion import Collector, check_preconditions, propagation_policy
from kimi_operator.embedded.disruption import (
    disrupted,
    is_ready,
    timestamp,
    with_allowed_condition,
)
from kimi_operator.embedded.errors import not_found, status_response
from kimi_operator.embedded.scheduler import selects

BUDGETS = kmock.resource("policy/v1/poddisruptionbudgets")
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."
MORE_THAN_ONE = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
    "support."
)
MAX_DISRUPTED_PODS = 2000  # upstream's MaxDisruptedPodSize
SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}


class Refusal(Exception):
    """An eviction refused: the Status answer."""

    def __init__(self, code: int, reason: str, message: str, details: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.answer = (code, reason, message, dict(details))


def _too_many(cause: str, retry_after_s: int) -> Refusal:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    if retry_after_s:
        details["retryAfterSeconds"] = retry_after_s
    return Refusal(429, "TooManyRequests", VIOLATES, details)


def _forbidden(budget: str, why: str) -> Refusal:
    message = f'poddisruptionbudgets.policy "{budget}" is forbidden: {why}'
    details = {"name": budget, "group": "policy", "kind": "poddisruptionbudgets"}
    return Refusal(403, "Forbidden", message, details)


def can_ignore_budgets(pod: Mapping[str, Any]) -> bool:
    """canIgnorePDB: a pod terminal, Pending or terminating has disrupted nothing more."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in {"Succeeded", "Failed", "Pending"} or bool(
        pod["metadata"].get("deletionTimestamp")
    )


def covers(budget: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether a budget of the pod's namespace selects it (a nil or empty selector: no pod)."""
    selector = budget["spec"].get("selector") or {}
    empty = not selector.get("matchLabels") and not selector.get("matchExpressions")
    return not empty and selects(selector, pod["metadata"].get("labels") or {})


def spent(budget: Mapping[str, Any], pod: str, now: datetime.datetime) -> dict[str, Any]:
    """checkAndDecrement: the budget's status with one disruption spent on `pod`, or a Refusal."""
    name, status = budget["metadata"]["name"], dict(budget.get("status") or {})
    if status.get("observedGeneration", 0) < budget["metadata"].get("generation", 1):
        why = f"The disruption budget {name} is still being processed by the server."
        raise _too_many(why, 10)
    allowed = status.get("disruptionsAllowed", 0)
    if allowed < 0:
        raise _forbidden(name, "pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        why = "DisruptedPods map too big - too many evictions not confirmed by PDB controller"
        raise _forbidden(name, why)
    if allowed == 0:
        why = (
            f"The disruption budget {name} needs {status.get('desiredHealthy', 0)} healthy pods "
            f"and has {status.get('currentHealthy', 0)} currently"
        )
        raise _too_many(why, 0)
    status["disruptionsAllowed"] = allowed - 1
    if status["disruptionsAllowed"] == 0:
        status = with_allowed_condition(status, now)
    status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod: timestamp(now)}
    return status


class Evictions:
    """Evictions in one store of objects (kmock's `objects`): its budgets read and written, its
    pods deleted through `deletion`."""

    def __init__(
        self,
        objects: Any,
        announce: Callable[[Any, str, dict[str, Any]], Awaitable[None]],
        next_version: Callable[[], str],
        deletion: Collector,
    ) -> None:
        self.objects = objects
        self.announce = announce
        self.next_version = next_version
        self.deletion = deletion

    async def evict(self, request: kmock.Request, pods: kmock.resource) -> aiohttp.web.Response:
        """A POST of an Eviction to pods/<name>/eviction."""
        eviction = request.data if isinstance(request.data, dict) else {}
        if request.method.value != "POST":
            message = "the server does not allow this method on the requested resource"
            return status_response(405, "MethodNotAllowed", message, {})
        if (eviction.get("metadata") or {}).get("name") != request.name:
            message = "name in URL does not match name in Eviction object"
            return status_response(400, "BadRequest", message, {})
        key = (pods, request.namespace, request.name)
        obj = self.objects[key] if key in self.objects else None  # noqa: SIM401 (no .get)
        if obj is None or obj.deleted:
            raise not_found(pods, str(request.name))
        pod = obj.raw
        try:
            if not can_ignore_budgets(pod):
                await self._spend_budget(pod)
        except Refusal as refusal:
            return status_response(*refusal.answer)
        options = eviction.get("deleteOptions") or {}
        check_preconditions(options, pod, "Pod", "")
        policy = propagation_policy(request.url.query, options)
        target = disrupted(pod, "EvictionByEvictionAPI", "Eviction API: evicting")
        await self._write(pods, obj, {"status": target})
        await self.deletion.delete(key, obj, policy)
        return aiohttp.web.json_response(SUCCESS, status=201)

    async def _spend_budget(self, pod: Mapping[str, Any]) -> None:
        namespace = pod["metadata"]["namespace"]
        found = [
            obj
            for (resource, where, _), obj in self.objects.items()
            if resource == BUDGETS
            and where == namespace
            and not obj.deleted
            and covers(obj.raw, pod)
        ]
        if len(found) > 1:
            raise Refusal(500, "", MORE_THAN_ONE, {})
        if not found:
            return
        budget = found[0].raw
        status = budget.get("status") or {}
        healthy = status.get("currentHealthy", 0) >= status.get("desiredHealthy", 0) > 0
        always = budget["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
        if not is_ready(pod) and (always or healthy):
            return  # not counted as healthy: its eviction spends nothing
        now = datetime.datetime.now(datetime.UTC)
        new = spent(budget, pod["metadata"]["name"], now)
        await self._write(BUDGETS, found[0], {"status": new})

    async def _write(self, resource: kmock.resource, obj: Any, change: dict[str, Any]) -> None:
        """A status write of the server's own, as a watch sees it."""
        obj.patch({**change, "metadata": {"resourceVersion": self.next_version()}})
        await self.announce(resource, "MODIFIED", obj.raw)
