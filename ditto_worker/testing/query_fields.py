"""Helpers for a store's ``queryFields`` tests (issue 28 item 3): records whose declared
fields hold every JSON type or are missing, and a QUERY walked page by page, so a store
can show that declaring fields changes its plans and never its results (MEM-PY-5/6)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from ditto_worker.scope import Scope

__all__ = ["every_page", "mixed_records"]

CITIES: list[Any] = ["Oslo", "Rome", 3, None]
ARRAYS: list[Any] = [[1, 2], [3], {"0": 1}, {"0": "x"}, {"1": 2}]
"""``arr`` values: ``arr.0`` is a member ``"0"``, never an array's first element."""


def mixed_records(
    count: int, seed: int, *, fields: Sequence[str], values: Sequence[Any],
    typed_share: float = 0.3, label: str = "record", arrays: bool = False,
) -> list[dict[str, Any]]:  # fmt: skip
    """``count`` WRITE drafts (content ``"<label> <i>"``), the same for the same arguments.

    Each of ``fields`` is present in 85 % of records: one of ``values`` (a ``typed_share``
    of them) or a small integer 0-3; ``profile.city`` in half of them (a string, a number
    or ``null``); with ``arrays``, ``arr`` in half of them (a list or an object).
    """
    rng = random.Random(seed)
    records = []
    for i in range(count):
        metadata: dict[str, Any] = {}
        for name in fields:
            if rng.random() < 0.85:
                typed = rng.random() < typed_share
                metadata[name] = rng.choice(values) if typed else rng.randrange(4)
        if rng.random() < 0.5:
            metadata["profile"] = {"city": rng.choice(CITIES)}
        if arrays and rng.random() < 0.5:
            metadata["arr"] = rng.choice(ARRAYS)
        records.append({"content": f"{label} {i}", "metadata": metadata})
    return records


def every_page(
    memory: Any, query: dict[str, Any], scope: Scope | None = None, limit: int = 9
) -> list[str]:
    """The content of every record ``query`` finds, walked ``limit`` at a time through its
    cursors (``memory``: :func:`ditto_worker.create_memory`'s facade)."""
    seen, cursor = [], None
    while True:
        call = {**query, "limit": limit, **({"cursor": cursor} if cursor else {})}
        result = memory.query(call, scope=scope)
        assert result.status == "success", result.error
        seen += [item.content for item in result.output.items]
        cursor = result.output.next_cursor
        if cursor is None:
            return seen
