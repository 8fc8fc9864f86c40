"""The prefill autoscaler's one read outside the API server: instant queries to Prometheus's HTTP
API (`--prometheus-url`, the Prometheus the KEDA triggers name), short and never retried, so that
a Prometheus that is down costs a reconcile a few seconds at most (prefill_scaling.py)."""

import json
import urllib.parse

import urllib3

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.prefill_scaling import QUERY_TIMEOUT_S, Load, queries, sample

_POOL = urllib3.PoolManager(maxsize=4, retries=False)


def query(url: str, promql: str, timeout_s: float = QUERY_TIMEOUT_S) -> float | None:
    """The value of one instant query (None: an empty vector). ValueError: no usable answer."""
    address = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    try:
        response = _POOL.request("GET", address, timeout=urllib3.Timeout(total=timeout_s))
    except urllib3.exceptions.HTTPError as error:
        raise ValueError(f"{type(error).__name__}: {error}") from None
    try:
        answer = json.loads(response.data)
    except ValueError:
        raise ValueError(f"HTTP {response.status}, not JSON") from None
    if not isinstance(answer, dict):
        raise ValueError(f"HTTP {response.status}, not an answer")
    return sample(answer)


def prefill_load(url: str, kd: KimiDeployment) -> Load | None:
    """The deployment's prefill load (None without spec.prefill.autoscaling); a failed query is
    `Load.error`, never an exception: the reconcile goes on with the count it has."""
    wanted = queries(kd)
    if not wanted:
        return None
    try:
        return Load({key: query(url, promql) for key, promql in wanted.items()})
    except ValueError as error:
        return Load(error=str(error)[:300])
