"""LangGraph's own store tests against our ``DittoStore`` (issue 33 item 1's proof).

scripts/langgraph_suites/run.py downloads the pinned sdists (langgraph-checkpoint 4.3.2,
langgraph-checkpoint-sqlite 3.1.2) into ``.cache/langgraph-suites`` (never committed),
runs each test file as its own pytest process from the sdist's root in a virtualenv of its
own, and its shim rebinds ``InMemoryStore`` / ``SqliteStore`` / ``AsyncSqliteStore`` to ours
and counts per test how many of ours it built. All files run once per module (one venv).

The failures allowed are these, each with its reason; anything else failing fails the
test, and the expected failures must still fail (so the list stays true).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import pytest

REPO: Final = Path(__file__).resolve().parents[2]

EXPECTED_FAIL: Final = {
    # reads SQLite internals of LangGraph's SqliteStore
    "tests/test_store.py::test_vector_store_initialization": "store.conn (SQLite internals)",
    "tests/test_store.py::test_nonnull_migrations": "SqliteStore.MIGRATIONS (SQL internals)",
}
KNOWN_GAPS: Final = {
    # LangGraph's own stores pass these; ours does not (docs/integrations-langgraph.md)
    "test_embed_with_path": "one vector per record: LangGraph keeps one per indexed field "
    "and max-pools their scores",
    "tests/test_ttl.py": "supports_ttl is False: put(ttl=...) raises NotImplementedError",
}


def _allowed(nodeid: str, file: str) -> bool:
    name = nodeid.split("[")[0]
    return (
        name in EXPECTED_FAIL
        and "sqlite" in file
        or any(gap in nodeid or gap in file for gap in KNOWN_GAPS)
    )


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("lg") / "results.json"
    cache = REPO / ".cache" / "langgraph-suites"
    command = [sys.executable, str(REPO / "scripts" / "langgraph_suites" / "run.py"),
               "--cache", str(cache), "--json", str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {r["file"]: r for r in json.loads(out.read_text())}


@pytest.mark.timeout(1800)  # the first test runs all four files (about 5 min on 2 busy cores)
@pytest.mark.parametrize(
    ("file", "least_passed"),
    [
        ("langgraph_checkpoint-4.3.2/tests/test_store.py", 85),
        ("langgraph_checkpoint_sqlite-3.1.2/tests/test_store.py", 97),
        ("langgraph_checkpoint_sqlite-3.1.2/tests/test_async_store.py", 38),
        ("langgraph_checkpoint_sqlite-3.1.2/tests/test_ttl.py", 0),
    ],
)
def test_langgraph_store_suite(
    results: dict[str, dict[str, Any]], file: str, least_passed: int
) -> None:
    result = results[file]
    assert result["tests"] > 0, result
    assert result["skipped"] == 0, result  # a skip counts as a failure
    unexpected = [t for t in result["failed_tests"] if not _allowed(t, file)]
    assert not unexpected, unexpected
    assert result["passed"] >= least_passed, result
    if file.endswith("sqlite-3.1.2/tests/test_store.py"):  # still failing, for that reason
        assert set(EXPECTED_FAIL) <= {t.split("[")[0] for t in result["failed_tests"]}
    assert result["passed"] + result["failed"] + result["never_touched_ours"] == result["tests"]
