"""Records of a SQL store: the select list, row -> item, JSON text, batches and keys.

Every SQL store keeps a memory as one row of a ``memories`` table (aliased ``m``) whose
first columns are :data:`COLUMNS`: the sequence, the id, the key, the content and
metadata as JSON text, the operation id that last wrote it and the two instants
(MEM-DATA-5). A statement selects them first and its own columns after them
(:data:`WIDTH`), and :func:`row_item` reads the record back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Final

from ditto_worker.contracts import MemoryItem
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.wire import trusted

__all__ = [
    "CHUNK",
    "COLUMNS",
    "WIDTH",
    "Row",
    "batch_keys",
    "check_keys",
    "chunks",
    "dump",
    "key_taken",
    "marks",
    "row_item",
    "stored_item",
    "trusted_item",
    "written_item",
]

COLUMNS: Final = (
    "m.seq, m.id, m.key, m.content, m.metadata, m.operation_id, m.created_at, m.updated_at"
)
"""The select list every reader uses; a row starts with these :data:`WIDTH` values."""
WIDTH: Final = 8
"""How many columns :data:`COLUMNS` selects (a statement's own columns follow them)."""
CHUNK: Final = 500
"""Values bound in one ``IN (…)`` list."""
Row = tuple[Any, ...]


_decode: Final = json.JSONDecoder().decode


def _json(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return _decode(value)
    return json.loads(value) if kind is bytes or isinstance(value, str | bytes) else value


def _fields(row: Row) -> dict[str, Any]:
    return {
        "id": row[1],
        "key": row[2],
        "content": _json(row[3]),
        "metadata": None if row[4] is None else _json(row[4]),
        "operation_id": row[5],
        "created_at": row[6],
        "updated_at": row[7],
    }


def row_item(row: Row) -> MemoryItem:
    """The MemoryItem of a row that starts with :data:`COLUMNS` (JSON as text, or as
    the driver decoded it), validated."""
    return MemoryItem(**_fields(row))


_ITEM_FIELDS: Final = tuple(MemoryItem.model_fields)


def trusted_item(fields: dict[str, Any]) -> MemoryItem:
    """A MemoryItem of ``fields`` (every field of :class:`MemoryItem`, by name) that the
    caller knows valid, built without validation (:func:`ditto_worker.wire.trusted`: what
    ``MemoryItem.model_construct(**fields)`` builds, in a sixth of its time).

    For values the store made from validated input (its own ids, timestamps and the
    JSON it dumped); anything else goes through :func:`row_item`.
    """
    return trusted(MemoryItem, fields, _ITEM_FIELDS)


def written_item(row: Row) -> MemoryItem:
    """:func:`row_item` of a row this process has just written from a validated draft (an
    id and timestamps the store made, JSON text it dumped): the same item, without
    validating again what was validated on the way in."""
    return trusted_item(_fields(row))


def stored_item(row: Row) -> MemoryItem:
    """:func:`row_item` of a row read back from a database only the store writes, every
    value of it validated on the way in (MEM-DATA-1, MEM-DATA-4, MEM-DATA-5: a store
    writes no record but from a validated draft or update, with its own ids and
    timestamps) and its JSON text made by :func:`dump`: the same item without the
    second validation (40 µs of a 0.2 ms GET of one record here)."""
    return trusted_item(_fields(row))


def dump(value: Any, where: str) -> str:
    """Compact JSON text, UTF-8 kept raw.

    Raises:
        MemoryError: ``INVALID_INPUT`` naming ``where`` for a value that is not JSON
            (``NaN`` and lone surrogates included).
    """
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        text.encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise MemoryError(ErrorCode.INVALID_INPUT, f"{where} is not valid JSON") from exc
    return text


def chunks(values: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    """``values`` in slices of at most ``size``."""
    for start in range(0, len(values), size):
        yield values[start : start + size]


def marks(values: Sequence[Any], mark: str = "?") -> str:
    """``?,?,…`` (the driver's ``mark``) with one placeholder per value."""
    return ",".join([mark] * len(values))


def batch_keys(keys: Sequence[str | None]) -> dict[str, int]:
    """A WRITE batch's keys (one per draft, ``None``: none) and the index of the draft
    holding each (MEM-WRITE-3).

    Raises:
        MemoryError: ``CONFLICT`` for a key used twice in the batch (nothing written).
    """
    seen: dict[str, int] = {}
    for index, key in enumerate(keys):
        if key is None:
            continue
        if key in seen:
            raise MemoryError(
                ErrorCode.CONFLICT, f"memories[{index}].key repeats memories[{seen[key]}].key"
            )
        seen[key] = index
    return seen


def key_taken(index: int) -> MemoryError:
    """``CONFLICT``: draft ``index``'s key is already stored in the namespace."""
    return MemoryError(ErrorCode.CONFLICT, f"memories[{index}].key already exists in the store")


def check_keys(conn: Any, keys: Sequence[str | None], namespace: str, mark: str = "?") -> None:
    """Check a WRITE batch's keys (one per draft, ``None``: none) against the batch and
    the ``memories`` of ``namespace`` (MEM-WRITE-3; keys are unique per tenant scope), one
    ``SELECT`` per :data:`CHUNK` keys on ``conn`` (its ``execute`` returns a cursor).

    Raises:
        MemoryError: ``CONFLICT`` (nothing written) for a key repeated in the batch or
            already stored.
    """
    seen = batch_keys(keys)
    for chunk in chunks(list(seen)):
        sql = f"SELECT key FROM memories WHERE namespace = {mark} AND key IN ({marks(chunk, mark)})"
        taken = conn.execute(sql, [namespace, *chunk]).fetchone()
        if taken is not None:
            raise key_taken(seen[taken[0]])
