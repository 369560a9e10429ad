"""Issue 13 across a real broker: what the SDK refuses is refused the same way when the call
travels as JSON through Redis to a Celery worker (lone surrogates, timestamps with offsets,
altered cursors, undeclared SEARCH options)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker import create_memory_worker
from ditto_worker.fleet.client import DittoClient

pytestmark = pytest.mark.integration


def _code(result: Any) -> str:
    assert result.status != "success" and result.error is not None, result
    return str(result.error.code)


def test_issue_13_cases_cross_the_broker(
    start_fleet_worker: Any, client: DittoClient, tmp_path: Path
) -> None:
    path = tmp_path / "memory.sqlite"
    with start_fleet_worker(lambda: create_memory_worker(SqliteMemoryStore(path))):
        before = datetime.now(UTC)
        written = client.invoke(
            "MEMORY.WRITE",
            {
                "memories": [
                    {"key": f"k{i}", "content": "hello", "metadata": {"tag": "t"}} for i in range(3)
                ]
            },  # fmt: skip
            timeout=20,
        )
        assert written.status == "success", written.error
        # item 3: lone surrogates, as JSON text, in a filter value, a filter key, a query
        for node, text in [
            ("MEMORY.QUERY", '{"filter": {"tag": "hello \\ud83d"}}'),
            ("MEMORY.QUERY", '{"filter": {"t\\udc00ag": "t"}}'),
            ("MEMORY.SEARCH", '{"query": "hello \\ud83d"}'),
            ("MEMORY.WRITE", '{"memories": [{"content": "x", "key": "\\ud800"}]}'),
        ]:
            result = client.invoke(node, json.loads(text), timeout=20)
            assert _code(result) == "INVALID_INPUT" and "lone surrogate" in result.error.message
        # item 4: bounds with offsets compare as instants
        bound = (before - timedelta(seconds=1)).astimezone(timezone(timedelta(hours=5)))
        found = client.invoke(
            "MEMORY.QUERY", {"filter": {"createdAt": {"$gte": bound.isoformat()}}}, timeout=20
        )
        assert found.output is not None and len(found.output.items) == 3, found.error
        late = (datetime.now(UTC) + timedelta(hours=1)).astimezone(timezone(timedelta(hours=-7)))
        found = client.invoke(
            "MEMORY.QUERY", {"filter": {"createdAt": {"$lt": late.isoformat()}}}, timeout=20
        )
        assert found.output is not None and len(found.output.items) == 3, found.error
        bad = client.invoke("MEMORY.QUERY", {"filter": {"createdAt": "yesterday"}}, timeout=20)
        assert _code(bad) == "INVALID_INPUT"
        # item 2: an altered cursor
        page = client.invoke("MEMORY.QUERY", {"limit": 2}, timeout=20)
        assert page.output is not None and page.output.next_cursor
        for cursor in (page.output.next_cursor + "!", " " + page.output.next_cursor):
            altered = client.invoke("MEMORY.QUERY", {"limit": 2, "cursor": cursor}, timeout=20)
            assert _code(altered) == "INVALID_CURSOR"
        rest = client.invoke(
            "MEMORY.QUERY", {"limit": 2, "cursor": page.output.next_cursor}, timeout=20
        )
        assert rest.output is not None and len(rest.output.items) == 1
        # item 7: a SEARCH option the store does not read
        refused = client.invoke(
            "MEMORY.SEARCH", {"query": "hello", "options": {"k": 1}}, timeout=20
        )
        assert _code(refused) == "INVALID_INPUT" and "options.k" in refused.error.message
