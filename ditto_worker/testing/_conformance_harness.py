"""Fixtures and helpers of the conformance suite (see :mod:`ditto_worker.testing.conformance`).

Calls go through the validating SDK (:func:`ditto_worker.create_memory`), so every plugin
output is also checked by the core (MEM-ERR-2: record shape, duplicate ids, finite
scores, count <= limit, UPDATE/DELETE id sets); rules the SDK would mask (de-duplication
of GET/DELETE inputs) are exercised on the raw plugin methods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

from ditto_worker.contracts import MemoryItem, NodeResult
from ditto_worker.memory.capabilities import METADATA_FIELDS, StoreCapabilities
from ditto_worker.memory.core import Memory, create_memory
from ditto_worker.memory.ports import CancelToken
from ditto_worker.scope import Scope

__all__ = [
    "Harness",
    "conformance",
    "conformance_capabilities",
    "conformance_search",
    "filter_fields",
    "filter_operators",
    "filter_string_ranges",
    "label",
]


def label(item: MemoryItem) -> str:
    """A record's key, or ``"<nokey>"``."""
    return item.key if item.key is not None else "<nokey>"


def filter_operators(flt: Any) -> set[str]:
    """Operators a raw filter uses (``$eq`` for the shorthand ``{"f": v}``)."""
    ops: set[str] = set()
    if not isinstance(flt, Mapping):
        return ops
    for name, value in flt.items():
        if name in ("$and", "$or"):
            ops.add(name)
            for child in value if isinstance(value, list) else ():
                ops |= filter_operators(child)
        elif isinstance(value, Mapping) and value and all(str(k).startswith("$") for k in value):
            ops |= {str(k) for k in value}
        else:
            ops.add("$eq")
    return ops


def filter_fields(flt: Any) -> set[str]:
    """Capability field names a raw filter uses (metadata paths as ``metadata.*``)."""
    fields: set[str] = set()
    if not isinstance(flt, Mapping):
        return fields
    for name, value in flt.items():
        if name in ("$and", "$or"):
            for child in value if isinstance(value, list) else ():
                fields |= filter_fields(child)
        elif name in ("id", "key", "createdAt", "updatedAt"):
            fields.add(name)
        else:
            fields.add(METADATA_FIELDS)
    return fields


_RANGE_OPS = ("$gt", "$gte", "$lt", "$lte")


def filter_string_ranges(flt: Any) -> set[str]:
    """Capability field names a raw filter gives a range operator with a string bound."""
    fields: set[str] = set()
    if not isinstance(flt, Mapping):
        return fields
    for name, value in flt.items():
        if name in ("$and", "$or"):
            for child in value if isinstance(value, list) else ():
                fields |= filter_string_ranges(child)
        elif isinstance(value, Mapping) and any(
            op in _RANGE_OPS and isinstance(value[op], str) for op in value
        ):
            fields.add(name if name in ("id", "key", "createdAt", "updatedAt") else METADATA_FIELDS)
    return fields


