"""The operation ledger's retention on MySQL (issue 37 item 4), beyond the conformance
suite: migration 3 (the ``created_at`` index the prune reads) runs again safely after a
crash before its record, and ``operationRetentionS`` is read from the settings. Tested on
MariaDB 10.11."""

from __future__ import annotations

import pytest

from ditto_plugin_mysql import MysqlMemoryStore, create_store
from ditto_worker.errors import ConfigError

from .test_mysql_exactly_once import _run


def test_migration_3_runs_again_after_a_crash_before_its_record(
    mysql_url: str, mysql_database: str
) -> None:
    store = MysqlMemoryStore(mysql_url, database=mysql_database)
    try:
        store.migrate()
        _run(mysql_url, f"DELETE FROM `{mysql_database}`.ditto_migrations WHERE version = 3")
        assert store.migrate().applied == (3,)
        indexes = _run(
            mysql_url,
            "SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics WHERE "
            f"table_schema = '{mysql_database}' AND table_name = 'operations' "
            "AND index_name = 'operations_created_at'",
        )
        assert indexes == [(1,)]
    finally:
        store.close()


def test_operation_retention_is_a_setting(mysql_url: str, mysql_database: str) -> None:
    env = {"DITTO_WORKER_MEMORY_MYSQL_URL": mysql_url}
    settings = {"database": mysql_database, "operationRetentionS": 3600}
    store = create_store(settings, env)
    try:
        assert store.retention.operation_s == 3600.0
        assert store.retention.execution_s == 86400.0
    finally:
        store.close()
    with pytest.raises(ConfigError, match="operationRetentionS"):
        create_store({**settings, "operationRetentionS": 0}, env)
