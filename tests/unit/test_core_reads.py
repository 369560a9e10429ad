"""The SDK's read nodes: MEMORY.GET, MEMORY.QUERY (the core's part) and MEMORY.SEARCH."""

from __future__ import annotations

from typing import Any

import pytest

from ditto_worker import (
    MemoryError,
    MemoryGetInput,
    MemoryItem,
    MemoryQueryInput,
    MemoryQueryOutput,
    MemorySearchInput,
    MemorySearchResult,
    create_memory,
    to_wire,
)
from tests.unit._spies import SearchSpy, Spy, code, err, out


def item(id: str, key: str | None = None, content: Any = "c") -> dict[str, Any]:
    out: dict[str, Any] = {"id": id, "content": content}
    if key is not None:
        out["key"] = key
    return out


def hit(id: str, score: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"memory": item(id)}
    if score is not None:
        out["score"] = score
    return out


# --- MEM-GET ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "returned", "expected"),
    [
        ({"ids": ["a"]}, [item("a")], ["a"]),
        ({"keys": ["ka"]}, [item("a", "ka")], ["a"]),
        ({"ids": ["a"], "keys": ["kb"]}, [item("b", "kb"), item("a")], ["a", "b"]),
    ],
)
def test_get_ids_keys_or_both_union(request_: Any, returned: Any, expected: Any) -> None:
    # MEM-GET-1: ids, keys or both; the result is their union
    result = create_memory(Spy(get=returned)).get(request_)
    assert result.status == "success"
    assert [i.id for i in out(result)] == expected
    assert all(isinstance(i, MemoryItem) for i in out(result))


@pytest.mark.parametrize("request_", [{}, {"ids": None}, {"ids": None, "keys": None}])
def test_get_needs_ids_or_keys(request_: Any) -> None:
    # MEM-GET-1: neither ids nor keys -> INVALID_INPUT, plugin not called
    spy = Spy()
    result = create_memory(spy).get(request_)
    assert (result.status, code(result)) == ("failed", "INVALID_INPUT")
    assert "ids" in err(result).message and "keys" in err(result).message
    assert spy.calls == []


def test_get_dedupes_inputs_and_omits_missing_records() -> None:
    # MEM-GET-2: inputs de-duplicated before the plugin; records not returned are omitted
    spy = Spy(get=[item("a")])
    result = create_memory(spy).get({"ids": ["a", "b", "a"], "keys": ["k", "k"]})
    sent = spy.calls[0][1]
    assert isinstance(sent, MemoryGetInput)
    assert (sent.ids, sent.keys) == (["a", "b"], ["k"])
    assert [i.id for i in out(result)] == ["a"]


def test_get_order_is_ids_then_keys_each_record_once() -> None:
    # MEM-GET-3: requested ids order, then keys order; a record matched twice appears once
    returned = [item("k2", "two"), item("b", "one"), item("a", "kb"), item("a", "kb")]
    result = create_memory(Spy(get=returned)).get({"ids": ["b", "a"], "keys": ["two", "kb", "one"]})
    assert result.status == "success"
    assert [i.id for i in out(result)] == ["b", "a", "k2"]


@pytest.mark.parametrize("request_", [{"ids": [], "keys": []}, {"ids": []}, {"keys": []}])
def test_get_empty_lists_return_empty_without_plugin(request_: Any) -> None:
    # MEM-GET-4: both lists empty -> [] without calling the plugin
    spy = Spy(get=AssertionError("must not be called"))
    result = create_memory(spy).get(request_)
    assert (result.status, result.output) == ("success", [])
    assert spy.calls == []


def test_get_two_ids_with_one_key_is_invalid_backend_output() -> None:
    # MEM-GET-5: two different ids returning the same key violate the plugin contract
    result = create_memory(Spy(get=[item("a", "k"), item("b", "k")])).get({"ids": ["a", "b"]})
    assert code(result) == "INVALID_BACKEND_OUTPUT"
    assert "MEM-GET-5" in err(result).message


@pytest.mark.parametrize(
    "returned",
    [
        [item("a"), item("zzz")],  # unrequested record (MEM-GET-2)
        [item("a", content=1), item("a", content=2)],  # one id, two different records
        [{"id": "a"}],  # no content
        [{"id": "", "content": 1}],  # empty id (MEM-DATA-1)
        {"id": "a", "content": 1},  # not a list
    ],
)
def test_get_bad_plugin_output(returned: Any) -> None:
    # MEM-GET-2 / MEM-ERR-2: unrequested or malformed records -> INVALID_BACKEND_OUTPUT
    result = create_memory(Spy(get=returned)).get({"ids": ["a"]})
    assert (result.status, code(result)) == ("failed", "INVALID_BACKEND_OUTPUT")


