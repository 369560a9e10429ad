"""Rows of the ``memories`` table: JSON columns, contract records, key checks, chunking
(shared by the store and its search)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Final

from ditto_plugin_sqlite.driver import Connection
from ditto_worker.contracts import MemoryDraft, MemoryItem
from ditto_worker.errors import ErrorCode, MemoryError

__all__ = [
    "CHUNK",
    "COLUMNS",
    "WIDTH",
    "Row",
    "check_keys",
    "chunks",
    "dump",
    "marks",
    "row_item",
    "written_item",
]

CHUNK: Final = 500
"""Most values bound in one ``IN (...)`` list."""

COLUMNS: Final = (
    "m.seq, m.id, m.key, m.content, m.metadata, m.operation_id, m.created_at, m.updated_at"
)
"""The select list every reader uses; a row starts with these :data:`WIDTH` values."""
WIDTH: Final = 8
"""How many columns :data:`COLUMNS` selects (a statement's own columns follow them)."""
Row = tuple[Any, ...]


def row_item(row: Row) -> MemoryItem:
    """The MemoryItem of a row that starts with :data:`COLUMNS`."""
    return MemoryItem(
        id=row[1],
        key=row[2],
        content=json.loads(row[3]),
        metadata=None if row[4] is None else json.loads(row[4]),
        operation_id=row[5],
        created_at=row[6],
        updated_at=row[7],
    )


def written_item(row: Row) -> MemoryItem:
    """:func:`row_item` of a row this process has just written from a validated draft (an
    id and timestamps the store made, JSON text it dumped): the same item, without
    validating again what was validated on the way in."""
    return MemoryItem.model_construct(
        id=row[1],
        key=row[2],
        content=json.loads(row[3]),
        metadata=None if row[4] is None else json.loads(row[4]),
        operation_id=row[5],
        created_at=row[6],
        updated_at=row[7],
    )


def dump(value: Any, where: str) -> str:
    """Compact JSON text (UTF-8 kept raw, see :mod:`ditto_plugin_sqlite.sql`)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        text.encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise MemoryError(ErrorCode.INVALID_INPUT, f"{where} is not valid JSON") from exc
    return text


def chunks(values: Sequence[Any]) -> Iterable[Sequence[Any]]:
    """``values`` in slices of at most :data:`CHUNK`."""
    for start in range(0, len(values), CHUNK):
        yield values[start : start + CHUNK]


def marks(values: Sequence[Any]) -> str:
    """``?,?,…`` with one placeholder per value."""
    return ",".join("?" * len(values))


def check_keys(conn: Connection, drafts: Sequence[MemoryDraft], namespace: str) -> None:
    """Raise CONFLICT for a key used twice in the batch or already stored in ``namespace``
    (MEM-WRITE-3; keys are unique per tenant scope)."""
    seen: dict[str, int] = {}
    for index, draft in enumerate(drafts):
        if draft.key is None:
            continue
        if draft.key in seen:
            raise MemoryError(
                ErrorCode.CONFLICT, f"memories[{index}].key repeats memories[{seen[draft.key]}].key"
            )
        seen[draft.key] = index
    keys = list(seen)
    for chunk in chunks(keys):
        sql = f"SELECT key FROM memories WHERE namespace = ? AND key IN ({marks(chunk)})"
        row = conn.execute(sql, [namespace, *chunk])
        taken = row.fetchone()
        if taken is not None:
            raise MemoryError(
                ErrorCode.CONFLICT, f"memories[{seen[taken[0]]}].key already exists in the store"
            )
