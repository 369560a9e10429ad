"""``/store/*`` on the gateway: LangGraph Server's store API (issue 33 item 4).

The routes and shapes ``langgraph-sdk``'s ``StoreClient`` (0.4.x, ``client.store``) sends
and expects, so ``get_client(url=…, api_key=…).store`` works against ``ditto-worker
serve``:

===========================  ==============================================  ================
route                        body / query                                    answer
===========================  ==============================================  ================
``PUT /store/items``         ``{namespace, key, value, index?, ttl?}``        204
``GET /store/items``         ``?namespace=a.b&key=k[&refresh_ttl=true]``      the item or null
``DELETE /store/items``      ``{namespace, key}``                            204
``POST /store/items/search``  ``{namespace_prefix, filter?, limit?, offset?,   ``{"items": […]}``
                             query?, refresh_ttl?}``
``POST /store/namespaces``   ``{prefix?, suffix?, max_depth?, limit?,         ``{"namespaces":
                             offset?}``                                      [[…], …]}``
``GET /ok``                  (the probe the SDK's tests use)                 ``{"ok": true}``
===========================  ==============================================  ================

An item is ``{namespace, key, value, created_at, updated_at}`` (ISO 8601), a search hit
adds ``score`` (``null``: the store keeps no vectors for these routes, so ``query`` does
not rank; LangGraph's own stores without an index behave the same way).

**Scope.** Each request is one :class:`~ditto_worker.integrations.langgraph.DittoStore`
over the runtime, whose every node call is the gateway's own ``call_as`` under the
verified identity (its bearer token or its ``x-api-key``, which the guard takes as one;
the two differing is 400): node grants (``MEMORY.GET``/``QUERY``/``WRITE``/``UPDATE``/
``DELETE``), space ``memory``, input models, timeout and metrics as on ``/v1/nodes``. The
namespace is data inside that scope and can never name another tenant. Every request first
passes the guard (admission, body cap, JSON limits).

**Errors** are NodeResult-shaped (``node`` is ``STORE``): a missing or bad credential 401;
a body or query the routes refuse, or a namespace, key, value or filter LangGraph refuses,
422 ``INVALID_INPUT`` naming the field; a failed node call its code's status (403 for a
node the token may not call). ``ttl`` (minutes) and ``refresh_ttl`` are the store's
(:class:`~ditto_worker.integrations.langgraph.DittoStore`: an expired item is never
returned; the gateway's stores have no ``TTLConfig``, so a read refreshes nothing).
Source: ``langgraph_sdk/_async/store.py`` and ``schema.py`` of langgraph-sdk 0.4.14.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from ditto_worker.contracts import NodeResult
from ditto_worker.errors import ErrorCode
from ditto_worker.gateway.auth import Identity
from ditto_worker.gateway.errors import GatewayError, http_status
from ditto_worker.gateway.guard import parse_json
from ditto_worker.memory.checks import describe

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import Response

    from ditto_worker.integrations.langgraph import DittoStore

__all__ = ["STORE_NODE", "mount_store"]

logger = logging.getLogger(__name__)

STORE_NODE = "STORE"
"""The ``node`` of a ``/store/*`` refusal's NodeResult."""
MAX_TTL_MINUTES = 525_960_000.0
"""The longest ``ttl`` a put may ask for: 1,000 years, in minutes (longer is 422)."""


CallAs = Callable[[str, Any, Identity], Coroutine[Any, Any, NodeResult[Any]]]
Identify = Callable[["Request"], Identity]
_Model = TypeVar("_Model", bound=BaseModel)

Label = Annotated[str, Field(min_length=1, max_length=256)]
Namespace = Annotated[list[Label], Field(max_length=64)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PutBody(_Body):
    """``PUT /store/items``."""

    namespace: Namespace
    key: Annotated[str, Field(min_length=1, max_length=1024)]
    value: dict[str, Any]
    index: Literal[False] | list[str] | None = None
    ttl: Annotated[float, Field(gt=0, le=MAX_TTL_MINUTES, allow_inf_nan=False)] | None = None


class DeleteBody(_Body):
    """``DELETE /store/items``."""

    namespace: Namespace = []
    key: Annotated[str, Field(min_length=1, max_length=1024)]


class SearchBody(_Body):
    """``POST /store/items/search``."""

    namespace_prefix: Namespace = []
    filter: dict[str, Any] | None = None
    limit: Annotated[StrictInt, Field(ge=1, le=1000)] = 10
    offset: Annotated[StrictInt, Field(ge=0, le=10_000)] = 0
    query: Annotated[str, Field(max_length=8192)] | None = None
    refresh_ttl: StrictBool | None = None


class NamespacesBody(_Body):
    """``POST /store/namespaces``."""

    prefix: Namespace | None = None
    suffix: Namespace | None = None
    max_depth: Annotated[StrictInt, Field(ge=1, le=64)] | None = None
    limit: Annotated[StrictInt, Field(ge=1, le=1000)] = 100
    offset: Annotated[StrictInt, Field(ge=0, le=10_000)] = 0


class GetQuery(_Body):
    """``GET /store/items``'s query: ``namespace`` joined by ``.``."""

    namespace: Annotated[str, Field(max_length=16_384)] = ""
    key: Annotated[str, Field(min_length=1, max_length=1024)]
    refresh_ttl: Literal["true", "false", "True", "False"] | None = None


def mount_store(app: FastAPI, identify: Identify, call_as: CallAs, max_json_depth: int) -> None:
    """Add ``/store/*`` and ``GET /ok`` to ``app`` (the store routes only when the
    ``langgraph`` extra is installed; without it they answer the guard's 404)."""
    app.add_api_route("/ok", _ok, methods=["GET"], include_in_schema=False)
    try:
        from ditto_worker.integrations.langgraph import DittoStore
    except ImportError:
        logger.info("gateway: no /store routes (the langgraph extra is not installed)")
        return
    routes = _StoreRoutes(DittoStore, identify, call_as, max_json_depth)
    app.add_route("/store/items", routes.items, methods=["GET", "PUT", "DELETE"],
                  include_in_schema=False)  # fmt: skip
    app.add_route("/store/items/search", routes.search, methods=["POST"], include_in_schema=False)
    app.add_route("/store/namespaces", routes.namespaces, methods=["POST"],
                  include_in_schema=False)  # fmt: skip


async def _ok() -> dict[str, bool]:
    return {"ok": True}


class _StoreRoutes:
    """The handlers; each builds one store bound to the request's identity."""

    def __init__(
        self, store: type[DittoStore], identify: Identify, call_as: CallAs, max_depth: int
    ) -> None:
        self._store = store
        self._identify = identify
        self._call_as = call_as
        self._max_depth = max_depth

    async def items(self, request: Request) -> Response:
        """``GET``, ``PUT`` and ``DELETE /store/items``."""
        return await self._answer(request, self._items)

    async def search(self, request: Request) -> Response:
        """``POST /store/items/search``."""
        return await self._answer(request, self._search)

    async def namespaces(self, request: Request) -> Response:
        """``POST /store/namespaces``."""
        return await self._answer(request, self._namespaces)

    async def _answer(
        self, request: Request, handle: Callable[[Request, DittoStore], Awaitable[Any]]
    ) -> Response:
        from starlette.responses import JSONResponse, Response

        try:
            store = self._bound(self._identify(request))
            answer = await handle(request, store)
        except GatewayError as exc:
            return JSONResponse(exc.body(STORE_NODE), exc.status, headers=exc.headers or None)
        if answer is _NO_CONTENT:
            return Response(status_code=204)
        return JSONResponse(answer)

    def _bound(self, identity: Identity) -> DittoStore:
        """A store whose node calls are ``call_as(node, input, identity)`` on this loop."""
        loop = asyncio.get_running_loop()
        return self._store(cast(Any, _IdentityCalls(self._call_as, identity, loop)))

    async def _items(self, request: Request, store: DittoStore) -> Any:
        if request.method == "GET":
            query = _valid(GetQuery, dict(request.query_params))
            namespace = tuple(query.namespace.split(".")) if query.namespace else ()
            refresh = None if query.refresh_ttl is None else query.refresh_ttl.lower() == "true"
            item = await _run(lambda: store.get(namespace, query.key, refresh_ttl=refresh))
            return None if item is None else item.dict()
        if request.method == "PUT":
            put = _valid(PutBody, await self._json(request))
            await _run(lambda: store.put(tuple(put.namespace), put.key, put.value, put.index,
                                         ttl=put.ttl))  # fmt: skip
            return _NO_CONTENT
        gone = _valid(DeleteBody, await self._json(request))
        await _run(store.delete, tuple(gone.namespace), gone.key)
        return _NO_CONTENT

    async def _search(self, request: Request, store: DittoStore) -> Any:
        body = _valid(SearchBody, await self._json(request))
        found = await _run(lambda: store.search(
            tuple(body.namespace_prefix), query=body.query, filter=body.filter,
            limit=body.limit, offset=body.offset, refresh_ttl=body.refresh_ttl,
        ))  # fmt: skip
        return {"items": [hit.dict() for hit in found]}

    async def _namespaces(self, request: Request, store: DittoStore) -> Any:
        body = _valid(NamespacesBody, await self._json(request))
        prefix = tuple(body.prefix) if body.prefix else None
        suffix = tuple(body.suffix) if body.suffix else None
        found = await _run(lambda: store.list_namespaces(
            prefix=prefix, suffix=suffix, max_depth=body.max_depth,
            limit=body.limit, offset=body.offset,
        ))  # fmt: skip
        return {"namespaces": [list(namespace) for namespace in found]}

    async def _json(self, request: Request) -> Any:
        """The body's JSON (``{}`` when empty); refused as the guard refuses JSON."""
        body = await request.body()
        if not body:
            return {}
        data, problem = parse_json(body, self._max_depth)
        if problem is not None:
            raise GatewayError(ErrorCode.INVALID_INPUT, problem)
        return data


_NO_CONTENT: Any = object()


class _IdentityCalls:
    """The ``Runtime`` a bound store sees: ``invoke`` runs the gateway's ``call_as`` under
    one identity on the app's loop (the store runs in a worker thread); the scope the
    store passes is ignored (it passes none)."""

    def __init__(self, call_as: CallAs, identity: Identity, loop: asyncio.AbstractEventLoop):
        self._call_as = call_as
        self._identity = identity
        self._loop = loop

    def invoke(self, node: str, input: Any, **_: Any) -> NodeResult[Any]:
        coroutine = self._call_as(node, input, self._identity)
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()


def _valid(model: type[_Model], data: Any) -> _Model:
    """``data`` checked by ``model`` (422 ``INVALID_INPUT`` naming the field)."""
    if not isinstance(data, dict):
        raise GatewayError(ErrorCode.INVALID_INPUT, "Invalid input: the body must be an object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise GatewayError(ErrorCode.INVALID_INPUT, f"Invalid input: {describe(exc)}") from None


async def _run(call: Callable[..., Any], *args: Any) -> Any:
    """A store call in a worker thread; LangGraph's and the nodes' refusals as HTTP ones."""
    from ditto_worker.integrations.langgraph import NodeCallError

    try:
        return await asyncio.to_thread(call, *args)
    except NodeCallError as exc:
        raise GatewayError(exc.code, str(exc).partition(": ")[2],
                           status=http_status("failed", exc.code)) from None  # fmt: skip
    except NotImplementedError as exc:
        raise GatewayError(ErrorCode.UNSUPPORTED, str(exc)[:300]) from None
    except ValueError as exc:  # LangGraph's InvalidNamespaceError, a node's INVALID_INPUT
        raise GatewayError(ErrorCode.INVALID_INPUT, f"Invalid input: {str(exc)[:500]}") from None
