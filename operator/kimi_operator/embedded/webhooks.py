"""kube-apiserver's ValidatingAdmissionWebhook plugin, for the embedded API server: a write that the
rules of a stored ValidatingWebhookConfiguration match is sent to the webhook as an AdmissionReview
v1 (after the schema, defaults and CEL rules, as kube-apiserver orders them); a refusal comes back
as kube-apiserver words it (`admission webhook "NAME" denied the request: MESSAGE`, with the
webhook's code), the webhook's warnings as Warning headers.

What it does not do: mutating webhooks, `matchConditions`, `matchPolicy: Equivalent` (other
versions of a resource), DELETE and CONNECT (the server admits neither), dry runs. The webhook is
called at its `clientConfig.url` (a Service reference has no cluster network here), which may be
plain `http://` (kube-apiserver calls only HTTPS): the tests' webhook serves HTTP on 127.0.0.1.
The call blocks the server's loop for as long as the webhook takes (at most its timeoutSeconds):
the webhook runs in another thread or process, and never calls back.
"""

import base64
import json
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kmock

from kimi_operator.embedded import rbac

CONFIGURATIONS = "validatingwebhookconfigurations"
NAME_LABEL = "kubernetes.io/metadata.name"
DEFAULT_TIMEOUT_S = 10  # kube-apiserver's default timeoutSeconds in admissionregistration/v1

Stored = Callable[[str], list[dict[str, Any]]]  # plural -> the objects that exist


@dataclass(frozen=True)
class Attempt:
    """A write that admission decides on."""

    resource: kmock.resource
    subresource: str | None
    new: Mapping[str, Any]
    old: Mapping[str, Any] | None  # None: a create
    user: rbac.User

    @property
    def operation(self) -> str:
        return "CREATE" if self.old is None else "UPDATE"

    @property
    def namespace(self) -> str:
        return str((self.new.get("metadata") or {}).get("namespace") or "")


def review(
    configurations: Sequence[Mapping[str, Any]], stored: Stored, attempt: Attempt
) -> list[str]:
    """Call every validating webhook of `configurations` whose rules match `attempt`: their
    warnings, in order; kmock.KubernetesError when one refuses it (or fails, with failurePolicy
    Fail)."""
    warnings: list[str] = []
    for config in configurations:
        for webhook in config.get("webhooks") or []:
            if _matches(webhook, attempt, stored):
                warnings += _call(webhook, _request(attempt))
    return warnings


def _namespace_labels(stored: Stored, namespace: str) -> dict[str, str]:
    """The namespace's labels, with the one kube-apiserver gives every namespace (its name)."""
    labels = {NAME_LABEL: namespace}
    for obj in stored("namespaces"):
        if obj["metadata"]["name"] == namespace:
            labels |= obj["metadata"].get("labels") or {}
    return labels


def _matches(webhook: Mapping[str, Any], attempt: Attempt, stored: Stored) -> bool:
    resource, subresource, namespace = attempt.resource, attempt.subresource, attempt.namespace
    name = f"{resource.plural}/{subresource}" if subresource else str(resource.plural)
    scope = "Namespaced" if namespace else "Cluster"
    if not any(
        _one_of(rule.get("apiGroups"), resource.group or "")
        and _one_of(rule.get("apiVersions"), resource.version or "")
        and _one_of(rule.get("operations"), attempt.operation)
        and any(resource_matches(pattern, name) for pattern in rule.get("resources") or [])
        and rule.get("scope", "*") in ("*", scope)
        for rule in webhook.get("rules") or []
    ):
        return False
    selector = webhook.get("namespaceSelector") or {}
    if namespace and not selects(selector, _namespace_labels(stored, namespace)):
        return False
    labels = (attempt.new.get("metadata") or {}).get("labels") or {}
    return selects(webhook.get("objectSelector") or {}, labels)


def _one_of(allowed: Sequence[str] | None, value: str) -> bool:
    return allowed is not None and ("*" in allowed or value in allowed)


def resource_matches(pattern: str, name: str) -> bool:
    """kube-apiserver's rule matcher: `resource/subresource` patterns where `*` stands for any
    resource, or any subresource including none (`kimideployments/*` matches the resource itself
    too); without `/` only the resource itself (`kimideployments`, `*`)."""
    want_resource, _, want_sub = pattern.partition("/")
    have_resource, _, have_sub = name.partition("/")
    return want_resource in ("*", have_resource) and want_sub in ("*", have_sub)


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions) against `labels`."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _request(attempt: Attempt) -> dict[str, Any]:
    """The AdmissionReview v1 that kube-apiserver sends."""
    resource, new = attempt.resource, attempt.new
    group_version = {"group": resource.group or "", "version": resource.version or ""}
    kind = {**group_version, "kind": new.get("kind", "")}
    plural = {**group_version, "resource": resource.plural or ""}
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": kind,
        "resource": plural,
        "requestKind": kind,
        "requestResource": plural,
        "name": (new.get("metadata") or {}).get("name", ""),
        "operation": attempt.operation,
        "userInfo": {"username": attempt.user.name, "groups": sorted(attempt.user.groups)},
        "object": new,
        "oldObject": attempt.old,
        "dryRun": False,
        "options": {
            "apiVersion": "meta.k8s.io/v1",
            "kind": f"{attempt.operation.title()}Options",
        },
    }
    if attempt.subresource:
        request["subResource"] = attempt.subresource
    if attempt.namespace:
        request["namespace"] = attempt.namespace
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def _call(webhook: Mapping[str, Any], body: Mapping[str, Any]) -> list[str]:
    name = webhook["name"]
    client = webhook.get("clientConfig") or {}
    timeout = float(webhook.get("timeoutSeconds") or DEFAULT_TIMEOUT_S)
    try:
        url = str(client["url"])  # a Service reference: there is no cluster network here
        context = None
        if url.startswith("https:"):
            ca = base64.b64decode(client["caBundle"]).decode() if client.get("caBundle") else None
            context = ssl.create_default_context(cadata=ca)
        sent = urllib.request.Request(
            url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(sent, timeout=timeout, context=context) as answer:
            response = json.loads(answer.read())["response"]
    except (OSError, KeyError, ValueError, urllib.error.URLError) as error:
        if webhook.get("failurePolicy", "Fail") == "Ignore":
            return []
        message = f'failed calling webhook "{name}": failed to call webhook: {error}'
        raise kmock.KubernetesError(
            500, "InternalError", f"Internal error occurred: {message}"
        ) from None
    if response.get("allowed"):
        return [str(warning) for warning in response.get("warnings") or []]
    raise _denied(name, response.get("status") or {})


def _denied(name: str, status: Mapping[str, Any]) -> kmock.KubernetesError:
    """kube-apiserver's refusal for a webhook's `allowed: false` (its webhook/errors ToStatusErr):
    a code below 400 becomes 403."""
    code = int(status.get("code") or 0)
    denied = f'admission webhook "{name}" denied the request'
    why = status.get("message") or status.get("reason")
    message = f"{denied}: {why}" if why else f"{denied} without explanation"
    return kmock.KubernetesError(
        code if code >= 400 else 403, status.get("reason") or "", message, status.get("details")
    )
