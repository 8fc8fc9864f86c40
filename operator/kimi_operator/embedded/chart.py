"""The operator's identity in the embedded API server: the chart's ServiceAccount, ClusterRole,
Role and bindings as `helm template` renders them, stored in the server, and a bearer token for
that ServiceAccount; so that every request the operator makes is allowed or refused by the
chart's own RBAC (embedded.rbac)."""

import copy
import functools
import json
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kimi_operator.embedded.clients import tool
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.upstream import SAFE_LOADER

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "kimi-operator"
RELEASE, NAMESPACE = "kimi", "kimi-system"
IDENTITY_KINDS = frozenset(
    {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
)


def helm_binary() -> str:
    return tool("helm")


def _render(values: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        file.write(values)
        file.flush()
        command = [helm_binary(), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
        result = subprocess.run(
            [*command, "--values", file.name],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if result.returncode != 0:
        raise RuntimeError(f"helm template failed: {result.stderr.strip()}")
    return result.stdout


@functools.lru_cache(maxsize=16)
def _rendered(values: str) -> tuple[dict[str, Any], ...]:
    """Parsed once per `values` (libyaml's parser: the chart's CRD is most of it), and every
    integration test's operator identity starts here."""
    return tuple(doc for doc in yaml.load_all(_render(values), Loader=SAFE_LOADER) if doc)


def render(values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every object `helm template` renders from the chart with `values` (cached; the caller's
    own copy)."""
    return copy.deepcopy(list(_rendered(json.dumps(dict(values or {}), sort_keys=True))))


def operator_identity(api: EmbeddedApiServer, values: Mapping[str, Any] | None = None) -> str:
    """Store the chart's ServiceAccount and RBAC (rendered with `values`) in `api`; the bearer
    token of that ServiceAccount."""
    objects = [o for o in render(values) if o["kind"] in IDENTITY_KINDS]
    api.store(objects)
    (account,) = [o["metadata"] for o in objects if o["kind"] == "ServiceAccount"]
    return api.issue_token(account.get("namespace", NAMESPACE), account["name"])


def webhook_configuration(url: str, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The chart's ValidatingWebhookConfiguration (rendered with `values`), the webhook called at
    `url` instead of its Service (there is no cluster network here)."""
    (found,) = [o for o in render(values) if o["kind"] == "ValidatingWebhookConfiguration"]
    return called_at(found, url)


def called_at(configuration: Mapping[str, Any], url: str) -> dict[str, Any]:
    """A copy of the webhook configuration `configuration` whose webhooks are called at `url` (and
    their Service's path) instead of their Service."""
    copied: dict[str, Any] = json.loads(json.dumps(configuration))
    for webhook in copied["webhooks"]:
        webhook["clientConfig"] = {"url": url + webhook["clientConfig"]["service"]["path"]}
    return copied
