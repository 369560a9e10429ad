"""The six MEMORY nodes' preparation: validate the input, apply limits and policy, bind
the plugin call (step 4 of :mod:`ditto_worker.memory.core`; the rules live in
:mod:`.checks`).

:class:`NodePreparation` is a base of :class:`~ditto_worker.memory.core.Memory`, which
sets the attributes declared here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from ditto_worker.contracts import (
    MemoryDefaults,
    MemoryDeleteInput,
    MemoryDeleteOutput,
    MemoryGetInput,
    MemoryQueryInput,
    MemorySearchInput,
    MemoryUpdateInput,
    MemoryWriteInput,
)
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory import checks
from ditto_worker.memory.batch_get import BatchCall, prefetch_gets, read_get
from ditto_worker.memory.call import Call, Prepared
from ditto_worker.memory.ports import MemoryStore
from ditto_worker.memory.query_vectors import prefetch_queries

__all__ = ["BUILTIN_QUERY_LIMIT", "BUILTIN_SEARCH_LIMIT", "NodePreparation"]

BUILTIN_QUERY_LIMIT: Final = 100
"""QUERY limit when no layer sets one (MEM-CONF-1)."""
BUILTIN_SEARCH_LIMIT: Final = 10
"""SEARCH limit when no layer sets one (MEM-CONF-1)."""


class NodePreparation:
    """``_prepare_<node>(raw input, runtime-YAML defaults) -> Prepared`` per MEMORY node."""

    store: MemoryStore
    defaults: MemoryDefaults
    _search: Callable[..., object] | None
    _search_options: frozenset[str] | None
    _conditional: bool
    _isolates_scope: Callable[[str], bool]

    def _prepare_get(self, raw: Any, layer: MemoryDefaults | None) -> Prepared:
        data = checks.prepare_get(checks.parse_input(MemoryGetInput, raw))
        if isinstance(data, checks.Done):
            return data
        return Call(
            lambda opts: read_get(self.store, data, opts),  # its batch's share, if read
            lambda out: checks.finish_get(data, out),
        )

    def prefetch_get(self, calls: Sequence[BatchCall]) -> Callable[[], None]:
        """Read a fleet batch's GET calls in one store call per trusted scope
        (:func:`~ditto_worker.memory.batch_get.prefetch_gets`); returns the release."""
        return prefetch_gets(self.store, self._isolates_scope("MEMORY.GET"), calls)

    def prefetch_search(self, calls: Sequence[BatchCall]) -> Callable[[], None]:
        """Embed the text queries of a fleet batch's ``vector`` SEARCH calls in one call of
        the search source's embedder (:mod:`~ditto_worker.memory.query_vectors`); returns
        the release. A ``hybrid`` query is embedded after its keyword leg (the names it
        found are stripped first), so it embeds on its own."""
        source = getattr(self._search, "__self__", None)
        embedder = getattr(source, "embedder", None)
        if embedder is None:
            return lambda: None
        default = getattr(getattr(source, "capabilities", None), "default_strategy", None)
        texts: list[str] = []
        for call in calls:
            try:
                data = checks.parse_input(MemorySearchInput, call.input)
            except MemoryError:
                continue
            if (data.strategy or default) == "vector" and isinstance(data.query, str):
                texts.append(data.query)
        return prefetch_queries(embedder, texts)

    def _prepare_query(self, raw: Any, layer: MemoryDefaults | None) -> Prepared:
        data = checks.parse_input(MemoryQueryInput, raw)
        limit = self._limit(data.limit, "query_limit", layer, BUILTIN_QUERY_LIMIT)
        data = data.model_copy(update={"limit": limit})
        return Call(
            lambda opts: self.store.query(data, opts),
            lambda out: checks.finish_query(limit, out),
        )

    def _prepare_search(self, raw: Any, layer: MemoryDefaults | None) -> Prepared:
        search = self._search
        if search is None:
            raise MemoryError(
                ErrorCode.SEARCH_UNAVAILABLE,
                "No search provider is configured and the store has no native search.",
            )
        data = checks.parse_input(MemorySearchInput, raw)
        checks.check_search_options(data.options, self._search_options)
        limit = self._limit(data.limit, "search_limit", layer, BUILTIN_SEARCH_LIMIT)
        data = data.model_copy(update={"limit": limit})
        return Call(lambda opts: search(data, opts), lambda out: checks.finish_search(limit, out))

    def _prepare_write(self, raw: Any, layer: MemoryDefaults | None) -> Prepared:
        data = checks.parse_input(MemoryWriteInput, raw)
        if not data.memories:
            return checks.Done([])
        return Call(
            lambda opts: self.store.write(data, opts),
            lambda out: checks.finish_write(data, out),
        )

    def _prepare_update(self, raw: Any, layer: MemoryDefaults | None) -> Prepared:
        data = checks.prepare_update(checks.parse_input(MemoryUpdateInput, raw))
        if not data.memories:
            return checks.Done([])
        if not self._conditional and any(e.if_metadata is not None for e in data.memories):
            raise MemoryError(ErrorCode.UNSUPPORTED,
                              "this memory store cannot check ifMetadata atomically")  # fmt: skip
        return Call(
            lambda opts: self.store.update(data, opts),
            lambda out: checks.finish_update(data, out),
        )

    def _prepare_delete(self, raw: Any, layer: MemoryDefaults | None) -> Prepared:
        parsed = checks.parse_input(MemoryDeleteInput, raw)
        data = MemoryDeleteInput(ids=checks.dedupe(parsed.ids))
        if not data.ids:
            return checks.Done(MemoryDeleteOutput(deleted=[]))
        return Call(
            lambda opts: self.store.delete(data, opts),
            lambda out: checks.finish_delete(data, out),
        )

    def _limit(
        self, request: int | None, field: str, layer: MemoryDefaults | None, builtin: int
    ) -> int:
        """Resolve a limit: request > factory defaults > runtime YAML > built-in (MEM-CONF-2)."""
        for candidate in (request, getattr(self.defaults, field), getattr(layer, field, None)):
            if candidate is not None:
                return int(candidate)
        return builtin
