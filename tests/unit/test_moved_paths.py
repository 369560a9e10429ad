"""Moved modules keep their old import paths (issue 24 item 3, "the house").

Each public name a module exported before a move is still importable from its old path
and is the very same object as at its new home, so user code written against the old
paths keeps working and ``isinstance`` checks agree across both spellings.
"""

from __future__ import annotations

import importlib

import pytest

MOVES: list[tuple[str, str]] = [
    # (old module, new module)
    ("ditto_worker.memory.scope", "ditto_worker.scope"),
    ("ditto_worker.retrieval.pipeline", "ditto_worker.memory.search.pipeline"),
    ("ditto_worker.retrieval.fusion", "ditto_worker.memory.search.fusion"),
    ("ditto_worker.retrieval.context", "ditto_worker.memory.search.scoring"),
    ("ditto_worker.retrieval.settings", "ditto_worker.memory.search.settings"),
    ("ditto_worker.retrieval.delegation", "ditto_worker.memory.remote"),
    ("ditto_worker.memory.filters", "ditto_worker.memory.filter_ast"),
    ("ditto_worker.memory.filters", "ditto_worker.memory.filter_eval"),
    ("ditto_worker.memory.filters", "ditto_worker.memory.timestamps"),
    ("ditto_worker.runtime.definition", "ditto_worker.runtime.node_spec"),
    ("ditto_worker.runtime.graphs", "ditto_worker.runtime.graph_results"),
    ("ditto_worker.fleet.tasks", "ditto_worker.fleet.fleet_runtime"),
    ("ditto_worker.contracts", "ditto_worker.wire"),
]


@pytest.mark.parametrize(("old", "new"), MOVES)
def test_the_old_path_re_exports_every_public_name_of_the_new_one(old: str, new: str) -> None:
    before = importlib.import_module(old)
    after = importlib.import_module(new)
    public = list(getattr(after, "__all__", []))
    assert public, new  # a module that declares nothing would pass the loop vacuously
    for name in public:
        assert getattr(before, name) is getattr(after, name), f"{old}.{name}"
        assert name in before.__all__, f"{old}.__all__ lacks {name}"
