"""Rows of the Milvus store: the collection schema, a memory as fields, size checks, chunks.

One collection holds every namespace's memories, one row each::

    id       VARCHAR(64), primary key     the memory id (a UUID string)
    ns       VARCHAR, INVERTED index       the tenant namespace (ditto_worker.memory.scope)
    key      VARCHAR, nullable, INVERTED   the memory's key (null when none)
    seq      INT64, INVERTED               creation instant, µs since the epoch (the sequence)
    upd      INT64, INVERTED               last update instant, µs since the epoch
    content  JSON  {"v": <content>,        wrapped: Milvus reads a top-level JSON string back
                    "op": <operation id>}  badly, and a null value would be a null field;
    metadata JSON  {"v": <metadata>}       "op" only on a record an operation id wrote
    sh       JSON  {"ft","fn","fs","fb"}   typed shadow fields (ditto_plugin_milvus.expressions)
    terms    VARCHAR, standard analyzer    keyword tokens (ditto_plugin_milvus.keywords)
    sparse   SPARSE_FLOAT_VECTOR           BM25 function output of ``terms``
    dense    FLOAT_VECTOR(dims)            with an embedding provider only; COSINE
    dv       BOOL                          the row has a real dense vector

Milvus has no nullable vector on every version, so a row without an embedding (no text,
or outside the embed policy) stores a fixed unit vector and ``dv = false``; vector search
filters on ``dv``. The operation id (SPEC.md MEM-RUN-7, :mod:`ditto_plugin_milvus.operations`)
rides in the content wrapper rather than in a field of its own: Milvus Lite cannot add a
field to an existing collection, and collections made before it keep working (their
records have no ``op``).

Size limits (checked before anything is sent, ``INVALID_INPUT`` naming the field): a
JSON field holds at most :data:`MAX_JSON_BYTES` (65,536) bytes — Milvus's limit — so
``content`` and ``metadata`` (as stored, wrapped) and the shadow fields of the metadata
must fit; a key at most :data:`MAX_KEY_BYTES` bytes (a VARCHAR's limit).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from pymilvus import DataType, Function, FunctionType, MilvusClient
from pymilvus.milvus_client.index import IndexParams

from ditto_plugin_milvus.expressions import CREATED, UPDATED, iso, shadow_fields
from ditto_worker.contracts import MemoryItem
from ditto_worker.errors import ErrorCode, MemoryError

__all__ = [
    "MAX_JSON_BYTES",
    "MAX_KEY_BYTES",
    "OUTPUT",
    "chunks",
    "index_params",
    "item",
    "json_text",
    "memory_row",
    "row_bytes",
    "row_operation",
    "schema",
]

MAX_JSON_BYTES: Final = 65_536
"""Largest JSON field value Milvus stores, bytes (UTF-8 text)."""
MAX_KEY_BYTES: Final = 65_535
"""Largest VARCHAR value, bytes (UTF-8)."""
OUTPUT: Final = ["id", "key", CREATED, UPDATED, "content", "metadata"]
"""Fields read for a full MemoryItem (and its tie-break)."""


def schema(dims: int | None) -> Any:
    """The collection schema (module docstring); ``dims=None``: no dense vector."""
    s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("id", DataType.VARCHAR, max_length=64, is_primary=True)
    s.add_field("ns", DataType.VARCHAR, max_length=MAX_KEY_BYTES)
    s.add_field("key", DataType.VARCHAR, max_length=MAX_KEY_BYTES, nullable=True)
    s.add_field(CREATED, DataType.INT64)
    s.add_field(UPDATED, DataType.INT64)
    s.add_field("content", DataType.JSON)
    s.add_field("metadata", DataType.JSON)
    s.add_field("sh", DataType.JSON)
    s.add_field(
        "terms",
        DataType.VARCHAR,
        max_length=MAX_KEY_BYTES,
        enable_analyzer=True,
        analyzer_params={"type": "standard"},
    )
    s.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    s.add_function(
        Function(
            name="bm25",
            function_type=FunctionType.BM25,
            input_field_names=["terms"],
            output_field_names=["sparse"],
        )
    )
    if dims is not None:
        s.add_field("dense", DataType.FLOAT_VECTOR, dim=dims)
        s.add_field("dv", DataType.BOOL)
    return s


def index_params(dims: int | None, vector_index: str) -> IndexParams:
    """BM25 on ``sparse``, COSINE on ``dense`` (``FLAT``: exact, or ``HNSW``), INVERTED
    scalar indexes on the scope, key and instants."""
    params = MilvusClient.prepare_index_params()
    params.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    if dims is not None:
        params.add_index("dense", index_type=vector_index, metric_type="COSINE")
    for name in ("ns", "key", CREATED, UPDATED):
        params.add_index(name, index_type="INVERTED")
    return params


def json_text(value: Any) -> str:
    """Compact JSON text (what is sent and what the size limit is measured on)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _checked(value: Any, where: str) -> str:
    try:
        text = json_text(value)
    except (TypeError, ValueError) as exc:
        raise MemoryError(ErrorCode.INVALID_INPUT, f"{where} is not valid JSON") from exc
    size = len(text.encode("utf-8"))
    if size > MAX_JSON_BYTES:
        raise MemoryError(
            ErrorCode.INVALID_INPUT,
            f"{where} is {size} bytes as stored JSON; the Milvus store keeps at most "
            f"{MAX_JSON_BYTES} (Milvus's JSON field limit)",
        )
    return text


