"""Conformance: cursors cannot be forged or altered (MEM-PY-5; issue 13 item 2).

A real ``nextCursor`` with a character appended, inserted, changed or removed, a cursor
of the old unsigned format or forged with the right fingerprint, and signed payloads that
only a leaked secret could make (out-of-range numbers, deep nesting) are all
``INVALID_CURSOR`` on every store — never ``MEMORY_BACKEND_ERROR``. The store's own cursor
still pages.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from ditto_worker.memory.cursors import query_fingerprint
from ditto_worker.testing._conformance_harness import Harness

__all__ = ["test_cursors_cannot_be_forged_or_altered"]


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
