"""`--deployment NAMESPACE/NAME`: what a KimiDeployment says about where and how it serves.

Reads the custom object with the `kubernetes` client (kubeconfig first, as kubectl does, then the
in-cluster service account, which is what the rendered Job uses).
"""

import importlib
import os
import re
from dataclasses import dataclass
from typing import Any

from kimi_operator.api.constants import GROUP, KIND, PLURAL, VERSION
from kimi_operator.api.status import condition
from kimi_operator.bench import BenchError

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
API_TIMEOUT_S = 10


@dataclass(frozen=True)
class Target:
    reference: str  # NAMESPACE/NAME
    endpoint: str
    model: str | None
    gpus: int | None  # GPUs behind the endpoint: gpus per group x replicas
    decode_backend: str | None
    replicas: int
    trace_url: str | None = None  # the trace UI's link (status.traceUrl, `{trace_id}` in it)


def parse_reference(reference: str) -> tuple[str, str]:
    namespace, _, name = reference.partition("/")
    if not (_DNS_LABEL.match(namespace) and _DNS_LABEL.match(name)):
        raise BenchError(
            f"--deployment {reference!r}: expected NAMESPACE/NAME (lowercase DNS labels)"
        )
    return namespace, name


def api_client(flag: str) -> Any:
    """The `kubernetes` client's, for what `flag` reads or writes."""
    kubernetes: Any = importlib.import_module("kubernetes")
    config = kubernetes.config
    configuration = kubernetes.client.Configuration()
    try:
        # KUBECONFIG is read now, not when the client was imported; it may list several files.
        config_file = os.environ.get("KUBECONFIG") or None
        config.load_kube_config(config_file=config_file, client_configuration=configuration)
    except (config.ConfigException, OSError):
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            raise BenchError(
                f"{flag} needs Kubernetes access: no kubeconfig (KUBECONFIG, ~/.kube/config) "
                "and not running in a cluster"
            ) from None
    configuration.retries = 0
    return kubernetes.client.ApiClient(configuration)


def api_failure(error: Exception, client: Any, what: str, verb: str = "read") -> BenchError:
    """The `kubernetes` client's ApiException, or urllib3's HTTPError, as one line about `what`
    (`verb`: read or write)."""
    status = getattr(error, "status", None)
    if status in {401, 403}:
        return BenchError(f"not allowed to {verb} {what}: HTTP {status}")
    if status is not None:
        doing = {"read": "reading", "write": "writing"}[verb]
        return BenchError(f"{doing} {what}: HTTP {status} {getattr(error, 'reason', '')}")
    host = client.configuration.host
    reason = getattr(error, "reason", None) or error
    return BenchError(f"cannot reach the Kubernetes API at {host}: {reason}")


def _read(namespace: str, name: str) -> dict[str, Any]:
    kubernetes: Any = importlib.import_module("kubernetes")
    urllib3: Any = importlib.import_module("urllib3")
    with api_client("--deployment") as client:
        api = kubernetes.client.CustomObjectsApi(client)
        what = f"{KIND} {namespace}/{name}"
        try:
            body: dict[str, Any] = api.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _request_timeout=API_TIMEOUT_S
            )
        except kubernetes.client.ApiException as error:
            if error.status == 404:
                raise BenchError(f"{what} not found") from None
            raise api_failure(error, client, what) from None
        except urllib3.exceptions.HTTPError as error:
            raise api_failure(error, client, what) from None
    return body


def resolve(reference: str) -> Target:
    namespace, name = parse_reference(reference)
    body = _read(namespace, name)
    spec, status = body.get("spec") or {}, body.get("status") or {}
    endpoint = status.get("endpoint")
    if not endpoint:
        ready = condition(status, "Ready")
        why = ready.get("message") or ready.get("reason") or "the operator has not reported one"
        raise BenchError(f"{KIND} {reference} has no endpoint yet: {why}")
    replicas = spec.get("replicas", 1)
    gpus = spec.get("gpus")
    return Target(
        reference=reference,
        endpoint=str(endpoint),
        model=(spec.get("model") or {}).get("name"),
        gpus=gpus * replicas
        if isinstance(gpus, int) and isinstance(replicas, int) and replicas > 0
        else None,
        decode_backend=(spec.get("decode") or {}).get("backend"),
        replicas=replicas if isinstance(replicas, int) else 1,
        trace_url=status.get("traceUrl") or None,
    )
