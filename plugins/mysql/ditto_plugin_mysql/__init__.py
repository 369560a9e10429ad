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
from ditto_worker.config.plugin_settings import number_setting
from ditto_worker.errors import ConfigError
from ditto_worker.sqlkit.settings import SERVER_DEFAULTS, common_arguments, server_values

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

_DEFAULTS: Final[dict[str, Any]] = {"database": None, **SERVER_DEFAULTS}


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
            ``executionRetentionS`` (86400), ``operationRetentionS`` (2592000, 30 days:
            :mod:`ditto_worker.memory.retention`), ``indexFields`` (metadata fields indexed
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
    url, values = server_values("mysql", settings, env, _DEFAULTS, ENV_URL)
    database = env.get(ENV_DATABASE) or values["database"]
    common = common_arguments("mysql", values, env, _ENV_EMBEDDING)
    try:
        return MysqlMemoryStore(
            url,
            database=None if database is None else str(database),
            pool_max_size=int(number_setting(values, "mysql", "poolMaxSize", 1)),
            **common,
        )
    except ValueError as exc:
        raise ConfigError(f"plugins.mysql: {exc}") from exc
