"""``ditto_plugin_mysql``: the MySQL / MariaDB MemoryStore of ditto_worker (MEM-PY-10).

A worker builds it through the entry point ``ditto_worker.stores: mysql =
"ditto_plugin_mysql:create_store"``; applications may construct :class:`MysqlMemoryStore`
directly. Install with ``pip install ditto-worker[mysql]`` (PyMySQL, SQLAlchemy's pool,
numpy). The server URL comes only from the environment
(``DITTO_WORKER_MEMORY_MYSQL_URL``, MEM-CONF-5); the schema is created by
``ditto-worker migrate --store mysql`` or on first use (``autoMigrate``). SQL kept to what
MySQL 8.0+ and MariaDB 10.6+ both accept; tested on MariaDB 10.11 (docs/stores-mysql.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

from ditto_plugin_mysql.migrations import LATEST_VERSION, MigrationReport
from ditto_plugin_mysql.store import MysqlMemoryStore
from ditto_worker.config.plugin_settings import flag_setting, number_setting, plugin_values
from ditto_worker.errors import ConfigError
from ditto_worker.memory.indexing import parse_fields, parse_query_fields

__all__ = [
    "ENV_DATABASE",
    "ENV_URL",
    "LATEST_VERSION",
    "MigrationReport",
    "MysqlMemoryStore",
    "create_store",
]

ENV_URL: Final = "DITTO_WORKER_MEMORY_MYSQL_URL"
"""The environment variable holding the server URL (the only place it is read from)."""
ENV_DATABASE: Final = "DITTO_WORKER_MEMORY_MYSQL_DATABASE"
"""Overrides ``plugins.mysql.database``."""
_ENV_EMBEDDING: Final = "DITTO_WORKER_MEMORY_MYSQL_EMBEDDING"

_DEFAULTS: Final[dict[str, Any]] = {
    "database": None,
    "poolMaxSize": 4,
    "connectTimeoutS": 5.0,
    "poolTimeoutS": 30.0,
    "autoMigrate": True,
    "embedding": "none",
    "hybrid": None,
    "executionRetentionS": 86400.0,
    "indexFields": None,
    "queryFields": None,
}


def create_store(
    settings: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> MysqlMemoryStore:
    """Build the store from ``plugins.mysql`` settings and the environment.

    Args:
        settings: ``database`` (default: the URL's database, else ``ditto``),
            ``poolMaxSize`` (4 connections per process), ``connectTimeoutS`` (5 s),
            ``poolTimeoutS`` (30 s), ``autoMigrate`` (true), ``embedding`` (``local`` |
            ``http`` | ``none``, default ``none``:
            :func:`ditto_worker.runtime.registry.build_embedder`), ``hybrid``
            (``RetrievalConfig`` settings of the ``hybrid`` strategy),
            ``executionRetentionS`` (86400), ``indexFields`` (metadata fields indexed
            with the content), ``queryFields`` (metadata fields QUERY filters on, given
            indexed generated columns: :mod:`ditto_plugin_mysql.query_index`). A ``url``
            key, or any other key, is rejected (MEM-CONF-5).
        env: the environment (default ``os.environ``): ``DITTO_WORKER_MEMORY_MYSQL_URL``
            (required, ``mysql://user:password@host:port/database``),
            ``DITTO_WORKER_MEMORY_MYSQL_DATABASE`` and
            ``DITTO_WORKER_MEMORY_MYSQL_EMBEDDING`` (optional, override the settings).

    Returns:
        A store that connects (and migrates, if allowed) on first use.

    Raises:
        ConfigError: a missing or malformed URL, an unknown or invalid setting.
        MemoryError: ``EMBEDDING_UNAVAILABLE`` when the local model cannot be loaded.
    """
    env = os.environ if env is None else env
    values = plugin_values("mysql", settings, _DEFAULTS, {"url": ENV_URL})
    url = env.get(ENV_URL, "")
    if not url:
        raise ConfigError(f"the mysql store needs {ENV_URL} (a mysql:// URL)")
    database = env.get(ENV_DATABASE) or values["database"]
    from ditto_worker.memory.search.settings import RetrievalConfig
    from ditto_worker.runtime.registry import build_embedder

    hybrid = RetrievalConfig.parse(values["hybrid"])
    kind = env.get(_ENV_EMBEDDING) or values["embedding"] or "none"
    embedder = build_embedder(str(kind), None, env)
    try:
        return MysqlMemoryStore(
            url,
            database=None if database is None else str(database),
            pool_max_size=int(number_setting(values, "mysql", "poolMaxSize", 1)),
            connect_timeout_s=number_setting(values, "mysql", "connectTimeoutS", 0.1),
            pool_timeout_s=number_setting(values, "mysql", "poolTimeoutS", 0.1),
            auto_migrate=flag_setting(values, "mysql", "autoMigrate"),
            embedder=embedder,
            hybrid=hybrid,
            execution_retention_s=number_setting(values, "mysql", "executionRetentionS", 0),
            index_fields=parse_fields(values["indexFields"]),
            query_fields=parse_query_fields(values["queryFields"]),
        )
    except ValueError as exc:
        raise ConfigError(f"plugins.mysql: {exc}") from exc