@dataclass
class Harness:
    """The store under test, its SDK and its declared capabilities.

    Attributes:
        store: the plugin object (MemoryStore).
        search: the explicit search provider, or ``None`` (the store's native search).
        caps: the declared :class:`StoreCapabilities`.
        memory: ``create_memory(store, search)``.
        scope: the trusted tenant scope every call runs in (``None``: unscoped).
    """

    store: Any
    search: Any
    caps: StoreCapabilities
    memory: Memory
    scope: Scope | None = None

    def scoped(self, scope: Scope | None) -> Harness:
        """The same store and SDK, calling in ``scope``."""
        return replace(self, scope=scope)

    def call(
        self, node: str, input: Any, cancel: CancelToken | None = None,
        operation_id: str | None = None,
    ) -> NodeResult[Any]:  # fmt: skip
        """Run one node through the SDK (in :attr:`scope`; a fresh execution id each time)."""
        return self.memory.execute(node, input, cancel=cancel, scope=self.scope,
                                   operation_id=operation_id)  # fmt: skip

    def ok(self, node: str, input: Any, operation_id: str | None = None) -> Any:
        """The output of a call that must succeed (fails the test with the error code)."""
        result = self.call(node, input, operation_id=operation_id)
        error = result.error
        assert result.status == "success", (
            f"{node} failed: {error.code if error else result.status}: "
            f"{error.message if error else ''}"
        )
        return result.output

    def code(self, node: str, input: Any, operation_id: str | None = None) -> str:
        """The error code of a call that must fail."""
        result = self.call(node, input, operation_id=operation_id)
        assert result.status != "success" and result.error is not None, (
            f"{node} succeeded but must fail explicitly: {input!r:.200}"
        )
        return result.error.code

    def write(self, drafts: Sequence[Mapping[str, Any]]) -> list[MemoryItem]:
        """WRITE ``drafts`` (wire dicts) and return the items; must succeed."""
        items: list[MemoryItem] = self.ok("MEMORY.WRITE", {"memories": list(drafts)})
        return items

    def write_keys(self, rows: Iterable[tuple[str | None, Any]], content: Any = "x") -> None:
        """WRITE one record per ``(key, metadata)``; ``None`` metadata is omitted."""
        drafts: list[dict[str, Any]] = []
        for key, metadata in rows:
            draft: dict[str, Any] = {"content": content}
            if key is not None:
                draft["key"] = key
            if metadata is not None:
                draft["metadata"] = metadata
            drafts.append(draft)
        self.write(drafts)

    def page(
        self, flt: Any = None, order_by: Any = None, limit: int = 100, cursor: str | None = None
    ) -> Any:
        """One QUERY page (MemoryQueryOutput); must succeed."""
        input: dict[str, Any] = {"limit": limit}
        if flt is not None:
            input["filter"] = flt
        if order_by is not None:
            input["orderBy"] = order_by
        if cursor is not None:
            input["cursor"] = cursor
        return self.ok("MEMORY.QUERY", input)

    def items(self, flt: Any = None, order_by: Any = None, limit: int = 10_000) -> list[MemoryItem]:
        """Every matching record, following cursors with pages of ``limit``."""
        found: list[MemoryItem] = []
        cursor: str | None = None
        for _ in range(100_000):
            page = self.page(flt, order_by, limit, cursor)
            assert len(page.items) <= limit, "a page exceeds limit (MEM-QUERY-2)"
            found += page.items
            cursor = page.next_cursor
            if cursor is None:
                return found
            assert page.items, "an empty page carries a nextCursor"
        raise AssertionError("paging did not end")

    def labels(self, flt: Any = None, order_by: Any = None, limit: int = 10_000) -> list[str]:
        """Keys (``"<nokey>"`` for none) of every matching record, in query order."""
        return [label(item) for item in self.items(flt, order_by, limit)]

    def search_keys(self, query: Any, **fields: Any) -> list[str]:
        """Keyword SEARCH; checks scores are finite, descending and positive."""
        input = {"query": query, "strategy": self.caps.keyword_strategy, **fields}
        input.setdefault("limit", 10)
        results = self.ok("MEMORY.SEARCH", input)
        scores = [r.score for r in results]
        if all(s is not None for s in scores):
            assert scores == sorted(scores, reverse=True), "keyword scores must descend"
        return [label(r.memory) for r in results]

    def require_keyword(self, cjk: bool = False) -> None:
        """Skip unless keyword search (and, if asked, CJK keyword search) is declared."""
        if self.caps.keyword_strategy is None:
            pytest.skip("no keyword_strategy declared")
        if cjk and not self.caps.keyword_cjk:
            pytest.skip("keyword_cjk not declared")

    def require_order_by(self, *fields: str) -> None:
        """Skip unless every field (capability names) is declared for orderBy."""
        missing = set(fields) - self.caps.order_by_fields
        if missing:
            pytest.skip(f"orderBy fields not declared: {sorted(missing)}")

    def supports_filter(self, flt: Any) -> bool:
        """True when every operator and field of ``flt`` is declared (string range bounds
        only on ``string_range_fields``)."""
        return (
            filter_operators(flt) <= self.caps.filter_operators
            and filter_fields(flt) <= self.caps.filter_fields
            and filter_string_ranges(flt) <= self.caps.string_range_fields
        )


@pytest.fixture
def conformance_search() -> Any:
    """The search provider under test; ``None`` (default) uses the store's native search.

    Override it in the test module (after the ``import *``) to test a separate
    MemorySearchProvider together with the store.
    """
    return None


@pytest.fixture
def conformance_capabilities(conformance_store: Any, conformance_search: Any) -> StoreCapabilities:
    """The declared capabilities: ``conformance_store.capabilities``.

    When a separate search provider is given, its ``capabilities`` (if a
    :class:`StoreCapabilities`) supply the search fields.
    """
    caps = getattr(conformance_store, "capabilities", None)
    if not isinstance(caps, StoreCapabilities):
        pytest.fail(
            "the store must declare `capabilities: StoreCapabilities`"
            " (ditto_worker.memory.capabilities)"
        )
    provided = getattr(conformance_search, "capabilities", None)
    if isinstance(provided, StoreCapabilities):
        caps = replace(
            caps,
            search_strategies=provided.search_strategies,
            default_strategy=provided.default_strategy,
            keyword_strategy=provided.keyword_strategy,
            keyword_cjk=provided.keyword_cjk,
            keyword_scope_statistics=provided.keyword_scope_statistics,
            exhaustive_strategies=provided.exhaustive_strategies,
            search_options=provided.search_options,
        )
    return caps


@pytest.fixture
def conformance(
    conformance_store: Any,
    conformance_search: Any,
    conformance_capabilities: StoreCapabilities,
) -> Harness:
    """The :class:`Harness` over the plugin author's fresh ``conformance_store``."""
    memory = create_memory(conformance_store, conformance_search)
    return Harness(conformance_store, conformance_search, conformance_capabilities, memory)
