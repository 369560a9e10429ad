"""LangGraph's own store tests against our ``DittoStore`` (issue 33 item 1's proof).

scripts/langgraph_suites/run.py downloads the pinned sdists (langgraph-checkpoint 4.3.2,
langgraph-checkpoint-sqlite 3.1.2) into ``~/.cache/ditto-worker/langgraph-suites`` (made
once per machine and pin; ``scripts/langgraph_suites/suite_env.py`` says why reusing it is
safe), runs each test file as its own pytest process from the sdist's root in a virtualenv of its
own, and its shim rebinds ``InMemoryStore`` / ``SqliteStore`` / ``AsyncSqliteStore`` to ours
and counts per test how many of ours it built. All files run once per module, on SQLite
and (with ``DITTO_TEST_POSTGRES_URL``) on PostgreSQL, the processes side by side.

The failures allowed are these, each with its reason; anything else failing fails the
test, and the expected failures must still fail (so the list stays true). The counts are
exact: a test that stops building our store, or a new one, shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import pytest

from tests.conftest import postgres_url

pytestmark = pytest.mark.slow

REPO: Final = Path(__file__).resolve().parents[2]

EXPECTED_FAIL: Final = {
    # reads SQLite internals of LangGraph's SqliteStore
    "tests/test_store.py::test_vector_store_initialization": "store.conn (SQLite internals)",
    "tests/test_store.py::test_nonnull_migrations": "SqliteStore.MIGRATIONS (SQL internals)",
}
SQLITE_STORE: Final = "langgraph_checkpoint_sqlite-3.1.2/tests/test_store.py"
COUNTS: Final = {  # file: (passed, expected failures, never touched ours)
    "langgraph_checkpoint-4.3.2/tests/test_store.py": (86, 0, 31),
    SQLITE_STORE: (98, 2, 3),
    "langgraph_checkpoint_sqlite-3.1.2/tests/test_async_store.py": (39, 0, 0),
    "langgraph_checkpoint_sqlite-3.1.2/tests/test_ttl.py": (11, 0, 0),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    out = tmp_path_factory.mktemp("lg") / "results.json"
    stores = ["--store", "sqlite"]
    if os.environ.get("DITTO_TEST_POSTGRES_URL"):
        stores += ["--store", "postgres"]
    command = [sys.executable, str(REPO / "scripts" / "langgraph_suites" / "run.py"),
               *stores, "--json", str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {(r["store"], r["file"]): r for r in json.loads(out.read_text())}


def _check(result: dict[str, Any], file: str) -> None:
    assert result["tests"] > 0, result
    assert result["skipped"] == 0, result  # a skip counts as a failure
    failed = {t.split("[")[0] for t in result["failed_tests"]}
    expected = set(EXPECTED_FAIL) if file == SQLITE_STORE else set()
    assert failed == expected, result  # no other failure; the expected ones still fail
    # (result["tail"]: the end of pytest's output when a test failed)
    passed, expected_fail, untouched = COUNTS[file]
    assert (result["passed"], result["failed"], result["never_touched_ours"]) == (
        passed,
        expected_fail,
        untouched,
    ), result
    assert result["passed"] + result["failed"] + result["never_touched_ours"] == result["tests"]


@pytest.mark.timeout(1800)  # the first test runs every file (minutes on 2 busy cores)
@pytest.mark.parametrize("file", sorted(COUNTS))
def test_langgraph_store_suite_on_sqlite(
    results: dict[tuple[str, str], dict[str, Any]], file: str
) -> None:
    _check(results[("sqlite", file)], file)


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("file", sorted(COUNTS))
def test_langgraph_store_suite_on_postgres(
    results: dict[tuple[str, str], dict[str, Any]], file: str
) -> None:
    postgres_url()  # skipped without one, failing when services are required
    _check(results[("postgres", file)], file)
