"""``ditto_plugin_sqlite``: the embedded SQLite MemoryStore of ditto_worker (MEM-PY-8/10).

A worker builds it through the entry point ``ditto_worker.stores: sqlite =
"ditto_plugin_sqlite:create_store"``; applications may construct
:class:`SqliteMemoryStore` directly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ditto_plugin_sqlite.store import SqliteMemoryStore
from ditto_worker.config.plugin_settings import number_setting
from ditto_worker.errors import ConfigError
from ditto_worker.memory.indexing import parse_fields, parse_query_fields
from ditto_worker.memory.retention import DEFAULT_OPERATION_RETENTION_S
from ditto_worker.sqlkit.settings import search_settings

__all__ = ["DEFAULT_PATH", "SqliteMemoryStore", "create_store"]

DEFAULT_PATH: Final = "./.ditto/memory.sqlite"
"""Default database file, relative to the working folder (MEM-PY-8)."""
_ENV_PATH: Final = "DITTO_WORKER_MEMORY_SQLITE_PATH"
_ENV_BUSY: Final = "DITTO_WORKER_MEMORY_SQLITE_BUSY_TIMEOUT_MS"
_ENV_EMBEDDING: Final = "DITTO_WORKER_MEMORY_SQLITE_EMBEDDING"
_SETTINGS: Final = frozenset(
    {
        "path",
        "busyTimeoutMs",
        "embedding",
        "hybrid",
        "executionRetentionS",
        "operationRetentionS",
        "indexFields",
        "queryFields",
    }
)


def _busy_timeout_ms(settings: Mapping[str, Any], env: Mapping[str, str]) -> int:
    raw: Any = env.get(_ENV_BUSY, settings.get("busyTimeoutMs", 5000))
    try:
        value = int(raw) if not isinstance(raw, bool) else -1
    except (TypeError, ValueError) as exc:
        raise ConfigError("busyTimeoutMs must be a non-negative integer (ms)") from exc
    if value < 0:
        raise ConfigError("busyTimeoutMs must be a non-negative integer (ms)")
    return value


def create_store(
    settings: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    must_exist: bool = False,
) -> SqliteMemoryStore:
    """Build the store from plugin settings and the environment (MEM-PY-8, MEM-CONF-5).

    Args:
        settings: the plugin's ``ditto.yaml`` settings: ``path`` (str, the database file),
            ``busyTimeoutMs`` (int, default 5000), ``embedding`` (``local`` | ``http`` |
            ``none``, default ``none``: the embedding provider of WRITE/UPDATE and of the
            ``vector``/``hybrid`` strategies, :func:`ditto_worker.runtime.
            registry.build_embedder`) and ``hybrid`` (``RetrievalConfig`` settings of
            the ``hybrid`` strategy), ``executionRetentionS`` (how long a committed
            execution id is remembered for exactly-once replays, s; default 86400),
            ``operationRetentionS`` (how long an operation id answers its replay, s;
            default 2592000, 30 days; :mod:`ditto_worker.memory.retention`),
            ``indexFields`` (metadata fields indexed with the content for keyword and
            vector search, default ``[]``; :mod:`ditto_worker.memory.indexing`),
            ``queryFields`` (metadata fields QUERY filters and sorts on, given indexes,
            default ``[]``; :mod:`ditto_plugin_sqlite.query_index`). Other keys are
            rejected.
        env: the environment (default ``os.environ``). ``DITTO_WORKER_MEMORY_SQLITE_PATH``,
            ``DITTO_WORKER_MEMORY_SQLITE_BUSY_TIMEOUT_MS`` and
            ``DITTO_WORKER_MEMORY_SQLITE_EMBEDDING`` override the settings; ``http`` reads
            ``DITTO_WORKER_RETRIEVAL_EMBEDDING_*``.

        must_exist: the file must already exist (a worker that only reads the store, e.g. a
            retrieval target on another machine): nothing is created.

    Returns:
        A store on ``env path > settings path > ./.ditto/memory.sqlite`` (relative paths
        resolved against the working folder); the parent folder is created.

    Raises:
        ConfigError: unknown settings keys, a bad path, timeout, embedding or hybrid value;
            ``StoreMissingError`` (a ConfigError) for a missing file with ``must_exist``.
        MemoryError: ``MEMORY_BACKEND_ERROR`` when the file cannot be opened;
            ``EMBEDDING_UNAVAILABLE`` when the local model cannot be loaded.
    """
    settings = settings or {}
    env = os.environ if env is None else env
    unknown = sorted(set(settings) - _SETTINGS)
    if unknown:
        raise ConfigError(f"unknown sqlite store settings: {', '.join(map(str, unknown))}")
    raw_path = env.get(_ENV_PATH) or settings.get("path") or DEFAULT_PATH
    if not isinstance(raw_path, str | os.PathLike) or str(raw_path) == ":memory:":
        raise ConfigError("the sqlite store path must be a file path")
    path = Path(raw_path).expanduser().resolve()
    if must_exist and not path.is_file():
        from ditto_worker.runtime.registry import StoreMissingError

        raise StoreMissingError(
            f"the sqlite store {path} does not exist; this worker only reads a store (it "
            f"creates none): point plugins.sqlite.path / {_ENV_PATH} at the file the "
            "memory workers write"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    kind = env.get(_ENV_EMBEDDING) or settings.get("embedding")
    embedder, hybrid = search_settings(settings.get("hybrid"), kind, env)
    retention = settings.get("executionRetentionS", 86400)
    if isinstance(retention, bool) or not isinstance(retention, int | float | str):
        raise ConfigError("executionRetentionS must be a number of seconds")
    try:
        retention_s = float(retention)
    except ValueError as exc:
        raise ConfigError("executionRetentionS must be a number of seconds") from exc
    return SqliteMemoryStore(
        path,
        busy_timeout_ms=_busy_timeout_ms(settings, env),
        embedder=embedder,
        hybrid=hybrid,
        execution_retention_s=retention_s,
        operation_retention_s=number_setting(
            {"operationRetentionS": DEFAULT_OPERATION_RETENTION_S, **settings},
            "sqlite",
            "operationRetentionS",
            1,
        ),
        index_fields=parse_fields(settings.get("indexFields")),
        query_fields=parse_query_fields(settings.get("queryFields")),
    )
