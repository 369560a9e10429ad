"""Encoding and decoding of records for the PostgreSQL store (no I/O).

JSON goes to the server as compact text (``content`` as ``json``, ``metadata`` as
``jsonb``); rows come back as ``(seq, id, key, content::text, metadata::text,
operation_id, created_at, updated_at, …)`` (:data:`WIDTH` columns, then whatever a
statement selects after them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from ditto_plugin_postgres.sql import Sql, decimal_value
from ditto_worker.contracts import MemoryUpdateEntry
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.sqlkit.records import batch_keys
from ditto_worker.sqlkit.records import dump as _dump
from ditto_worker.sqlkit.records import row_item as item

__all__ = [
    "WIDTH",
    "Row",
    "check_batch_keys",
    "dump",
    "item",
    "sort_value",
    "update_sql",
]

Row = tuple[Any, ...]
WIDTH: Final = 8
"""How many record columns start a row (``search.COLUMNS``)."""


def dump(value: Any, where: str, nul_ok: bool = True) -> str:
    """Compact JSON text (:func:`ditto_worker.sqlkit.records.dump`); ``INVALID_INPUT``
    when not JSON (or, for jsonb, holding NUL)."""
    text = _dump(value, where)
    if not nul_ok and _has_nul(value):
        raise MemoryError(
            ErrorCode.INVALID_INPUT, f"{where} holds a NUL character (PostgreSQL cannot store it)"
        )
    return text


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in k or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def sort_value(row: Row, index: int) -> tuple[int, int | float | str]:
    """The cursor sort value ``(rank, value)`` of term ``index`` from its ``r/n/t`` columns."""
    rank, number, text = row[WIDTH + 3 * index : WIDTH + 3 + 3 * index]
    if rank in (1, 5):
        return (int(rank), decimal_value(number))
    if rank == 2:
        return (2, str(text))
    return (int(rank), 0)


def check_batch_keys(keys: Sequence[str | None]) -> None:
    """Check a WRITE batch's keys before any I/O.

    Raises:
        MemoryError: ``CONFLICT`` for a key repeated in the batch (MEM-WRITE-3);
            ``INVALID_INPUT`` for a key holding a NUL character.
    """
    for index, key in enumerate(keys):
        if key is not None and "\x00" in key:
            batch_keys(keys[:index])  # a repeat before it is reported first
            raise MemoryError(ErrorCode.INVALID_INPUT, f"memories[{index}].key holds NUL")
    batch_keys(keys)


def update_sql(index: int, entry: MemoryUpdateEntry) -> Sql:
    """``, content = …, metadata = …`` for the fields present in ``entry`` (the keyword
    terms of new content are set by the store, :mod:`.keywords`)."""
    change = Sql("")
    if entry.has_content:
        change.text += ", content = %s::json"
        change.params.append(dump(entry.content, f"memories[{index}].content"))
    if entry.has_metadata:
        change.text += ", metadata = %s::jsonb"
        change.params.append(dump(entry.metadata, f"memories[{index}].metadata", False))
    return change
