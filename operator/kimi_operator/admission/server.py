"""Serve the handler over HTTPS: kopf's `WebhookServer` (aiohttp, TLS, the certificate files
re-read every `cert_check_interval_s` and the server restarted when they changed) in front of
kopf's admission engine, which runs the `@kopf.on.validate` handlers and builds the
AdmissionReview v1 response (`allowed`, `status` with the refusal's code, `warnings`).

Not `kopf.run`: even standalone (no peering) with `settings.scanning.disabled`, kopf's operator
logs in to the API server and reads its discovery documents at start (the resource observer of
kopf/_core/reactor/observation.py scans them either way) to learn which resources its webhooks
serve. The webhook needs nothing from the cluster: the one resource it serves is known here, so
the process has no credentials, no client and no RBAC (the chart mounts no token into its pods).
"""

import asyncio
import functools
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import kopf
from kopf._cogs.structs import bodies, ephemera, references
from kopf._core.engines import admission, indexing

from kimi_operator.admission.handler import REGISTRY
from kimi_operator.api.constants import GROUP, KIND, PLURAL, SHORT_NAME, SINGULAR, VERSION
from kimi_operator.plan.builtin import builtin_calibration

LOG = logging.getLogger(__name__)

KIMIDEPLOYMENTS = references.Resource(
    group=GROUP,
    version=VERSION,
    plural=PLURAL,
    kind=KIND,
    singular=SINGULAR,
    shortcuts=frozenset({SHORT_NAME}),
    namespaced=True,
    preferred=True,
)


@dataclass(frozen=True)
class ServeConfig:
    address: str
    port: int  # 0: a free port, chosen at start
    cert_file: str | None = None  # both None: plain HTTP
    key_file: str | None = None
    cert_check_interval_s: float = 10.0


class _NoMemories(admission.MemoGetter):
    """A fresh memo per request: the handler keeps no state, and kopf's own store of memos would
    keep one for every object ever updated (it forgets them on watch events, and there is no
    watch here)."""

    async def recall_memo(
        self,
        raw_body: bodies.RawBody,  # noqa: ARG002
        *,
        memobase: ephemera.AnyMemo | None = None,  # noqa: ARG002
        ephemeral: bool = False,  # noqa: ARG002
    ) -> ephemera.AnyMemo:
        return ephemera.AnyMemo(kopf.Memo())


class _RefusalsUnlogged(logging.Filter):
    """kopf logs each refusal (an AdmissionError) as an error of the handler; it is the user's,
    and goes back to them. Other failures of the handler are still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "failed permanently" not in record.getMessage()


_REFUSALS_UNLOGGED = _RefusalsUnlogged()


def review_function() -> kopf.WebhookFn:
    """kopf's admission engine for the handlers of `REGISTRY`, on KimiDeployments alone."""
    insights = references.Insights()
    insights.webhook_resources.add(KIMIDEPLOYMENTS)
    insights.ready_resources.set()
    fn = functools.partial(
        admission.serve_admission_request,
        settings=kopf.OperatorSettings(),
        registry=REGISTRY,
        insights=insights,
        memories=_NoMemories(),
        memobase=ephemera.AnyMemo(kopf.Memo()),
        indices=indexing.OperatorIndexers().indices,
    )
    return cast("kopf.WebhookFn", fn)


async def serve(config: ServeConfig, announce: Callable[[str], None]) -> None:
    """Serve until cancelled; `announce` gets the URL each time the server (re)starts."""
    logging.getLogger("kopf.objects").addFilter(_REFUSALS_UNLOGGED)
    server = kopf.WebhookServer(
        addr=config.address,
        port=config.port or None,
        insecure=config.cert_file is None,
        certfile=config.cert_file,
        pkeyfile=config.key_file,
        file_check_interval=config.cert_check_interval_s,
    )
    async for client_config in server(review_function()):
        announce(client_config.get("url") or "")


def run(config: ServeConfig, announce: Callable[[str], None]) -> None:
    """`serve` until SIGTERM or SIGINT (a pod's termination: the server closes its socket).
    The planner's GB300 data is loaded first: the first spec with an slo would otherwise wait
    for it longer than kube-apiserver waits for the webhook."""
    builtin_calibration(16, "latency_specialized", 0)

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)
        try:
            await serve(config, announce)
        except asyncio.CancelledError:
            LOG.info("stopped")

    asyncio.run(main())
