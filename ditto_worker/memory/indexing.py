"""What a store indexes besides content: ``indexFields`` (issue 19), for store plugins.

A store may index named top-level metadata fields with each record's content, for keyword
and vector search alike (in the spirit of LangGraph's index ``fields``): keyword search
indexes :func:`ditto_worker.memory.text.keyword_text` with them, a vector is made of
:func:`ditto_worker.memory.text.embedding_text` (``"<values>: <content text>"``, e.g.
``"Caroline: I went to a support group"`` for ``indexFields: [speaker]``).

They are part of the store's preprocessing, like the embedding identity (MEM-RET-4): the
store records the fields its index was built with (setting :data:`INDEX_SETTING`), and a
store configured with other fields fails every call with ``EMBEDDING_MISMATCH`` until
``reindex_embeddings()`` rebuilds the keyword index and the vectors with the new fields.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from ditto_worker.errors import ConfigError, MemoryError
from ditto_worker.memory.filters import parse_field

__all__ = [
    "INDEX_SETTING",
    "decode_fields",
    "encode_fields",
    "fields_mismatch",
    "parse_fields",
    "parse_query_fields",
]

INDEX_SETTING: Final = "index_fields"
"""The store setting holding the fields the index was built with (a JSON list)."""


def parse_fields(value: Any) -> tuple[str, ...]:
    """``indexFields`` from settings: a list of distinct non-empty metadata field names.

    Raises:
        ConfigError: anything else.
    """
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(
        isinstance(name, str) and name and "\x00" not in name for name in value
    ):
        raise ConfigError("indexFields must be a list of metadata field names")
    if len(set(value)) != len(value):
        raise ConfigError("indexFields names a field twice")
    return tuple(value)


def parse_query_fields(value: Any) -> tuple[str, ...] | None:
    """``queryFields`` from settings (issue 28): the metadata fields a deployment filters
    and sorts QUERY on, named as in filters (``user``, ``profile.city``), each indexed
    by the SQL stores. Unlike ``indexFields`` it changes no result, only plans: a field
    declared or removed later is indexed or unindexed when a store opens. ``None`` (the
    key left out) leaves a store's existing query-field indexes alone; a list, even
    empty, is the whole declaration (the others are dropped).

    Raises:
        ConfigError: not a list of distinct metadata field names (a reserved field,
            ``id``/``key``/``createdAt``/``updatedAt``, is a column with its own index).
    """
    if value is None:
        return None
    message = "queryFields must be a list of distinct metadata field names"
    if not isinstance(value, list | tuple) or len(set(map(str, value))) != len(value):
        raise ConfigError(message)
    for name in value:
        try:
            ref = parse_field(name)
        except MemoryError as exc:
            raise ConfigError(f"{message} ({name!r})") from exc
        if ref.reserved or "\x00" in name:
            raise ConfigError(f"{message} ({name!r})")
    return tuple(value)


def encode_fields(fields: Sequence[str]) -> str:
    """The stored form of ``fields`` (a JSON list)."""
    return json.dumps(list(fields), ensure_ascii=False)


def decode_fields(text: str | None) -> tuple[str, ...]:
    """The fields of a stored setting (``None``: none, as before the setting existed)."""
    if text is None:
        return ()
    value = json.loads(text)
    return tuple(str(name) for name in value) if isinstance(value, list) else ()


def fields_mismatch(store: str, configured: Sequence[str], stored: Sequence[str]) -> str | None:
    """The safe ``EMBEDDING_MISMATCH`` message when the fields differ, else ``None``."""
    if tuple(configured) == tuple(stored):
        return None
    return (
        f"this {store} was indexed with indexFields {list(stored)}, but is configured with "
        f"{list(configured)}; run reindex_embeddings() to rebuild its index"
    )
