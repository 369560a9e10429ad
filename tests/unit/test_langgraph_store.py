"""DittoStore (LangGraph's BaseStore) on the embedded runtime: scope, timestamps, errors."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph.store.base")

from langgraph.store.base import InvalidNamespaceError  # noqa: E402

from ditto_worker import create_ditto, create_memory_worker  # noqa: E402
from ditto_worker.config import load_runtime_config  # noqa: E402
from ditto_worker.integrations.langgraph import DittoStore  # noqa: E402
from ditto_worker.testing.memory_store import InMemoryMemoryStore  # noqa: E402


@pytest.fixture
def runtime() -> Any:
    with create_ditto([create_memory_worker(InMemoryMemoryStore())],
                      load_runtime_config(None, env={})) as rt:  # fmt: skip
        yield rt


def test_a_namespace_never_names_another_tenant(runtime: Any) -> None:
    mine = DittoStore(runtime, scope={"tenant": "t1", "user": "u1"})
    theirs = DittoStore(runtime, scope={"tenant": "t2", "user": "u1"})
    theirs.put(("t2", "u1"), "secret", {"text": "t2's"})
    theirs.put(("tenant", "t2"), "secret", {"text": "t2's"})
    for namespace in [("t2", "u1"), ("tenant", "t2"), ("t2",)]:
        assert mine.get(namespace, "secret") is None
        assert mine.search(namespace) == []
    assert mine.search(()) == [] and mine.list_namespaces() == []
    mine.put(("t2", "u1"), "secret", {"text": "t1's"})  # the same tuple: t1's own item
    assert theirs.get(("t2", "u1"), "secret").value == {"text": "t2's"}
    assert mine.get(("t2", "u1"), "secret").value == {"text": "t1's"}
    mine.delete(("t2", "u1"), "secret")
    assert theirs.get(("t2", "u1"), "secret") is not None
    assert sorted(theirs.list_namespaces()) == [("t2", "u1"), ("tenant", "t2")]


def test_items_carry_the_store_timestamps(runtime: Any) -> None:
    store = DittoStore(runtime, scope={"tenant": "t1", "user": "u1"})
    store.put(("a",), "k", {"n": 1})
    first = store.get(("a",), "k")
    assert first is not None and first.created_at == first.updated_at
    assert first.created_at.tzinfo is not None
    store.put(("a",), "k", {"n": 2})
    second = store.get(("a",), "k")
    assert second is not None and second.value == {"n": 2}
    assert second.created_at == first.created_at and second.updated_at >= first.updated_at


def test_bad_input_gets_langgraph_error_types(runtime: Any) -> None:
    store = DittoStore(runtime, scope={"tenant": "t1", "user": "u1"})
    with pytest.raises(InvalidNamespaceError):
        store.put(("a.b",), "k", {"n": 1})
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph",), "k", {"n": 1})
    with pytest.raises(ValueError, match="Invalid filter key"):
        store.search(("a",), filter={"x') OR 1=1 --": 1})
    with pytest.raises(ValueError, match="lone surrogate|surrogate"):
        store.put(("a",), "k", {"text": "\ud800"})
    assert store.list_namespaces() == []  # nothing of a refused call was written
