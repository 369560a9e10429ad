"""Conformance: cursors cannot be forged, altered or moved (MEM-PY-5, MEM-QUERY-5).

A real ``nextCursor`` with a character appended, inserted, changed or removed, a cursor
of the old unsigned format or forged with the right fingerprint, and signed payloads that
only a leaked secret could make (out-of-range numbers, deep nesting) are all
``INVALID_CURSOR`` on every store — never ``MEMORY_BACKEND_ERROR``. The store's own cursor
still pages (issue 13 item 2).

A cursor issued in one namespace — a scope, the unscoped namespace, or a space within a
scope (``<tenant>:<user>:task:<taskId>``) — is ``INVALID_CURSOR`` in every other, never a
page of that namespace starting after one of its rows (issue 23 item 4: SQLite and Qdrant
accepted t1's cursor under t2 and skipped t2's first 9 rows).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from ditto_worker.errors import ErrorCode
from ditto_worker.memory.cursors import query_fingerprint
from ditto_worker.memory.scope import Scope
from ditto_worker.testing._conformance_harness import Harness

__all__ = ["test_cursor_is_bound_to_its_namespace", "test_cursors_cannot_be_forged_or_altered"]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _edits(token: str) -> list[str]:
    middle = len(token) // 2
    dot = token.index(".")
    swapped = "A" if token[middle] != "A" else "B"
    return [
        token + "!",
        token[:middle] + " " + token[middle:],
        token + "=",
        " " + token,
        token[:middle] + swapped + token[middle + 1 :],
        token[:-1],
        token[:dot],  # payload without its tag
        token[:dot] + "." + token[:dot],
        token[dot + 1 :] + "." + token[:dot],
        token.replace(".", ".."),
    ]


def _forged(fingerprint: str, n_terms: int) -> list[str]:
    keys = [[1, 5]] * n_terms
    payloads: list[Any] = [
        {"v": 1, "f": fingerprint, "k": keys, "s": 10**20},  # the old format, huge seq
        {"v": 1, "f": fingerprint, "k": [[1, 10**400]] * n_terms, "s": 1},
        {"v": 2, "f": fingerprint, "k": keys, "s": 1},
        {"v": 3, "f": fingerprint, "n": "0" * 16, "k": keys, "s": 1},
    ]
    tokens = [_b64(json.dumps(p).encode()) for p in payloads]
    tokens += [t + "." + _b64(b"\0" * 16) for t in tokens]  # a made-up tag
    tokens.append(_b64(b"[" * 50_000 + b"]" * 50_000) + "." + _b64(b"x" * 16))
    return tokens


def test_cursors_cannot_be_forged_or_altered(conformance: Harness) -> None:
    conformance.write([{"key": f"k{i}", "content": i} for i in range(5)])
    page = conformance.page(limit=2)
    token = page.next_cursor
    assert token, "a first page of 2 of 5 records carries a nextCursor"
    fingerprint = query_fingerprint(None, None)
    for bad in [*_edits(token), *_forged(fingerprint, 0)]:
        result = conformance.call("MEMORY.QUERY", {"limit": 2, "cursor": bad})
        assert result.error is not None, f"accepted an altered cursor: {bad[:80]!r}"
        assert result.error.code == "INVALID_CURSOR", (bad[:80], result.error.code)
    rest = conformance.page(limit=10, cursor=token)  # the real one still works
    assert [item.key for item in page.items + rest.items] == [f"k{i}" for i in range(5)]


def test_cursor_is_bound_to_its_namespace(conformance: Harness) -> None:
    if not conformance.caps.scope:
        pytest.skip("scope not declared")
    t1, t2 = Scope("acme", "t1"), Scope("acme", "t2")
    # the task spaces (checkpoints) of t1: the store binds cursors to the namespace string
    # it confines the call to, not to the tenant and user alone
    spaces = [t1, t2, None, Scope.for_task("acme", "t1", "t1"), Scope.for_task("acme", "t1", "t2")]
    assert len({_namespace(s) for s in spaces}) == len(spaces)
    for scope in spaces:
        conformance.scoped(scope).write([{"key": f"k{i}", "content": i} for i in range(12)])
    for issued in spaces:
        h = conformance.scoped(issued)
        first = h.page(limit=9)
        assert first.next_cursor, "a page of 9 of 12 records carries a nextCursor"
        for other in spaces:
            if other == issued:
                continue
            result = conformance.scoped(other).call(
                "MEMORY.QUERY", {"limit": 9, "cursor": first.next_cursor}
            )
            assert result.error is not None, (
                f"a cursor issued in {_namespace(issued)!r} paged {_namespace(other)!r}"
            )
            assert result.error.code == ErrorCode.INVALID_CURSOR, result.error.code
        rest = h.page(limit=9, cursor=first.next_cursor)  # still good where it was issued
        assert [i.key for i in first.items + rest.items] == [f"k{i}" for i in range(12)]
        assert rest.next_cursor is None


def _namespace(scope: Scope | None) -> str:
    """The namespace string of ``scope`` (``""`` for none), for messages."""
    return "" if scope is None else scope.namespace
