"""The CONTEXT worker: ``CONTEXT.UPDATE`` and ``CONTEXT.LOAD`` (SPEC.md MEM-CTX).

:func:`create_context_worker` returns a :class:`~ditto_worker.runtime.WorkerDefinition`
the runtime serves embedded or on the fleet (queues ``context.update``, ``context.load``).

``CONTEXT.UPDATE`` answers in pure mode when the input has ``context`` and in cache mode
when it has ``name`` (exactly one of them, else ``INVALID_INPUT``). Cache mode (UPDATE
with ``name``, and LOAD) needs the call's trusted scope (``ctx.scope``, never the input;
without one: ``PERMISSION_DENIED``) and keeps the context at
``<tenant>:<user>:context:<name>`` (in a task space, ``<tenant>:<user>:task:<taskId>:
context:<name>``: the space's own key, :meth:`~ditto_worker.memory.scope.Scope.key`).

Failures: ``INVALID_INPUT`` naming the field or the limit, before any I/O and with nothing
written; ``PERMISSION_DENIED``; ``CONTEXT_UNAVAILABLE`` when the cache (Redis) is down,
refuses or does not answer within ``workers.context.timeoutS``; ``CONTEXT_TIMEOUT`` when
the call's deadline passes first (the Redis wait never outlives it); ``CONTEXT_CANCELLED``
when the call is cancelled (a cancel during the Redis round trip cuts its connection).
No fallback store (MEM-CTX-3).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from ditto_worker.config.context import REDIS_URL_ENV, ContextWorkerSettings
from ditto_worker.context.cache import CachedContext, ContextCache, InProcessContextCache
from ditto_worker.context.contracts import (
    ContextCacheUpdateInput,
    ContextCacheUpdateOutput,
    ContextItem,
    ContextLoadInput,
    ContextLoadOutput,
    ContextUpdateInput,
    ContextUpdateOutput,
)
from ditto_worker.context.merge import check_ingress, check_merged, invalid_input, merge_items
from ditto_worker.errors import ErrorCode, NodeError
from ditto_worker.memory.checks import describe
from ditto_worker.runtime import NodeContext, NodeSpec, WorkerDefinition
from ditto_worker.scope import Scope, missing_scope

if TYPE_CHECKING:
    from ditto_worker.config import RuntimeConfig

__all__ = ["CONTEXT_LOAD", "CONTEXT_UPDATE", "ContextNodes", "create_context_worker", "from_config"]

logger = logging.getLogger(__name__)

CONTEXT_UPDATE = "CONTEXT.UPDATE"
CONTEXT_LOAD = "CONTEXT.LOAD"

_ModelT = TypeVar("_ModelT", bound=BaseModel)


def _parse(model: type[_ModelT], raw: Any) -> _ModelT:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise invalid_input(describe(exc)) from None


_ITEMS = TypeAdapter(list[ContextItem])


def _parse_items(items_json: bytes) -> list[ContextItem]:
    """The items of a cached context (one JSON array).

    Raises:
        NodeError: ``CONTEXT_UNAVAILABLE`` when it is not an array of valid items.
    """
    try:
        return _ITEMS.validate_json(items_json)
    except ValidationError:
        raise NodeError(
            ErrorCode.CONTEXT_UNAVAILABLE, "The context cache holds a damaged context entry"
        ) from None


class ContextNodes:
    """The two handlers over one cache and one settings snapshot.

    Args:
        settings: ``workers.context`` (TTL, limits, ``timeoutS``).
        cache: where cache-mode contexts live.
    """

    def __init__(self, settings: ContextWorkerSettings, cache: ContextCache) -> None:
        self.settings = settings
        self.cache = cache
        self.limits = settings.limits

    # --- helpers ----------------------------------------------------------------------

    @staticmethod
    def _scope(ctx: NodeContext) -> Scope:
        if ctx.scope is None:
            raise NodeError(
                ErrorCode.PERMISSION_DENIED,
                missing_scope("a cached context needs a scope (tenant, user)"),
            )
        return ctx.scope

    def _timeout_s(self, ctx: NodeContext) -> float:
        if ctx.cancel.cancelled:
            raise NodeError(ErrorCode.CONTEXT_CANCELLED, "the context call was cancelled")
        remaining = ctx.remaining_s
        if remaining is None:
            return self.settings.timeout_s
        if remaining <= 0:
            raise NodeError(ErrorCode.CONTEXT_TIMEOUT, "the context call's deadline passed")
        return min(self.settings.timeout_s, remaining)

    @staticmethod
    def _deadline_error(ctx: NodeContext, err: NodeError) -> NodeError:
        if err.code == ErrorCode.CONTEXT_UNAVAILABLE and ctx.expired:
            return NodeError(
                ErrorCode.CONTEXT_TIMEOUT,
                "the context call's deadline passed before the cache answered",
            )
        return err

    # --- handlers ---------------------------------------------------------------------

    def update(
        self, input: Any, ctx: NodeContext
    ) -> ContextUpdateOutput | ContextCacheUpdateOutput:
        """``CONTEXT.UPDATE``: pure merge (``context``) or cache update (``name``).

        Args:
            input: ``{context: {items}, ingress}`` or ``{name, ingress, ttlS?}`` (wire names).
            ctx: the call's host facts (scope, deadline, cancel token).

        Returns:
            Pure: :class:`ContextUpdateOutput`; cache: :class:`ContextCacheUpdateOutput`.

        Raises:
            NodeError: see the module docstring.
        """
        if not isinstance(input, Mapping):
            raise invalid_input("input: expected an object")
        if ("context" in input) == ("name" in input):
            raise invalid_input(
                "input: give exactly one of context (pure merge) or name (cached context)"
            )
        if "context" in input:
            return self._pure(input)
        return self._cached(input, ctx)

    def _pure(self, input: Mapping[str, Any]) -> ContextUpdateOutput:
        parsed = _parse(ContextUpdateInput, dict(input))
        check_ingress(parsed.ingress, self.limits)  # the cache mode's rules, before merging
        merged = merge_items(parsed.context.items, parsed.ingress)
        check_merged(merged, self.limits, "the merged context")
        return ContextUpdateOutput(items=merged)

    def _cached(self, input: Mapping[str, Any], ctx: NodeContext) -> ContextCacheUpdateOutput:
        scope = self._scope(ctx)
        parsed = _parse(ContextCacheUpdateInput, dict(input))
        ttl_s = self.settings.ttl_s if parsed.ttl_s is None else parsed.ttl_s
        if ttl_s > self.settings.max_ttl_s:
            raise invalid_input(
                f"ttlS: over the limit workers.context.maxTtlS ({self.settings.max_ttl_s:g})"
            )
        collapsed = check_ingress(parsed.ingress, self.limits)
        entries = [(item.id, text) for item, text in collapsed]
        try:
            state = self.cache.update(
                scope.key("context", parsed.name),
                entries,
                ttl_s=ttl_s,
                limits=self.limits,
                timeout_s=self._timeout_s(ctx),
                cancel=ctx.cancel,
            )
        except NodeError as err:
            raise self._deadline_error(ctx, err) from None
        return ContextCacheUpdateOutput(items=_parse_items(state.items_json), version=state.version)

    def load(self, input: Any, ctx: NodeContext) -> ContextLoadOutput:
        """``CONTEXT.LOAD``: the cached context ``name`` of the trusted scope.

        Args:
            input: ``{name}``.
            ctx: the call's host facts.

        Returns:
            ``{found: false, items: [], version: 0}`` when missing or expired, else the
            context; its TTL is left as it was.

        Raises:
            NodeError: see the module docstring.
        """
        scope = self._scope(ctx)
        parsed = _parse(ContextLoadInput, dict(input) if isinstance(input, Mapping) else input)
        key = scope.key("context", parsed.name)
        try:
            state: CachedContext | None = self.cache.load(
                key, timeout_s=self._timeout_s(ctx), cancel=ctx.cancel
            )
        except NodeError as err:
            raise self._deadline_error(ctx, err) from None
        if state is None:
            return ContextLoadOutput.missing()
        return ContextLoadOutput(
            found=True, items=_parse_items(state.items_json), version=state.version
        )


def create_context_worker(
    settings: ContextWorkerSettings | None = None,
    redis_url: str | None = None,
    *,
    cache: ContextCache | None = None,
) -> WorkerDefinition:
    """The CONTEXT worker definition (the seed's ``createContextWorker()``; MEM-CTX).

    Args:
        settings: ``workers.context``; ``None``: the defaults with
            ``DITTO_WORKER_CONTEXT_REDIS_URL`` from the environment
            (:meth:`ContextWorkerSettings.from_env`).
        redis_url: overrides ``settings.redis_url``.
        cache: a cache object to use instead (the caller owns it; it is not closed).
            Otherwise a :class:`~ditto_worker.context.redis_cache.RedisContextCache` when
            a Redis URL is set, else an :class:`InProcessContextCache`; either is closed
            by the definition's ``close``.

    Returns:
        ``WorkerDefinition("CONTEXT", [CONTEXT.UPDATE, CONTEXT.LOAD])`` with
        ``concurrency = settings.concurrency``. Nothing connects until the first call
        or the definition's ``open`` hook (a worker process runs it before it announces
        ready: it connects to Redis and loads the scripts).

    Raises:
        ValueError: ``redis_url`` is not a Redis URL.
    """
    settings = ContextWorkerSettings.from_env() if settings is None else settings
    url = settings.redis_url if redis_url is None else redis_url
    owned = cache is None
    if cache is None:
        if url:
            from ditto_worker.context.redis_cache import RedisContextCache

            cache = RedisContextCache(
                url,
                max_idle=settings.concurrency,
                master_name=settings.sentinel_master_name or None,
            )
        else:
            cache = InProcessContextCache()
    nodes = ContextNodes(settings, cache)
    return WorkerDefinition.of(
        "CONTEXT",
        [
            NodeSpec(
                CONTEXT_UPDATE,
                nodes.update,
                output=ContextUpdateOutput | ContextCacheUpdateOutput,
                input=ContextUpdateInput | ContextCacheUpdateInput,
            ),
            NodeSpec(CONTEXT_LOAD, nodes.load, output=ContextLoadOutput, input=ContextLoadInput),
        ],
        concurrency=settings.concurrency,
        close=cache.close if owned else None,
        open=lambda: _open(cache, settings),
    )


def _open(cache: ContextCache, settings: ContextWorkerSettings) -> None:
    """The definition's ``open`` hook (a worker process, before it announces ready):
    connects to the Redis cache and loads its scripts, or says that cached contexts stay
    in this process when no Redis is configured.

    Raises:
        NodeError: ``CONTEXT_UNAVAILABLE`` when the Redis cache does not answer within
            ``workers.context.timeoutS`` (safe message, no URL).
    """
    open_cache = getattr(cache, "open", None)
    if callable(open_cache):
        open_cache(settings.timeout_s)
        logger.info("CONTEXT: the context cache (Redis) answers; scripts loaded")
    elif isinstance(cache, InProcessContextCache):
        logger.warning(
            "CONTEXT: no Redis configured (workers.context.redisUrl / %s): cached contexts "
            "live in this worker process only, not shared with other CONTEXT workers and "
            "lost when it stops",
            REDIS_URL_ENV,
        )


def from_config(config: RuntimeConfig) -> WorkerDefinition:
    """The CONTEXT worker of a worker process, from ``workers.context`` in ``ditto.yaml``
    (entry point ``context`` of the group ``ditto_worker.workers``). Connects to nothing
    until its ``open`` hook or the first call, in the process that serves (a forked
    process drops its parent's connections)."""
    return create_context_worker(config.context_worker)
