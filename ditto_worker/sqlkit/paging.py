"""One QUERY page of a SQL store: parse, keyset-select, cut, sign the next cursor.

Every SQL store answers MEMORY.QUERY the same way (MEM-QUERY-2/3/4): parse ``orderBy``
and ``filter``, check the request's cursor against the fingerprint of both, the
namespace and the store's secret, select at most ``limit + 1`` rows strictly after it
(:func:`page_query`), return the first ``limit`` and, when a row is left over, a cursor
at the last one returned (:func:`page_output`). The dialect compiles the filter and the
sort columns (:mod:`ditto_worker.sqlkit.compiler`); the store supplies its row mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ditto_worker.contracts import MemoryItem, MemoryQueryInput, MemoryQueryOutput
from ditto_worker.memory.filters import (
    Cursor,
    FilterNode,
    SortTerm,
    SortValue,
    decode_cursor,
    encode_cursor,
    parse_filter,
    parse_order_by,
    query_fingerprint,
)
from ditto_worker.sqlkit.compiler import FilterDialect, Sql, keyset_condition, order_clause

__all__ = ["DEFAULT_QUERY_LIMIT", "PageRequest", "page_output", "page_query", "page_request"]

DEFAULT_QUERY_LIMIT: Final = 100
"""Records per page when the request gives no ``limit`` (MEM-QUERY)."""


@dataclass(frozen=True)
class PageRequest:
    """A parsed QUERY: the filter AST, the sort terms, the fingerprint its cursors carry,
    the tenant namespace, the decoded cursor (``None`` on the first page) and the page
    size (``limit``, default :data:`DEFAULT_QUERY_LIMIT`)."""

    node: FilterNode | None
    terms: tuple[SortTerm, ...]
    fingerprint: str
    namespace: str
    cursor: Cursor | None
    limit: int


def page_request(input: MemoryQueryInput, namespace: str, secret: Callable[[], str]) -> PageRequest:
    """Parse ``orderBy``, then ``filter``, then the cursor (checked with ``secret()``,
    called only when there is a cursor).

    Raises:
        MemoryError: ``UNSUPPORTED_ORDER_BY``, ``UNSUPPORTED_FILTER``, ``INVALID_INPUT``
            (a timestamp operand), ``INVALID_CURSOR`` (malformed, made for another
            filter/orderBy, or issued in another namespace).
    """
    terms = parse_order_by(input.order_by)
    node = parse_filter(input.filter)
    fingerprint = query_fingerprint(input.filter, input.order_by)
    cursor = None
    if input.cursor:
        cursor = decode_cursor(input.cursor, fingerprint, len(terms), secret(), namespace=namespace)
    limit = input.limit or DEFAULT_QUERY_LIMIT
    return PageRequest(node, terms, fingerprint, namespace, cursor, limit)


def page_query(
    dialect: FilterDialect, columns: str, sort: Sql, source: Sql, request: PageRequest
) -> Sql:
    """``SELECT * FROM (SELECT <columns><sort> FROM <source>) AS q WHERE <after cursor>
    ORDER BY <terms>, seq LIMIT limit + 1``.

    Args:
        dialect: the database's filter dialect.
        columns: the record columns, ``seq`` first (aliased ``seq``), of table ``m``.
        sort: the dialect's sort columns of ``request.terms`` (leading comma).
        source: ``<table> AS m WHERE <scope and filter>`` and its parameters.
        request: the parsed QUERY.
    """
    after = (
        keyset_condition(dialect, request.terms, request.cursor)
        if request.cursor is not None
        else Sql(dialect.true)
    )
    return Sql(
        f"SELECT * FROM (SELECT {columns}{sort.text} FROM {source.text}) AS q "
        f"WHERE {after.text} ORDER BY {order_clause(dialect, request.terms)} "
        f"LIMIT {dialect.mark}",
        [*sort.params, *source.params, *after.params, request.limit + 1],
    )


def page_output(
    request: PageRequest,
    rows: Sequence[Sequence[Any]],
    secret: Callable[[], str],
    item: Callable[[Any], MemoryItem],
    sort_values: Callable[[Any], tuple[SortValue, ...]],
) -> MemoryQueryOutput:
    """The first ``limit`` of ``rows`` (``seq`` in column 0) as items, and a cursor at
    the last of them when :func:`page_query` found one more row (else ``None``).

    Args:
        request: the parsed QUERY.
        rows: at most ``limit + 1`` rows in page order.
        secret: the store's cursor secret (called only for a next cursor).
        item: the store's row -> :class:`MemoryItem` mapping.
        sort_values: a row's ``(rank, value)`` per sort term, for the cursor.
    """
    page = rows[: request.limit]
    next_cursor = None
    if len(rows) > request.limit:
        last = page[-1]
        next_cursor = encode_cursor(
            request.fingerprint,
            sort_values(last),
            int(last[0]),
            secret(),
            namespace=request.namespace,
        )
    return MemoryQueryOutput(items=[item(row) for row in page], next_cursor=next_cursor)
