"""The operator's autoscalers' one read outside the API server (prefill_scaling.py's and
slo_roles.py's): instant queries to Prometheus's HTTP API (`--prometheus-url`, the Prometheus the
KEDA triggers name), short and never retried, so that a Prometheus that is down or slow costs a
reconcile a few seconds at most (the first failed query ends a role's reading; the whole answer
and its size are bounded: bounded.py). A secured Prometheus (OpenShift's Thanos querier, a proxy
in front of it) gets a bearer token read from `--prometheus-bearer-token-file` at every query,
and its certificate is checked against `--prometheus-ca-file`."""

import functools
import json
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

import urllib3

from kimi_operator import slo_roles
from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders import OperatorDefaults
from kimi_operator.plan.capacity import Role
from kimi_operator.prefill_scaling import QUERY_TIMEOUT_S, Load, queries, sample
from kimi_operator.reconcile import bounded

TOKEN_FLAG = "--prometheus-bearer-token-file"
# An instant query's answer: a vector of a few samples (queries sum by deployment).
MAX_ANSWER_BYTES = 1024 * 1024


@functools.cache
def _pool(ca_file: str) -> urllib3.PoolManager:
    """One pool per CA file ("": the system's CAs), made once."""
    return urllib3.PoolManager(maxsize=4, retries=False, ca_certs=ca_file or None)


def _headers(token_file: str) -> dict[str, str]:
    if not token_file:
        return {}
    try:
        token = Path(token_file).read_text().strip()
    except OSError as error:
        raise ValueError(f"{TOKEN_FLAG} {token_file}: {error.strerror}") from None
    return {"Authorization": f"Bearer {token}"}


def query(
    defaults: OperatorDefaults, promql: str, timeout_s: float = QUERY_TIMEOUT_S
) -> float | None:
    """The value of one instant query (None: an empty vector). ValueError: no usable answer."""
    url = defaults.prometheus_url
    address = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    headers = _headers(defaults.prometheus_token_file)
    try:
        status, data = bounded.get(
            _pool(defaults.prometheus_ca_file),
            address,
            headers=headers,
            timeout=urllib3.Timeout(total=timeout_s),
            deadline_s=timeout_s,
            max_bytes=MAX_ANSWER_BYTES,
        )
    except urllib3.exceptions.HTTPError as error:
        raise ValueError(f"{type(error).__name__}: {error}") from None
    if status in (401, 403):
        sent = f"the token of {TOKEN_FLAG} {defaults.prometheus_token_file}" if headers else "none"
        raise ValueError(f"HTTP {status}: refused the credentials sent ({sent})")
    try:
        answer = json.loads(data)
    except ValueError:
        raise ValueError(f"HTTP {status}, not JSON") from None
    if not isinstance(answer, dict):
        raise ValueError(f"HTTP {status}, not an answer")
    return sample(answer)


def _load(defaults: OperatorDefaults, wanted: Mapping[str, str]) -> Load:
    """The answers to `wanted`; a failed query is `Load.error`, never an exception: the
    reconcile goes on with the count it has."""
    try:
        return Load({key: query(defaults, promql) for key, promql in wanted.items()})
    except ValueError as error:
        return Load(error=str(error)[:300])


def prefill_load(defaults: OperatorDefaults, kd: KimiDeployment) -> Load | None:
    """The deployment's prefill load (None without spec.prefill.autoscaling's target)."""
    wanted = queries(kd)
    return _load(defaults, wanted) if wanted else None


def slo_loads(defaults: OperatorDefaults, kd: KimiDeployment) -> dict[Role, Load] | None:
    """The load of each role with an slo (None without one)."""
    wanted = {role: slo_roles.queries(kd, role) for role in slo_roles.roles(kd)}
    return {role: _load(defaults, q) for role, q in wanted.items()} if wanted else None
