"""`export-calibration --config-map NAMESPACE/NAME[:KEY]`: the calibration document written into
a key of a ConfigMap, where spec.autoscaling.slo.calibration names it (docs/scaling.md).

With the `kubernetes` client (kubeconfig first, then the in-cluster service account: what a
scheduled calibration's CronJob runs as, builders/calibration.py). The ConfigMap is read, then
the key is merge-patched into it (its other keys kept), or it is created with that key alone
when it is not there. That is `get` and `patch` on the one ConfigMap, and `create` on
ConfigMaps: the CronJob's Role grants no more.
"""

import importlib
import re
from typing import Any, Final

from kimi_operator.api.base import CONFIG_MAP_KEY, DNS_SUBDOMAIN
from kimi_operator.api.constants import CALIBRATION_KEY
from kimi_operator.bench import BenchError
from kimi_operator.bench.deployment import API_TIMEOUT_S, api_client, api_failure
from kimi_operator.bench.job import CONFIGMAP_LIMIT

FLAG: Final = "--config-map"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def parse_target(text: str) -> tuple[str, str, str]:
    """NAMESPACE/NAME[:KEY] as (namespace, name, key); the key defaults to calibration.json."""
    reference, _, key = text.partition(":")
    namespace, _, name = reference.partition("/")
    key = key or CALIBRATION_KEY
    if not (
        _DNS_LABEL.match(namespace)
        and len(name) <= 253
        and re.match(DNS_SUBDOMAIN, name)
        and len(key) <= 253
        and re.match(CONFIG_MAP_KEY, key)
    ):
        raise BenchError(
            f"{FLAG} {text!r}: expected NAMESPACE/NAME[:KEY] (a namespace, a ConfigMap name and "
            "a key of letters, digits, '-', '_' or '.')"
        )
    return namespace, name, key


def write(namespace: str, name: str, key: str, text: str) -> str:
    """Put `text` at `key` of ConfigMap `namespace/name`: "created" or "updated"."""
    size = len(text.encode())
    if size > CONFIGMAP_LIMIT:
        raise BenchError(
            f"{FLAG} {namespace}/{name}: the document is {size:,} bytes, over what a ConfigMap "
            f"holds ({CONFIGMAP_LIMIT:,} bytes)"
        )
    kubernetes: Any = importlib.import_module("kubernetes")
    urllib3: Any = importlib.import_module("urllib3")
    what = f"ConfigMap {namespace}/{name}"
    with api_client(FLAG) as client:
        api = kubernetes.client.CoreV1Api(client)
        try:
            try:
                api.read_namespaced_config_map(name, namespace, _request_timeout=API_TIMEOUT_S)
            except kubernetes.client.ApiException as error:
                if error.status != 404:
                    raise
                body = kubernetes.client.V1ConfigMap(
                    metadata=kubernetes.client.V1ObjectMeta(name=name, namespace=namespace),
                    data={key: text},
                )
                api.create_namespaced_config_map(namespace, body, _request_timeout=API_TIMEOUT_S)
                return "created"
            api.patch_namespaced_config_map(
                name,
                namespace,
                {"data": {key: text}},
                _content_type="application/merge-patch+json",
                _request_timeout=API_TIMEOUT_S,
            )
        except (kubernetes.client.ApiException, urllib3.exceptions.HTTPError) as error:
            raise api_failure(error, client, what, "write") from None
    return "updated"
