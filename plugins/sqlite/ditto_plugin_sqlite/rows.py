"""Rows of the ``memories`` table as contract records (shared by store and search)."""

from __future__ import annotations

import json
from typing import Any, Final

from ditto_worker.contracts import MemoryItem

__all__ = ["COLUMNS", "Row", "row_item"]

COLUMNS: Final = "m.seq, m.id, m.key, m.content, m.metadata"
"""The select list every reader uses; a row starts with these five values."""
Row = tuple[Any, ...]


def row_item(row: Row) -> MemoryItem:
    """The MemoryItem of a row that starts with :data:`COLUMNS`."""
    return MemoryItem(
        id=row[1],
        key=row[2],
        content=json.loads(row[3]),
        metadata=None if row[4] is None else json.loads(row[4]),
    )
