"""What a SQL store declares and how its ``create_store`` reads ``plugins.<name>``.

:func:`sql_capabilities` is the :class:`~ditto_worker.memory.capabilities.StoreCapabilities`
every SQL store shares (atomic batches, key conflicts as errors, cancel, scopes,
operation ids, conditional updates, keyword search with per-scope statistics and CJK),
with ``vector`` and ``hybrid`` when it has an embedding provider. :func:`server_values`
and :func:`common_arguments` read the settings a server store (PostgreSQL, MySQL) shares
(:data:`SERVER_DEFAULTS`); :func:`search_settings` builds the embedding provider and the
``hybrid`` settings of any of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from ditto_worker.config.plugin_settings import flag_setting, number_setting, plugin_values
from ditto_worker.errors import ConfigError
from ditto_worker.memory.capabilities import StoreCapabilities, transactional_capabilities
from ditto_worker.memory.indexing import parse_fields, parse_query_fields
from ditto_worker.memory.native import VECTOR_OPTIONS
from ditto_worker.memory.ports import EmbeddingProvider

if TYPE_CHECKING:
    from ditto_worker.memory.search.settings import RetrievalConfig

__all__ = [
    "SERVER_DEFAULTS",
    "common_arguments",
    "search_settings",
    "server_values",
    "sql_capabilities",
]

SERVER_DEFAULTS: Final[Mapping[str, Any]] = {
    "poolMaxSize": 4,
    "connectTimeoutS": 5.0,
    "poolTimeoutS": 30.0,
    "autoMigrate": True,
    "embedding": "none",
    "hybrid": None,
    "executionRetentionS": 86400.0,
    "operationRetentionS": 30 * 86400.0,
    "indexFields": None,
    "queryFields": None,
}
"""The settings of a server store and their defaults: pool size (connections per
process), timeouts (s), ``autoMigrate``, ``embedding`` (``local`` | ``http`` | ``none``),
``hybrid`` (``RetrievalConfig``), ``executionRetentionS`` (s), ``operationRetentionS``
(s, :mod:`ditto_worker.memory.retention`), ``indexFields``,
``queryFields``; a plugin adds its own (``schema``, ``database`` …)."""


def sql_capabilities(
    keyword: tuple[str, ...], extras: frozenset[str], vectors: bool
) -> StoreCapabilities:
    """The capabilities of a SQL store.

    Args:
        keyword: its keyword strategies, the default (``keyword``) first.
        extras: its extra capabilities (``multi_process``, ``driver_cancel`` …).
        vectors: it has an embedding provider: ``vector`` (exhaustive: ``min(limit,
            matches)`` results) and ``hybrid`` are added, and ``embed_on_write``.
    """
    return transactional_capabilities(keyword, extras, VECTOR_OPTIONS if vectors else None)


def search_settings(
    hybrid: Any, kind: Any, env: Mapping[str, str]
) -> tuple[EmbeddingProvider | None, RetrievalConfig]:
    """The embedding provider of ``kind`` (``local`` | ``http`` | ``none``/empty;
    :func:`ditto_worker.runtime.registry.build_embedder`, ``http`` reads
    ``DITTO_WORKER_RETRIEVAL_EMBEDDING_*`` from ``env``) and the parsed ``hybrid``
    settings (parsed first).

    Raises:
        ConfigError: a bad ``hybrid`` or ``embedding`` value.
        MemoryError: ``EMBEDDING_UNAVAILABLE`` when the local model cannot be loaded.
    """
    from ditto_worker.memory.search.settings import RetrievalConfig
    from ditto_worker.runtime.registry import build_embedder

    parsed = RetrievalConfig.parse(hybrid)
    return build_embedder(str(kind or "none"), None, env), parsed


def server_values(
    plugin: str,
    settings: Mapping[str, Any] | None,
    env: Mapping[str, str],
    defaults: Mapping[str, Any],
    env_url: str,
) -> tuple[str, dict[str, Any]]:
    """The server URL (from ``env[env_url]`` only, MEM-CONF-5) and the section's values
    over ``defaults`` (:func:`ditto_worker.config.plugin_settings.plugin_values`).

    Raises:
        ConfigError: a missing URL, a ``url`` key in the file, an unknown key.
    """
    values = plugin_values(plugin, settings, defaults, {"url": env_url})
    url = env.get(env_url, "")
    if not url:
        scheme = "postgresql" if plugin == "postgres" else plugin
        raise ConfigError(f"the {plugin} store needs {env_url} (a {scheme}:// URL)")
    return url, values


def common_arguments(
    plugin: str, values: Mapping[str, Any], env: Mapping[str, str], env_embedding: str
) -> dict[str, Any]:
    """The store constructor's keyword arguments every server store shares, read from
    ``values`` (:data:`SERVER_DEFAULTS`): ``connect_timeout_s``, ``pool_timeout_s``
    (at least 0.1 s), ``auto_migrate``, ``embedder`` (``env[env_embedding]`` overrides
    ``embedding``), ``hybrid``, ``execution_retention_s`` (at least 0),
    ``operation_retention_s`` (at least 1), ``index_fields``, ``query_fields``.

    Raises:
        ConfigError: an invalid value, named ``plugins.<plugin>.<key>``.
        MemoryError: ``EMBEDDING_UNAVAILABLE`` when the local model cannot be loaded.
    """
    embedder, hybrid = search_settings(
        values["hybrid"], env.get(env_embedding) or values["embedding"], env
    )
    return {
        "connect_timeout_s": number_setting(values, plugin, "connectTimeoutS", 0.1),
        "pool_timeout_s": number_setting(values, plugin, "poolTimeoutS", 0.1),
        "auto_migrate": flag_setting(values, plugin, "autoMigrate"),
        "embedder": embedder,
        "hybrid": hybrid,
        "execution_retention_s": number_setting(values, plugin, "executionRetentionS", 0),
        "operation_retention_s": number_setting(values, plugin, "operationRetentionS", 1),
        "index_fields": parse_fields(values["indexFields"]),
        "query_fields": parse_query_fields(values["queryFields"]),
    }
