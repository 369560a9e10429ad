"""``ditto_plugin_qdrant``: the Qdrant MemoryStore of ditto_worker (issue 18).

Full memories as point payloads, a named dense vector per embedding identity with
Qdrant's native cosine search, client-side keyword sparse vectors scored with Qdrant's
IDF modifier, on the official ``qdrant-client`` (``pip install "ditto-worker[qdrant]"``):
a server (``QdrantClient(url=…)``) or the client's in-process local mode
(``QdrantClient(path=…)``), one code path for both. A worker builds it through the entry
point ``ditto_worker.stores: qdrant = "ditto_plugin_qdrant:create_store"``; applications
may construct :class:`QdrantMemoryStore` directly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

from ditto_plugin_qdrant.store import DEFAULT_COLLECTION, QdrantMemoryStore
from ditto_worker.config.plugin_settings import (
    flag_setting,
    names_setting,
    number_setting,
    plugin_values,
)
from ditto_worker.errors import ConfigError
from ditto_worker.memory.retention import DEFAULT_OPERATION_RETENTION_S

__all__ = ["DEFAULT_COLLECTION", "DEFAULT_PATH", "QdrantMemoryStore", "create_store"]

DEFAULT_PATH: Final = "./.ditto/qdrant"
"""Local-mode folder when neither a URL nor a path is configured."""
_ENV: Final = "DITTO_WORKER_MEMORY_QDRANT_"
_DEFAULTS: Final[dict[str, Any]] = {
    "url": "",
    "path": "",
    "collection": DEFAULT_COLLECTION,
    "timeoutS": 10.0,
    "embedding": "none",
    "embedKinds": None,
    "hybrid": None,
    "executionRetentionS": 86400.0,
    "operationRetentionS": DEFAULT_OPERATION_RETENTION_S,
    "exactSearch": False,
    "localDurability": "process",
    "payloadIndexes": ["kind"],
}


def create_store(
    settings: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> QdrantMemoryStore:
    """Build the store from ``plugins.qdrant`` settings and the environment.

    Args:
        settings: ``url`` (a server, ``http(s)://host:port``; empty: local mode),
            ``path`` (local-mode folder, default ``./.ditto/qdrant``), ``collection``
            (``ditto_memories``), ``timeoutS`` (10: longest wait for one server request),
            ``embedding`` (``local`` | ``http`` | ``none``, default ``none``:
            :func:`ditto_worker.runtime.registry.build_embedder`), ``embedKinds``
            (``null``: every record with text gets a vector; a list such as
            ``[preference]``: only records whose ``metadata.kind`` is listed),
            ``hybrid`` (``RetrievalConfig`` settings), ``executionRetentionS`` (86400),
            ``operationRetentionS`` (2592000, 30 days; :mod:`ditto_worker.memory.retention`),
            ``exactSearch`` (false: HNSW on a server; local mode is always exact),
            ``localDurability`` (``process`` | ``power``), ``payloadIndexes`` (metadata
            paths indexed on a server, default ``[kind]``). An ``apiKey`` key, or any
            other unknown key, is rejected.
        env: the environment (default ``os.environ``): ``DITTO_WORKER_MEMORY_QDRANT_URL``,
            ``_PATH``, ``_COLLECTION``, ``_EMBEDDING``, ``_EMBED_KINDS`` (comma-separated)
            override the settings; ``_API_KEY`` is the only place the key is read from.

    Returns:
        A store that opens the client and creates the collection on first use.

    Raises:
        ConfigError: an unknown or invalid setting.
        MemoryError: ``EMBEDDING_UNAVAILABLE`` when the local model cannot be loaded.
    """
    env = os.environ if env is None else env
    key = f"{_ENV}API_KEY"
    values = plugin_values("qdrant", settings, _DEFAULTS, {"apiKey": key, "api_key": key})
    url = str(env.get(f"{_ENV}URL") or values["url"] or "").strip() or None
    if url is not None and not url.startswith(("http://", "https://")):
        raise ConfigError("plugins.qdrant.url must start with http:// or https://")
    path = str(env.get(f"{_ENV}PATH") or values["path"] or DEFAULT_PATH)
    collection = str(env.get(f"{_ENV}COLLECTION") or values["collection"])
    if not collection or any(ch in collection for ch in '<>:"/\\|?*\x00'):
        raise ConfigError("plugins.qdrant.collection must be a plain name")
    durability = str(values["localDurability"])
    if durability not in ("process", "power"):
        raise ConfigError("plugins.qdrant.localDurability must be process or power")
    from ditto_worker.memory.search.settings import RetrievalConfig
    from ditto_worker.runtime.registry import build_embedder

    hybrid = RetrievalConfig.parse(values["hybrid"])
    kind = env.get(f"{_ENV}EMBEDDING") or values["embedding"] or "none"
    embedder = build_embedder(str(kind), None, env)
    raw_kinds = env.get(f"{_ENV}EMBED_KINDS") or values["embedKinds"]
    kinds = names_setting(raw_kinds, "qdrant", "embedKinds")
    indexes = names_setting(values["payloadIndexes"], "qdrant", "payloadIndexes") or []
    return QdrantMemoryStore(
        url=url,
        path=None if url else os.path.abspath(os.path.expanduser(path)),
        collection=collection,
        api_key=env.get(f"{_ENV}API_KEY") or None,
        timeout_s=number_setting(values, "qdrant", "timeoutS", 0.1),
        embedder=embedder,
        embed_kinds=kinds,
        hybrid=hybrid,
        execution_retention_s=number_setting(values, "qdrant", "executionRetentionS", 0),
        operation_retention_s=number_setting(values, "qdrant", "operationRetentionS", 1),
        exact_search=flag_setting(values, "qdrant", "exactSearch"),
        durability=durability,
        payload_indexes=indexes,
    )
