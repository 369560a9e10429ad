"""DittoStore.list_namespaces (issue 33 item 1): LangGraph's answers, read in pages of
markers in key order (no scan of every marker), on the embedded runtime."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

pytest.importorskip("langgraph.store.base")

from langgraph.store.memory import InMemoryStore  # noqa: E402

from ditto_worker import create_ditto, create_memory_worker  # noqa: E402
from ditto_worker.config import load_runtime_config  # noqa: E402
from ditto_worker.integrations.langgraph import DittoStore  # noqa: E402
from ditto_worker.integrations.langgraph import records as rec  # noqa: E402
from ditto_worker.testing.memory_store import InMemoryMemoryStore  # noqa: E402

SCOPE = {"tenant": "t1", "user": "u1"}
# labels whose code points sort around the markers' separators and escapes
LABELS = ["a", "a b", "a!", "a\t", "b", "ab", "a~", "é", "\U0001f600", "A", " ", "!", '"', "z"]


class Counting:
    """A runtime whose MEMORY.QUERY calls and the records they return are counted."""

    def __init__(self, runtime: Any) -> None:
        self.runtime, self.queries, self.records = runtime, 0, 0

    def invoke(self, node: str, input: Any, **kwargs: Any) -> Any:
        result = self.runtime.invoke(node, input, **kwargs)
        if node == "MEMORY.QUERY" and result.status == "success":
            self.queries += 1
            self.records += len(result.output.items)
        return result


@pytest.fixture
def runtime() -> Any:
    with create_ditto([create_memory_worker(InMemoryMemoryStore())],
                      load_runtime_config(None, env={})) as rt:  # fmt: skip
        yield rt


def _namespaces() -> list[tuple[str, ...]]:
    pairs = list(itertools.product(LABELS[:7], LABELS))
    return [(a,) for a in LABELS] + pairs[:60] + [(a, b, "m") for a, b in pairs[:30]]


def test_key_order_is_namespace_order() -> None:
    namespaces = _namespaces()
    assert sorted(namespaces, key=rec.namespace_key) == sorted(namespaces)
    for namespace in namespaces:
        span = rec.marker_range(namespace[:1])
        key = rec.namespace_key(namespace)
        assert span["$gte"] <= key < span["$lt"]
        for other in namespaces:
            inside = span["$gte"] <= rec.namespace_key(other) < span["$lt"]
            assert inside == (other[:1] == namespace[:1])


def test_answers_are_langgraph_s(runtime: Any) -> None:
    ours, theirs = DittoStore(runtime, scope=SCOPE), InMemoryStore()
    for i, namespace in enumerate(_namespaces()):
        for store in (ours, theirs):
            store.put(namespace, f"k{i}", {"n": i})
    shapes: list[dict[str, Any]] = [
        {}, {"limit": 7}, {"limit": 5, "offset": 9}, {"offset": 200},
        {"prefix": ("a",)}, {"prefix": ("a", "*")}, {"prefix": ("*", "b")},
        {"suffix": ("m",)}, {"suffix": ("b", "m")}, {"suffix": ("*", "m"), "limit": 4},
        {"prefix": ("a",), "suffix": ("m",)}, {"max_depth": 1}, {"max_depth": 1, "limit": 3},
        {"max_depth": 1, "offset": 4, "limit": 3}, {"max_depth": 2, "prefix": ("a b",)},
        {"max_depth": 2, "suffix": ("m",), "limit": 5, "offset": 2}, {"prefix": ("nothing",)},
    ]  # fmt: skip
    for shape in shapes:
        assert ours.list_namespaces(**shape) == theirs.list_namespaces(**shape), shape


def test_a_page_reads_its_markers_not_every_marker(runtime: Any) -> None:
    counting = Counting(runtime)
    store = DittoStore(counting, scope=SCOPE)  # type: ignore[arg-type]
    namespaces = [("users", f"u{n:03}", "memories") for n in range(300)]
    for n, namespace in enumerate(namespaces):
        store.put(namespace, "k", {"n": n})
    for shape, expected in [
        ({"limit": 10}, namespaces[:10]),
        ({"limit": 10, "offset": 20}, namespaces[20:30]),
        ({"suffix": ("memories",), "max_depth": 2, "limit": 10},
         [namespace[:2] for namespace in namespaces[:10]]),
        ({"prefix": ("users", "u007")}, [namespaces[7]]),
    ]:  # fmt: skip
        counting.queries = counting.records = 0
        assert store.list_namespaces(**shape) == expected, shape
        assert counting.queries == 1 and counting.records <= 30, shape
    counting.queries = counting.records = 0  # one group: each page skips the rest of it
    assert store.list_namespaces(max_depth=1, limit=5) == [("users",)]
    assert counting.records <= 5 and counting.queries <= 2
    counting.queries = counting.records = 0  # limit 100: a first page of 10, not 100
    assert store.list_namespaces(max_depth=1) == [("users",)]
    assert counting.records <= 10 and counting.queries <= 2
    counting.queries = counting.records = 0  # no merge in a page: the next is full size
    assert store.list_namespaces(max_depth=2, limit=50) == [n[:2] for n in namespaces[:50]]
    assert counting.records <= 51 and counting.queries == 2


def test_a_host_record_among_the_markers_is_not_a_namespace(runtime: Any) -> None:
    store = DittoStore(runtime, scope=SCOPE)
    store.put(("a",), "k", {"n": 1})
    drafts = [{"key": rec.namespace_key(("b",)), "content": "the host's own", "metadata": {}}]
    assert runtime.invoke("MEMORY.WRITE", {"memories": drafts}, scope=SCOPE).status == "success"
    assert store.list_namespaces() == [("a",)]
    assert store.list_namespaces(limit=1, offset=1) == []