def test_get_never_searches() -> None:
    # MEM-GET-6: GET is an exact read; the search provider is never consulted
    store, provider = SearchSpy(get=[item("a")]), SearchSpy()
    create_memory(store, provider).get({"keys": ["pref"]})
    assert store.ops() == ["get"] and provider.calls == []


# --- MEM-QUERY (the core's part) ------------------------------------------------------


def test_query_passes_filter_order_by_cursor_through() -> None:
    # MEM-QUERY-1: filter, orderBy, limit, cursor passed through; filter is never SQL
    spy = Spy()
    filter_ = {"$or": [{"state": "active"}, {"note": "x'; DROP TABLE m; --"}]}
    create_memory(spy).query(
        {"filter": filter_, "orderBy": [{"field": "createdAt"}], "limit": 3, "cursor": "opaque"}
    )
    sent = spy.calls[0][1]
    assert isinstance(sent, MemoryQueryInput)
    assert sent.filter == filter_
    assert to_wire(sent)["orderBy"] == [{"field": "createdAt", "direction": "asc"}]
    assert (sent.limit, sent.cursor) == (3, "opaque")


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        ({"cursor": ""}, "cursor"),
        ({"cursor": 5}, "cursor"),
        ({"orderBy": [{"field": "a", "direction": "up"}]}, "orderBy[0].direction"),
        ({"orderBy": [{"direction": "asc"}]}, "orderBy[0].field"),
        ({"filter": "state = 'x'"}, "filter"),
    ],
)
def test_query_input_checked_before_plugin(request_: Any, field: str) -> None:
    # MEM-QUERY-1 / MEM-ERR-1: cursor non-empty string, orderBy directions, filter object
    spy = Spy()
    result = create_memory(spy).query(request_)
    assert code(result) == "INVALID_INPUT" and field in err(result).message
    assert spy.calls == []


def test_query_last_page_omits_next_cursor() -> None:
    # MEM-QUERY-2: the last page omits nextCursor on the wire
    result = create_memory(Spy(query={"items": [item("a")]})).query({})
    assert isinstance(result.output, MemoryQueryOutput)
    assert "nextCursor" not in to_wire(result)["output"]


@pytest.mark.parametrize(
    "returned",
    [
        {"items": [item("a"), item("b"), item("c")]},  # more than limit
        {"items": [item("a"), item("a")]},  # duplicate ids
        {"items": [], "nextCursor": 7},  # cursor type
        {"items": [], "nextCursor": ""},  # empty cursor
        [item("a")],  # not an object
    ],
)
def test_query_bad_plugin_output(returned: Any) -> None:
    # MEM-QUERY-2 / MEM-ERR-2: count <= limit, distinct ids, cursor a non-empty string
    result = create_memory(Spy(query=returned)).query({"limit": 2})
    assert code(result) == "INVALID_BACKEND_OUTPUT"


@pytest.mark.parametrize("plugin_code", ["UNSUPPORTED_FILTER", "UNSUPPORTED_ORDER_BY"])
def test_query_unsupported_filter_fails_explicitly(plugin_code: str) -> None:
    # MEM-QUERY-3: an unsupported filter/orderBy fails explicitly, never silently ignored
    spy = Spy(query=MemoryError(plugin_code, "field 'x' is not supported"))
    result = create_memory(spy).query({"filter": {"x": {"$regex": "a"}}})
    assert (result.status, code(result)) == ("failed", plugin_code)
    assert result.output is None


def test_query_paging_with_returned_cursor_neither_repeats_nor_skips() -> None:
    # MEM-QUERY-4: the core hands the cursor back verbatim; pages chain without gaps
    records = [item(f"m{n}") for n in range(7)]

    def page(input: MemoryQueryInput) -> dict[str, Any]:
        start = int(input.cursor or "0")
        assert input.limit is not None
        out: dict[str, Any] = {"items": records[start : start + input.limit]}
        if start + input.limit < len(records):
            out["nextCursor"] = str(start + input.limit)
        return out

    memory, seen, cursor = create_memory(Spy(query=page)), [], None
    while True:
        result = memory.query({"limit": 3, **({"cursor": cursor} if cursor else {})})
        seen += [i.id for i in out(result).items]
        cursor = out(result).next_cursor
        if cursor is None:
            break
    assert seen == [r["id"] for r in records]


# --- MEM-SEARCH -----------------------------------------------------------------------


@pytest.mark.parametrize("query", ["text", [0.1, 0.2], {"vector": [1.0]}, None])
def test_search_query_present_and_passed_through(query: Any) -> None:
    # MEM-SEARCH-1: query must be present (text, vector, object, even null); plugin validates
    store = SearchSpy()
    result = create_memory(store).search({"query": query})
    assert result.status == "success"
    sent = store.calls[0][1]
    assert isinstance(sent, MemorySearchInput) and sent.query == query


