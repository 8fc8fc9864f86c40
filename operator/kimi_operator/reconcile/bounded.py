"""A GET that cannot hold a reconcile: the operator's reads outside the API server (a draining
leader's vLLM /metrics, Prometheus's instant queries) are bounded in all, not only read by read.
urllib3's timeouts bound each socket read: a server that sends a byte now and then, or a body
without end, would hold the worker that reads it (and its memory) for as long as it likes.
"""

import time

import urllib3

CHUNK = 64 * 1024


class Exceeded(urllib3.exceptions.HTTPError):
    """The answer took longer than its deadline, or was larger than its cap."""


def get(
    pool: urllib3.PoolManager,
    url: str,
    *,
    timeout: urllib3.Timeout,
    deadline_s: float,
    max_bytes: int,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """(status, body) of GET `url`, its body read within `deadline_s` of the request and no
    larger than `max_bytes` (each read is `timeout`'s: the last may end that much after the
    deadline). urllib3's HTTPError on failure, `Exceeded` past either bound (the connection is
    then closed, not reused)."""
    ends = time.monotonic() + deadline_s
    answer = pool.request(
        "GET", url, headers=headers, timeout=timeout, retries=False, preload_content=False
    )
    body = bytearray()
    try:
        while chunk := answer.read1(CHUNK):
            body += chunk
            if len(body) > max_bytes:
                raise Exceeded(f"{url}: answer larger than {max_bytes} bytes")
            if time.monotonic() > ends:
                raise Exceeded(f"{url}: answer not read within {deadline_s} s")
    except BaseException:
        answer.close()
        raise
    answer.release_conn()
    return answer.status, bytes(body)
