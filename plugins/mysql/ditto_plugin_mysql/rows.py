"""Encoding and decoding of records for the MySQL store (no I/O).

JSON goes to the server as compact text (``content``/``metadata`` are ``LONGTEXT``);
rows come back as ``(seq, id, key, content, metadata, operation_id, created_at, updated_at,
…)`` (:data:`COLUMNS`;
:data:`WIDTH` columns, then whatever a statement selects after them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ditto_plugin_mysql.sql import sort_number
from ditto_worker.contracts import MemoryUpdateEntry
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.operations import condition_failed, metadata_holds
from ditto_worker.sqlkit.records import batch_keys, dump
from ditto_worker.sqlkit.records import row_item as item

__all__ = [
    "chunks",
    "COLUMNS",
    "WIDTH",
    "Row",
    "check_batch_keys",
    "check_targets",
    "dump",
    "item",
    "marks",
    "sort_value",
]

Row = tuple[Any, ...]
COLUMNS: Final = (
    "m.seq, m.id, m.`key`, m.content, m.metadata, m.operation_id, m.created_at, m.updated_at"
)
"""The record columns every read selects first."""
WIDTH: Final = 8
"""How many columns :data:`COLUMNS` selects."""


def chunks(values: Sequence[Any], size: int = 1000) -> list[list[Any]]:
    """``values`` in lists of at most ``size`` (one ``IN (…)`` statement each)."""
    return [list(values[i : i + size]) for i in range(0, len(values), size)]


def marks(values: Sequence[Any]) -> str:
    """``%s, %s, …`` for ``values`` (an ``IN`` list; never empty at the call sites)."""
    return ", ".join(["%s"] * len(values))


def sort_value(row: Row, index: int) -> tuple[int, int | float | str]:
    """The cursor sort value ``(rank, value)`` of term ``index`` from its ``r/d/x/t``
    columns (after the :data:`WIDTH` record columns)."""
    start = WIDTH + 4 * index
    rank, double, exact, text = row[start : start + 4]
    if rank in (1, 5):
        return (int(rank), sort_number(None if double is None else float(double), exact))
    if rank == 2:
        raw = text if isinstance(text, bytes | bytearray) else str(text).encode("utf-8")
        return (2, bytes(raw).decode("utf-8"))
    return (int(rank), 0)


def check_batch_keys(keys: Sequence[str | None]) -> None:
    """Check a WRITE batch's keys before any I/O.

    Raises:
        MemoryError: ``CONFLICT`` for a key repeated in the batch (MEM-WRITE-3).
    """
    batch_keys(keys)


def check_targets(entries: Sequence[MemoryUpdateEntry], found: Mapping[str, Row]) -> None:
    """Check an UPDATE batch against its rows (``id -> row`` of :data:`COLUMNS`, locked
    ``FOR UPDATE``) before anything of it is written.

    Raises:
        MemoryError: ``NOT_FOUND`` for an id without a row; ``CONFLICT`` for an
            ``ifMetadata`` the row's metadata does not hold (MEM-UPDATE-5).
    """
    for index, entry in enumerate(entries):
        row = found.get(entry.id)
        if row is None:
            raise MemoryError(ErrorCode.NOT_FOUND, f"memories[{index}]: no memory with this id")
        held = entry.if_metadata
        if held is not None and not metadata_holds(None if row[4] is None else json.loads(row[4]),
                                                   held):  # fmt: skip
            raise condition_failed(index)
