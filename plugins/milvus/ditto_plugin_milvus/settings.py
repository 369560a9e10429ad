"""``create_store``: the Milvus store from ``plugins.milvus`` settings and the environment."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Final

from ditto_plugin_milvus.collection import DEFAULT_COLLECTION, DEFAULT_MESSAGE_BYTES
from ditto_plugin_milvus.store import MilvusMemoryStore
from ditto_worker.config.plugin_settings import (
    flag_setting,
    names_setting,
    number_setting,
    plugin_values,
)
from ditto_worker.errors import ConfigError
from ditto_worker.memory.indexing import parse_fields
from ditto_worker.memory.retention import DEFAULT_OPERATION_RETENTION_S, LedgerRetention

__all__ = ["DEFAULT_URI", "create_store"]

DEFAULT_URI: Final = "./.ditto/milvus.db"
"""Milvus Lite's data folder when no URI is configured."""
_ENV: Final = "DITTO_WORKER_MEMORY_MILVUS_"
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_DEFAULTS: Final[dict[str, Any]] = {
    "uri": DEFAULT_URI,
    "dbName": "",
    "collection": DEFAULT_COLLECTION,
    "timeoutS": 10.0,
    "embedding": "none",
    "embedKinds": None,
    "hybrid": None,
    "vectorIndex": "FLAT",
    "maxMessageBytes": DEFAULT_MESSAGE_BYTES,
    "collectionPerScope": False,
    "indexFields": None,
    "executionRetentionS": 86400.0,
    "operationRetentionS": DEFAULT_OPERATION_RETENTION_S,
}


def _uri(text: str) -> str:
    if text.startswith(("http://", "https://", "tcp://")):
        if "@" in text.split("//", 1)[1].split("/", 1)[0]:
            raise ConfigError(
                f"plugins.milvus.uri must not carry credentials: set {_ENV}TOKEN instead"
            )
        return text
    if not text.endswith(".db"):
        raise ConfigError(
            "plugins.milvus.uri must be http(s)://host:port (a server) or a path ending "
            "in .db (Milvus Lite)"
        )
    return os.path.abspath(os.path.expanduser(text))


def create_store(
    settings: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> MilvusMemoryStore:
    """Build the store from ``plugins.milvus`` settings and the environment.

    Args:
        settings: ``uri`` (``http(s)://host:19530``: a server; a path ending in ``.db``:
            Milvus Lite's data folder, default ``./.ditto/milvus.db``), ``dbName`` (the
            Milvus database, default the server's), ``collection`` (``ditto_memories``),
            ``timeoutS`` (10: longest wait for one gRPC call), ``embedding`` (``local`` |
            ``http`` | ``none``, default ``none``:
            :func:`ditto_worker.runtime.registry.build_embedder`), ``embedKinds``
            (``null``: every record with text gets a vector; a list such as
            ``[preference]``: only records whose ``metadata.kind`` is listed), ``hybrid``
            (``RetrievalConfig`` settings), ``vectorIndex`` (``FLAT``: exact, default;
            ``HNSW``), ``maxMessageBytes`` (4 MiB: largest insert request),
            ``collectionPerScope`` (false: one collection for every scope; true: one per
            scope, keyword statistics the scope's own), ``indexFields`` (metadata fields
            indexed with the content, e.g. ``[speaker]``), ``executionRetentionS`` (86400:
            how long a redelivered call finds its execution entry) and
            ``operationRetentionS`` (2592000, 30 days; :mod:`ditto_worker.memory.retention`).
            A ``token`` or
            ``password`` key, or any other unknown key, is rejected.
        env: the environment (default ``os.environ``): ``DITTO_WORKER_MEMORY_MILVUS_URI``,
            ``_DB_NAME``, ``_COLLECTION``, ``_EMBEDDING``, ``_EMBED_KINDS``
            (comma-separated) override the settings; ``_TOKEN`` is the only place the
            token (``user:password`` or an API key) is read from.

    Returns:
        A store that opens the client and creates the collection on first use.

    Raises:
        ConfigError: an unknown or invalid setting.
        MemoryError: ``EMBEDDING_UNAVAILABLE`` when the local model cannot be loaded.
    """
    env = os.environ if env is None else env
    secrets = dict.fromkeys(("token", "password", "user"), f"{_ENV}TOKEN")
    values = plugin_values("milvus", settings, _DEFAULTS, secrets)
    uri = _uri(str(env.get(f"{_ENV}URI") or values["uri"] or DEFAULT_URI).strip())
    collection = str(env.get(f"{_ENV}COLLECTION") or values["collection"])
    if not _NAME.fullmatch(collection):
        raise ConfigError("plugins.milvus.collection must be letters, digits and _ (not first)")
    index = str(values["vectorIndex"]).upper()
    if index not in ("FLAT", "HNSW"):
        raise ConfigError("plugins.milvus.vectorIndex must be FLAT or HNSW")
    from ditto_worker.memory.search.settings import RetrievalConfig
    from ditto_worker.runtime.registry import build_embedder

    hybrid = RetrievalConfig.parse(values["hybrid"])
    kind = env.get(f"{_ENV}EMBEDDING") or values["embedding"] or "none"
    embedder = build_embedder(str(kind), None, env)
    kinds = env.get(f"{_ENV}EMBED_KINDS") or values["embedKinds"]
    retention = LedgerRetention(
        number_setting(values, "milvus", "operationRetentionS", 1),
        number_setting(values, "milvus", "executionRetentionS", 0),
    )
    store = MilvusMemoryStore(
        uri=uri,
        token=env.get(f"{_ENV}TOKEN") or None,
        db_name=str(env.get(f"{_ENV}DB_NAME") or values["dbName"] or ""),
        collection=collection,
        timeout_s=number_setting(values, "milvus", "timeoutS", 0.1),
        embedder=embedder,
        embed_kinds=names_setting(kinds, "milvus", "embedKinds"),
        hybrid=hybrid,
        vector_index=index,
        max_message_bytes=int(number_setting(values, "milvus", "maxMessageBytes", 1024)),
        collection_per_scope=flag_setting(values, "milvus", "collectionPerScope"),
        index_fields=parse_fields(values["indexFields"]),
    )
    store.retention = retention
    return store
