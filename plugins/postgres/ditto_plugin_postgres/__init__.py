"""``ditto_plugin_postgres``: the PostgreSQL MemoryStore of ditto_worker (MEM-PY-10).

A worker builds it through the entry point ``ditto_worker.stores: postgres =
"ditto_plugin_postgres:create_store"``; applications may construct
:class:`PostgresMemoryStore` directly. Install with ``pip install ditto-worker[postgres]``
(psycopg 3 and psycopg-pool). The server URL comes only from the environment
(``DITTO_WORKER_MEMORY_POSTGRES_URL``, MEM-CONF-5); the schema is created by
``ditto-worker migrate --store postgres`` or on first use (``autoMigrate``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

from ditto_plugin_postgres.migrations import LATEST_VERSION, MigrationReport
from ditto_plugin_postgres.store import PostgresMemoryStore
from ditto_worker.config.plugin_settings import number_setting
from ditto_worker.errors import ConfigError
from ditto_worker.sqlkit.settings import SERVER_DEFAULTS, common_arguments, server_values

__all__ = [
    "ENV_SCHEMA",
    "ENV_URL",
    "LATEST_VERSION",
    "MigrationReport",
    "PostgresMemoryStore",
    "create_store",
]

ENV_URL: Final = "DITTO_WORKER_MEMORY_POSTGRES_URL"
"""The environment variable holding the server URL (the only place it is read from)."""
ENV_SCHEMA: Final = "DITTO_WORKER_MEMORY_POSTGRES_SCHEMA"
"""Overrides ``plugins.postgres.schema``."""
_ENV_EMBEDDING: Final = "DITTO_WORKER_MEMORY_POSTGRES_EMBEDDING"

_DEFAULTS: Final[dict[str, Any]] = {"schema": "ditto", "poolMinSize": 1, **SERVER_DEFAULTS}


def create_store(
    settings: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> PostgresMemoryStore:
    """Build the store from ``plugins.postgres`` settings and the environment.

    Args:
        settings: ``schema`` (default ``ditto``), ``poolMinSize`` (1), ``poolMaxSize``
            (4), ``connectTimeoutS`` (5 s), ``poolTimeoutS`` (30 s), ``autoMigrate``
            (true), ``embedding`` (``local`` | ``http`` | ``none``, default ``none``: the
            embedding provider of WRITE/UPDATE and of the ``vector``/``hybrid``
            strategies, :func:`ditto_worker.runtime.registry.build_embedder`) and
            ``hybrid`` (``RetrievalConfig`` settings of the ``hybrid`` strategy),
            ``executionRetentionS`` (86400: how long a committed mutation's execution id
            is remembered, :mod:`ditto_plugin_postgres.executions`),
            ``operationRetentionS`` (2592000, 30 days: how long an operation id answers
            its replay, :mod:`ditto_worker.memory.retention`), ``indexFields``,
            ``queryFields`` (metadata fields QUERY filters and sorts on, indexed;
            :mod:`ditto_plugin_postgres.query_index`). A
            ``url`` key, or any other key, is rejected (MEM-CONF-5).
        env: the environment (default ``os.environ``): ``DITTO_WORKER_MEMORY_POSTGRES_URL``
            (required), ``DITTO_WORKER_MEMORY_POSTGRES_SCHEMA`` and
            ``DITTO_WORKER_MEMORY_POSTGRES_EMBEDDING`` (optional, override the settings);
            ``http`` reads ``DITTO_WORKER_RETRIEVAL_EMBEDDING_*``.

    Returns:
        A store that connects (and migrates, if allowed) on first use.

    Raises:
        ConfigError: a missing URL, an unknown or invalid setting.
        MemoryError: ``EMBEDDING_UNAVAILABLE`` when the local model cannot be loaded.
    """
    env = os.environ if env is None else env
    url, values = server_values("postgres", settings, env, _DEFAULTS, ENV_URL)
    schema = str(env.get(ENV_SCHEMA) or values["schema"])
    pool_min = int(number_setting(values, "postgres", "poolMinSize", 0))
    pool_max = int(number_setting(values, "postgres", "poolMaxSize", 1))
    if pool_max < pool_min:
        raise ConfigError("plugins.postgres.poolMaxSize must be >= poolMinSize")
    common = common_arguments("postgres", values, env, _ENV_EMBEDDING)
    try:
        return PostgresMemoryStore(
            url, schema=schema, pool_min_size=pool_min, pool_max_size=pool_max, **common
        )
    except ValueError as exc:
        raise ConfigError(f"plugins.postgres.schema: {exc}") from exc
