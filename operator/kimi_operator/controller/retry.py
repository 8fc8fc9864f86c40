"""Which failures are worth retrying, and when: the controller's reading of `k8s`'s errors.

Conflicts (409), throttling (429), server errors (5xx) and no answer at all (code 0) are
temporary: retried after a delay that doubles with each failure in a row, up to
MAX_RETRY_DELAY_S, as client-go's workqueue backs off; a Retry-After from the server (429, 503)
is obeyed as given. Anything else (a refused request, a name taken by another object) is
permanent: tried again only at the next periodic resync.
"""

from kimi_operator.k8s.errors import ApiError, KubernetesError

# Seconds before the first retry, by HTTP status; SERVER_ERROR_DELAY_S for 5xx and no answer.
RETRY_DELAY_S = {409: 0.5, 429: 5.0}
SERVER_ERROR_DELAY_S = 1.0
MAX_RETRY_DELAY_S = 60.0


def temporary(error: KubernetesError) -> bool:
    return isinstance(error, ApiError) and (
        error.code == 0 or error.code in RETRY_DELAY_S or error.code >= 500
    )


def retry_delay(error: ApiError, failures_before: int) -> float:
    """Seconds until retrying a reconcile that failed with `error` after `failures_before`
    failures in a row."""
    if error.code in (429, 503) and error.retry_after_s is not None:
        return error.retry_after_s
    delay = RETRY_DELAY_S.get(error.code, SERVER_ERROR_DELAY_S)
    return float(min(delay * 2**failures_before, MAX_RETRY_DELAY_S))