def memory_row(
    where: str,
    *,
    ns: str,
    memory_id: str,
    key: str | None,
    content: Any,
    metadata: Mapping[str, Any] | None,
    created_us: int,
    updated_us: int,
    terms: str,
    dense: list[float] | None,
    dims: int | None,
    operation_id: str | None = None,
) -> dict[str, Any]:
    """The row of one memory (module docstring); JSON fields as checked JSON text;
    ``operation_id``: the operation that writes this state (``None``: none).

    Raises:
        MemoryError: ``INVALID_INPUT`` naming ``where`` + the field for JSON over the
            size limit or a key over :data:`MAX_KEY_BYTES`.
    """
    if key is not None and len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise MemoryError(
            ErrorCode.INVALID_INPUT, f"{where}.key is longer than {MAX_KEY_BYTES} bytes"
        )
    row: dict[str, Any] = {
        "id": memory_id,
        "ns": ns,
        "key": key,
        CREATED: created_us,
        UPDATED: updated_us,
        "content": _checked(
            {"v": content} if operation_id is None else {"v": content, "op": operation_id},
            f"{where}.content",
        ),
        "metadata": _checked(
            {"v": None if metadata is None else dict(metadata)}, f"{where}.metadata"
        ),
        "sh": _checked(shadow_fields(metadata), f"{where}.metadata (its filter index)"),
        "terms": terms,
    }
    if dims is not None:
        row["dv"] = dense is not None
        row["dense"] = dense if dense is not None else [1.0] + [0.0] * (dims - 1)
    return row


def row_bytes(row: Mapping[str, Any]) -> int:
    """A row's approximate size in a gRPC message, bytes."""
    size = 64
    for value in row.values():
        if isinstance(value, str):
            size += len(value.encode("utf-8"))
        elif isinstance(value, list):
            size += 4 * len(value)
        else:
            size += 8
    return size


def chunks(rows: Sequence[dict[str, Any]], max_bytes: int) -> Iterable[list[dict[str, Any]]]:
    """``rows`` in consecutive chunks of at most ``max_bytes`` each (by :func:`row_bytes`;
    a single larger row is a chunk of its own)."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for row in rows:
        n = row_bytes(row)
        if chunk and size + n > max_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append(row)
        size += n
    if chunk:
        yield chunk


def _unwrap(value: Any) -> Any:
    if isinstance(value, str | bytes):
        value = json.loads(value)
    return value.get("v") if isinstance(value, dict) else None


def row_operation(row: Mapping[str, Any]) -> str | None:
    """The operation id a row read with ``content`` carries, or ``None``."""
    value = row.get("content")
    if isinstance(value, str | bytes):
        value = json.loads(value)
    op = value.get("op") if isinstance(value, dict) else None
    return op if isinstance(op, str) else None


def item(row: Mapping[str, Any]) -> MemoryItem:
    """The MemoryItem of a row read with :data:`OUTPUT`."""
    return MemoryItem(
        id=row["id"],
        key=row.get("key"),
        content=_unwrap(row.get("content")),
        metadata=_unwrap(row.get("metadata")),
        operation_id=row_operation(row),
        created_at=_instant(row.get(CREATED)),
        updated_at=_instant(row.get(UPDATED)),
    )


def _instant(us: Any) -> str | None:
    """The RFC 3339 form of a stored microsecond count (``None`` when not read)."""
    return None if us is None else iso(int(us))
