"""Every string that enters is valid Unicode text before a plugin sees it (issue 13 item 3).

A lone surrogate (JSON ``"\\ud83d"``) used to reach the stores' drivers and fail there as
``MEMORY_BACKEND_ERROR`` (``UnicodeEncodeError``), or pass as a search query. Hypothesis
puts one into every string of a rich, valid input of each node — values and object keys,
filter fields and operands, orderBy, cursor, strategy, options, query, content, metadata,
ids and keys — and expects ``INVALID_INPUT`` naming where it is, the plugin not called. The
trusted scope header and the execution id are checked too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ditto_worker import create_memory
from ditto_worker.context.worker import create_context_worker
from ditto_worker.contracts import check_json
from ditto_worker.errors import MemoryError, NodeError
from ditto_worker.memory.scope import parse_scope
from ditto_worker.runtime import NodeContext
from tests.unit._spies import SearchSpy

FILTER: dict[str, Any] = {
    "tag": "plain",
    "a.b": {"$in": ["p", "q"], "$ne": "r"},
    "$or": [{"k": {"$gte": "m"}}, {"createdAt": {"$lt": "2030-01-01T00:00:00Z"}}],
}
TEMPLATES: dict[str, dict[str, Any]] = {
    "MEMORY.GET": {"ids": ["a", "b"], "keys": ["k"]},
    "MEMORY.QUERY": {
        "filter": FILTER,
        "orderBy": [{"field": "tag", "direction": "asc"}, {"field": "a.b"}],
        "limit": 5,
        "cursor": "eyJ2IjoxfQ",
    },
    "MEMORY.SEARCH": {
        "query": {"text": "hello", "terms": ["a", "b"]},
        "strategy": "keyword",
        "filter": FILTER,
        "limit": 3,
        "options": {"x": {"y": ["z"]}},
    },
    "MEMORY.WRITE": {
        "memories": [
            {"key": "k1", "content": "text", "metadata": {"m": "v"}},
            {"content": {"nested": [{"deep": "s"}]}, "metadata": {"list": ["a"]}},
        ]
    },
    "MEMORY.UPDATE": {"memories": [{"id": "i1", "content": ["c"], "metadata": {"m": "v"}}]},
    "MEMORY.DELETE": {"ids": ["a", "b"]},
}
JSON_FIELDS = {"filter", "query", "options", "content", "metadata"}
Path = tuple[str | int, ...]


def string_sites(value: Any, path: Path = ()) -> list[tuple[Path, bool]]:
    """Every ``(path, is_key)`` of a string in ``value`` (keys of JSON objects included)."""
    sites: list[tuple[Path, bool]] = []
    if isinstance(value, str):
        sites.append((path, False))
    elif isinstance(value, dict):
        for key, child in value.items():
            if path and path[-1] in JSON_FIELDS or any(p in JSON_FIELDS for p in path):
                sites.append(((*path, key), True))
            sites.extend(string_sites(child, (*path, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            sites.extend(string_sites(child, (*path, index)))
    return sites


def inject(value: Any, path: Path, is_key: bool, bad: str) -> Any:
    """A deep copy of ``value`` with ``bad`` spliced into the string (or key) at ``path``."""
    copy = json.loads(json.dumps(value))
    parent = copy
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if is_key:
        parent[last[:1] + bad + last[1:]] = parent.pop(last)
    else:
        parent[last] = parent[last][:1] + bad + parent[last][1:]
    return copy


def expected_location(path: Path, is_key: bool) -> str:
    """The location the message must name: the field (describe's ``a[0].b``), then, inside a
    JSON field, ``the string at .x[0]`` or ``an object key at .x``."""
    text = ""
    for index, part in enumerate(path):
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text = f"{text}.{part}" if text else part
        if part in JSON_FIELDS:
            inner = path[index + 1 : -1] if is_key else path[index + 1 :]
            shown = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in inner)
            what = "an object key" if is_key else "the string"
            return f"{text}: {what} at {shown}" if shown else f"{text}: {what}"
    return text + ":"


SITES = [
    (node, path, is_key) for node, tpl in TEMPLATES.items() for path, is_key in string_sites(tpl)
]
SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)


def test_every_field_of_every_node_is_covered() -> None:
    fields = {(node, path[0]) for node, path, _ in SITES}
    assert {f for _, f in fields} >= {
        "ids", "keys", "filter", "orderBy", "cursor", "query", "strategy", "options", "memories",
    }  # fmt: skip
    assert any(is_key for _, path, is_key in SITES if path[0] == "filter")  # filter field names
    assert {node for node, _ in fields} == set(TEMPLATES)


@pytest.mark.parametrize("node", sorted(TEMPLATES))
def test_the_templates_are_valid_input(node: str) -> None:
    store = SearchSpy()
    result = create_memory(store).execute(node, TEMPLATES[node])
    assert store.ops() == [node.split(".")[1].lower()], result.error  # reaches the plugin


@settings(max_examples=400, deadline=None)
@given(site=st.sampled_from(SITES), bad=SURROGATES)
def test_a_lone_surrogate_anywhere_is_invalid_input_naming_it(
    site: tuple[str, Path, bool], bad: str
) -> None:
    node, path, is_key = site
    store = SearchSpy()
    payload = inject(TEMPLATES[node], path, is_key, bad)
    result = create_memory(store).execute(node, payload)
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "INVALID_INPUT"
    assert store.calls == []  # the plugin never sees it
    message = result.error.message
    assert "lone surrogate" in message and expected_location(path, is_key) in message, message
    message.encode("utf-8")  # the message itself is valid text (the key is never echoed raw)


def test_the_issue_case_arrives_as_json() -> None:
    # issue 13: {"tag": "hello \ud83d"} as JSON text, in QUERY and SEARCH, and as a query
    store = SearchSpy()
    memory = create_memory(store)
    tagged = json.loads('{"filter": {"tag": "hello \\ud83d"}}')
    keyed = json.loads('{"filter": {"t\\ud83dag": "hello"}}')
    query = json.loads('{"query": "hello \\ud83d"}')
    for node, payload in [
        ("MEMORY.QUERY", tagged),
        ("MEMORY.SEARCH", {**tagged, "query": "x"}),
        ("MEMORY.QUERY", keyed),
        ("MEMORY.SEARCH", query),
    ]:
        result = memory.execute(node, payload)
        assert result.error is not None and result.error.code == "INVALID_INPUT", node
    assert store.calls == []


def test_check_json_says_where() -> None:
    with pytest.raises(ValueError, match=r"the string at \.a\[1\]\.b contains a lone"):
        check_json({"a": [0, {"b": "x\udc00"}]})
    with pytest.raises(ValueError, match=r"an object key at \.a contains a lone"):
        check_json({"a": {"\ud800": 1}})
    assert check_json({"ok": "😀 \U0001f600 é"}) == {"ok": "😀 \U0001f600 é"}


def test_the_scope_header_and_the_execution_id_are_checked() -> None:
    with pytest.raises(MemoryError) as caught:
        parse_scope({"tenant": "acme\ud83d", "user": "u"})
    assert caught.value.code == "INVALID_INPUT" and "scope.tenant" in caught.value.safe_message
    store = SearchSpy()
    result = create_memory(store).get({"ids": ["a"]}, execution_id="e\udfff")
    assert result.error is not None and result.error.code == "INVALID_INPUT"
    assert "executionId" in result.error.message and store.calls == []


def test_context_nodes_refuse_it_too() -> None:
    worker = create_context_worker()
    update = worker.nodes["CONTEXT.UPDATE"].handler
    item = {"id": "i", "sourceNode": "MEMORY.SEARCH", "content": "x\ud83d"}
    with pytest.raises(NodeError) as caught:
        update({"context": {"items": []}, "ingress": [item]}, NodeContext("e"))
    assert caught.value.code == "INVALID_INPUT"
    assert "ingress[0].content" in caught.value.safe_message


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"messages": [{"role": "user", "content": "hi \ud83d"}]}, "messages[0].content"),
        (
            {
                "messages": [{"role": "user", "content": "hi"}],
                "responseSchema": {"type": "object", "properties": {"\udc00": {}}},
            },
            "responseSchema",
        ),
    ],
)
def test_infer_refuses_it_before_any_request(raw: dict[str, Any], field: str) -> None:
    from ditto_worker.infer import INFER_GENERATE, create_infer_worker

    definition = create_infer_worker(
        {"baseUrl": "http://127.0.0.1:9/v1", "model": "m"}, env={}, dotenv_path=None
    )  # port 9 (discard): a request would fail as INFER_UNAVAILABLE, not INVALID_INPUT
    with pytest.raises(NodeError) as caught:
        definition.nodes[INFER_GENERATE].handler(raw, NodeContext("e"))
    assert caught.value.code == "INVALID_INPUT"
    assert field in caught.value.safe_message and "lone surrogate" in caught.value.safe_message


def test_retrieval_input_refuses_it() -> None:
    from ditto_worker.contracts import RetrievalSearchInput
    from ditto_worker.memory.checks import parse_input

    for raw in (
        {"target": {"name": "mem\ud83d"}, "query": "x"},
        {"target": {"name": "memories"}, "query": "x\ud83d"},
    ):
        with pytest.raises(MemoryError) as caught:
            parse_input(RetrievalSearchInput, raw)
        assert (
            caught.value.code == "INVALID_INPUT" and "lone surrogate" in caught.value.safe_message
        )
