"""The API server's non-resource paths: `/version`, discovery (embedded.discovery) and OpenAPI
(embedded.openapi), answered before kmock sees the request."""

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import aiohttp.web

from kimi_operator.embedded import discovery, openapi
from kimi_operator.embedded.fieldsets import Schema


def _json(body: Any, content_type: str = "application/json") -> aiohttp.web.Response:
    return aiohttp.web.Response(
        body=json.dumps(body).encode(), headers={"Content-Type": content_type}
    )


def not_found() -> aiohttp.web.Response:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the requested resource",
        "reason": "NotFound",
        "details": {},
        "code": 404,
    }
    return aiohttp.web.json_response(status, status=404)


class Endpoints:
    """Answers the non-resource paths from the served resources and the installed CRDs; the
    OpenAPI v3 documents are made again only when those change."""

    def __init__(
        self,
        served: Callable[[], list[discovery.Served]],
        crds: Callable[[], Sequence[Mapping[str, Any]]],
        state: Callable[[], Hashable],
    ) -> None:
        self._served, self._crds, self._state = served, crds, state
        self._documents: tuple[Hashable, dict[str, bytes]] | None = None
        self._definitions: (
            tuple[Hashable, dict[str, Any], dict[tuple[str, str, str], str]] | None
        ) = None

    def schema(self, group: str, version: str, kind: str) -> Schema:
        """The OpenAPI schema of a served kind (empty where none is known)."""
        state = self._state()
        if self._definitions is None or self._definitions[0] != state:
            definitions = openapi.all_definitions(self._crds())
            self._definitions = (state, definitions, openapi.by_kind(definitions))
        definitions, index = self._definitions[1], self._definitions[2]
        name = index.get((group, version, kind))
        return Schema(definitions.get(name) if name else None, definitions)

    def _v3(self) -> dict[str, bytes]:
        state = self._state()
        if self._documents is None or self._documents[0] != state:
            self._documents = (state, openapi.v3(self._served(), self._crds()))
        return self._documents[1]

    def answer(self, method: str, path: str, accept: str) -> aiohttp.web.Response | None:
        """The answer to a request of a non-resource path; None for any other path."""
        if method != "GET":
            return None
        path = path.rstrip("/") or "/"
        parts = path.strip("/").split("/")
        if path == "/version":
            return _json(discovery.version_info())
        if path.startswith("/openapi/"):
            return self._openapi(path)
        if parts[0] not in {"api", "apis"} or len(parts) > 3:
            return None
        served = self._served()
        if path in {"/api", "/apis"} and discovery.wants_aggregated(accept):
            document = discovery.aggregated(served, legacy=path == "/api")
            return _json(document, discovery.AGGREGATED)
        if path == "/api":
            return _json(discovery.api_versions())
        if path == "/apis":
            return _json(discovery.group_list(served))
        if parts[0] == "apis" and len(parts) == 2:
            found = discovery.group(served, parts[1])
        elif (parts[0] == "apis" and len(parts) == 3) or (parts[0] == "api" and len(parts) == 2):
            found = discovery.resource_list(served, "/".join(parts[1:]))
        else:
            return None
        return not_found() if found is None else _json(found)

    def _openapi(self, path: str) -> aiohttp.web.Response:
        if path == "/openapi/v2":
            return _json(openapi.v2(self._served(), self._crds()))
        documents = self._v3()
        if path == "/openapi/v3":
            return _json(openapi.v3_root(documents))
        document = documents.get(path.removeprefix("/openapi/v3/"))
        if document is None:
            return not_found()
        return aiohttp.web.Response(body=document, content_type="application/json")