def test_search_without_query_is_invalid_input() -> None:
    # MEM-SEARCH-1: a missing query is INVALID_INPUT, plugin not called
    store = SearchSpy()
    result = create_memory(store).search({"limit": 3})
    assert code(result) == "INVALID_INPUT" and "query" in err(result).message
    assert store.calls == []


def test_search_strategy_is_passed_and_unknown_rejected_by_plugin() -> None:
    # MEM-SEARCH-2: strategy names the algorithm; the plugin rejects an unknown one
    def search(input: MemorySearchInput) -> Any:
        if input.strategy != "keyword":
            raise MemoryError("UNSUPPORTED_STRATEGY", "Only keyword search is supported")
        return []

    memory = create_memory(SearchSpy(search=search))
    assert memory.search({"query": "x", "strategy": "keyword"}).status == "success"
    result = memory.search({"query": "x", "strategy": "graph"})
    assert code(result) == "UNSUPPORTED_STRATEGY"
    assert err(result).message == "Only keyword search is supported"


def test_search_keeps_provider_order_full_items() -> None:
    # MEM-SEARCH-3: full MemoryItem, optional finite score, metadata; never re-sorted
    returned = [hit("a", 0.1), hit("b", 0.9), {**hit("c"), "metadata": {"rank": 3}}, hit("d", 2)]
    result = create_memory(SearchSpy(search=returned)).search({"query": "q"})
    assert [r.memory.id for r in out(result)] == ["a", "b", "c", "d"]
    assert all(isinstance(r, MemorySearchResult) for r in out(result))
    assert [r.score for r in out(result)] == [0.1, 0.9, None, 2.0]
    assert to_wire(result)["output"][2] == {"memory": item("c"), "metadata": {"rank": 3}}


@pytest.mark.parametrize(
    "returned",
    [
        [hit("a", float("nan"))],
        [hit("a", float("inf"))],
        [hit("a", "0.5")],
        [hit("a", True)],
        [{"memory": {"id": "a"}}],  # not a full item
        [{"score": 1.0}],  # no memory
        [hit("a"), hit("a")],  # duplicate ids
        [hit("a"), hit("b"), hit("c")],  # more than limit
    ],
)
def test_search_bad_plugin_output(returned: Any) -> None:
    # MEM-SEARCH-3 / MEM-ERR-2: finite scores, full items, distinct ids, count <= limit
    result = create_memory(SearchSpy(search=returned)).search({"query": "q", "limit": 2})
    assert code(result) == "INVALID_BACKEND_OUTPUT"


def test_search_unavailable_but_crud_works() -> None:
    # MEM-SEARCH-4: no provider and no native search -> SEARCH_UNAVAILABLE; CRUD still works
    store = Spy(get=[item("a")])
    memory = create_memory(store)
    result = memory.search({"query": "x"})
    assert (result.status, code(result)) == ("failed", "SEARCH_UNAVAILABLE")
    assert memory.get({"ids": ["a"]}).status == "success"
    assert store.ops() == ["get"]


def test_explicit_provider_replaces_native_search() -> None:
    # MEM-SEARCH-5: an explicit provider replaces store.search; CRUD stays on the store
    store = SearchSpy(search=AssertionError("native search must not run"), get=[item("a")])
    provider = SearchSpy(search=[hit("p")])
    memory = create_memory(store, provider)
    assert [r.memory.id for r in out(memory.search({"query": "q"}))] == ["p"]
    assert memory.get({"ids": ["a"]}).status == "success"
    assert store.ops() == ["get"] and provider.ops() == ["search"]


def test_native_search_used_by_default() -> None:
    # MEM-SEARCH-5 (seed): without an explicit provider the store's own search runs
    store = SearchSpy(search=[hit("n")])
    assert out(create_memory(store).search({"query": "q"}))[0].memory.id == "n"


def test_write_never_embeds_or_searches() -> None:
    # MEM-SEARCH-6: WRITE never calls the search provider or builds an index by itself
    store = SearchSpy(write=lambda i: [{"id": "w1", "content": 1}])
    provider = SearchSpy()
    create_memory(store, provider).write({"memories": [{"content": 1}]})
    assert store.ops() == ["write"] and provider.calls == []


def test_a_call_without_execution_id_gets_a_uuid4() -> None:  # issue 36 item 0
    import uuid

    memory = create_memory(Spy(get=[]))
    made = {memory.get({"ids": ["x"]}).execution_id for _ in range(200)}
    assert len(made) == 200
    for text in made:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
