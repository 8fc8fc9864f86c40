"""Where to send requests: checking the URL, probing the server before a run."""

import json
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from kimi_operator.bench import BenchError
from kimi_operator.bench.calibration import ServerLimits
from kimi_operator.bench.client import connect_reason
from kimi_operator.bench.server_metrics import parse, served_config

PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Endpoint:
    base: str  # the OpenAI API root, e.g. http://k3.inference.svc:8000/v1
    root: str  # the server root, where vLLM serves /metrics and /version

    def url(self, api: str) -> str:
        return f"{self.base}/{'chat/completions' if api == 'chat' else 'completions'}"


def parse_endpoint(text: str, what: str = "endpoint") -> Endpoint:
    """http(s)://host[:port][/path]; a bare host:port gets `/v1`. `what` names it in errors."""
    hint = "expected an http(s) URL such as http://host:8000/v1"
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError as error:
        raise BenchError(f"{what} {text!r}: {error}; {hint}") from None
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise BenchError(f"{what} {text!r}: {hint}")
    if parts.query or parts.fragment or any(c.isspace() for c in text.strip()):
        raise BenchError(f"{what} {text!r}: {hint} (no query, fragment or spaces)")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    root = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
    path = parts.path.rstrip("/") or "/v1"
    return Endpoint(base=root + path, root=root)


def _reason(error: BaseException) -> str:
    if isinstance(error, aiohttp.ClientConnectorError):
        return connect_reason(error)
    if isinstance(error, TimeoutError):
        return f"no answer within {PROBE_TIMEOUT_S:.0f}s"
    return str(error) or type(error).__name__


async def served_models(session: aiohttp.ClientSession, endpoint: Endpoint) -> list[str] | None:
    """The model ids from /models, or None when the server does not list them (404)."""
    cards = await model_cards(session, endpoint)
    return None if cards is None else [str(card["id"]) for card in cards]


async def model_cards(
    session: aiohttp.ClientSession, endpoint: Endpoint
) -> list[dict[str, object]] | None:
    """The model cards from /models (vLLM's carry `max_model_len`), or None on a 404.

    Raises BenchError when the server cannot be reached or refuses us: better one line now than
    a run in which every request fails the same way.
    """
    url = f"{endpoint.base}/models"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)) as r:
            if r.status == 404:
                return None
            if r.status in {401, 403}:
                raise BenchError(f"{url}: HTTP {r.status}: pass an API key with --api-key")
            if r.status != 200:
                raise BenchError(f"{url}: HTTP {r.status}")
            body = json.loads(await r.text())
    except (aiohttp.ClientError, TimeoutError) as error:
        raise BenchError(f"cannot reach {endpoint.base}: {_reason(error)}") from None
    except ValueError:
        raise BenchError(f"{url}: the answer is not JSON; is this an OpenAI API?") from None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise BenchError(f"{url}: no model list in the answer; is this an OpenAI API?")
    return [m for m in data if isinstance(m, dict) and "id" in m]


def choose_model(requested: str | None, served: list[str] | None, base: str) -> str:
    if requested is not None:
        if served is not None and requested not in served:
            listed = ", ".join(served) or "nothing"
            raise BenchError(f"{base} does not serve {requested!r} (it serves: {listed})")
        return requested
    if served is None:
        raise BenchError(f"{base} does not list its models: pass --model")
    if len(served) != 1:
        listed = ", ".join(served) or "none"
        raise BenchError(f"{base} serves {len(served)} models ({listed}): pass --model")
    return served[0]


async def get_text(session: aiohttp.ClientSession, url: str) -> str | None:
    """A page's text, or None when it cannot be had (the run goes on without it)."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)) as r:
            return await r.text() if r.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
        return None


async def server_version(session: aiohttp.ClientSession, endpoint: Endpoint) -> str | None:
    text = await get_text(session, f"{endpoint.root}/version")
    try:
        body = json.loads(text) if text else None
    except ValueError:
        return None
    version = body.get("version") if isinstance(body, dict) else None
    return str(version) if version is not None else None


async def server_limits(
    endpoint: Endpoint, metrics_url: str, model: str | None, api_key: str | None
) -> ServerLimits:
    """The served model's context (its card on /models) and the sequences the server runs at
    once (its metrics), each None where the server does not say."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    async with aiohttp.ClientSession(headers=headers) as session:
        cards = await model_cards(session, endpoint) or []
        text = await get_text(session, metrics_url)
    ids = [str(card["id"]) for card in cards]
    chosen = model if model in ids else (ids[0] if len(ids) == 1 else None)
    card = next((card for card in cards if card["id"] == chosen), {})
    context = card.get("max_model_len")
    served = served_config(parse(text)) if text is not None else None
    return ServerLimits(
        max_model_len=context if isinstance(context, int) else None,
        max_num_seqs=served.max_num_seqs if served is not None else None,
    )
