"""``ditto-worker migrate --store mysql`` and ``ditto-worker eval locomo --store mysql``
against the test server (tested on MariaDB 10.11)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ditto_worker.cli.commands import app

from .conftest import admin

SAMPLE = Path(__file__).resolve().parents[3] / "ditto_worker" / "cli" / "samples"


def _env(url: str, database: str) -> dict[str, str]:
    return {
        "DITTO_WORKER_MEMORY_MYSQL_URL": url,
        "DITTO_WORKER_MEMORY_MYSQL_DATABASE": database,
        "DITTO_BROKER_URL": "",
    }


def _count(url: str, database: str) -> int:
    conn = admin(url)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM `{database}`.memories")
            return int((cur.fetchone() or (-1,))[0])
    finally:
        conn.close()


def test_migrate_command(
    mysql_url: str, mysql_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    env = _env(mysql_url, mysql_database)
    first = runner.invoke(app, ["migrate", "--store", "mysql"], env=env)
    assert first.exit_code == 0, first.output
    assert f"schema {mysql_database} at version 3 (applied now: 1, 2, 3)" in first.output
    again = runner.invoke(app, ["migrate", "--store", "mysql"], env=env)
    assert again.exit_code == 0 and "(applied now: none)" in again.output
    assert _count(mysql_url, mysql_database) == 0
    bad = _env(mysql_url.replace(":ditto@", ":wrong-pw@"), mysql_database)
    failed = runner.invoke(app, ["migrate", "--store", "mysql"], env=bad)
    assert failed.exit_code == 1 and "wrong-pw" not in failed.output
    missing = runner.invoke(
        app, ["migrate", "--store", "mysql"], env={**bad, "DITTO_WORKER_MEMORY_MYSQL_URL": ""}
    )
    assert missing.exit_code == 2


def test_eval_locomo_on_mysql(
    mysql_url: str, mysql_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the LoCoMo evaluation through an in-process fleet on this store: recall is measured,
    # the rows say @mysql, and the run's records are deleted again
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        app,
        ["eval", "locomo", str(SAMPLE / "conversation.json"), "--store", "mysql",
         "--strategies", "keyword,hybrid"],
        env=_env(mysql_url, mysql_database),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines() if "@mysql" in line]
    assert [row[1] for row in rows] == ["keyword", "hybrid"], result.output
    assert all(float(row[4]) >= 0.5 for row in rows), result.output  # R@10
    assert _count(mysql_url, mysql_database) == 0


def test_eval_locomo_refuses_an_unknown_store(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["eval", "locomo", str(SAMPLE / "conversation.json"), "--store", "nosuch"]
    )
    assert result.exit_code == 2 and "no store plugin named 'nosuch'" in result.output
