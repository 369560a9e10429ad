"""Hostile node inputs never crash the SDK and never reach the plugin (issue 7, MEM-ERR-1).

Hypothesis generates inputs of every shape — wrong types, missing fields, huge strings,
deep nesting, NaN/Infinity, non-string ids, limits 0/10001, unknown nodes — for all six
nodes. Whatever comes in, the answer is a NodeResult; an ``INVALID_INPUT`` (or
``UNKNOWN_NODE``) answer means the plugin was not called, and no error message echoes the
input back.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ditto_worker import NodeResult, create_memory, to_wire
from ditto_worker.contracts import NODE_IDS
from ditto_worker.testing import InMemoryMemoryStore

FIELDS = [
    "ids", "keys", "filter", "orderBy", "limit", "cursor", "query", "strategy", "options",
    "memories", "id", "key", "content", "metadata", "field", "direction",
]  # fmt: skip
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from([0, 10001, -1, 10000, 1, "10", True, "", "x" * 5000, float("nan")])
)
JSONISH = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=25,
)
INPUTS = st.dictionaries(st.sampled_from(FIELDS), JSONISH, max_size=5) | JSONISH
PLUGIN_ERRORS = {
    "NOT_FOUND", "CONFLICT", "UNSUPPORTED_FILTER", "UNSUPPORTED_ORDER_BY", "INVALID_CURSOR",
    "UNSUPPORTED_STRATEGY",
}  # fmt: skip


class SpyStore(InMemoryMemoryStore):
    """The reference store, counting every call that reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __getattribute__(self, name: str) -> Any:
        if name in ("get", "query", "search", "write", "update", "delete"):
            object.__setattr__(self, "calls", object.__getattribute__(self, "calls") + 1)
        return object.__getattribute__(self, name)


def long_strings(value: Any) -> list[str]:
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and len(item) >= 24:
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def check(node: str, payload: Any) -> NodeResult[Any]:
    store = SpyStore()
    memory = create_memory(store)
    store.calls = 0  # count only what the call below touches
    result = memory.execute(node, payload)
    wire = to_wire(result)
    json.dumps(wire, allow_nan=False)  # the answer itself is always plain JSON
    assert result.status in ("success", "failed"), wire
    if result.status == "failed":
        assert result.error is not None
        code = result.error.code
        assert code in {"INVALID_INPUT", "UNKNOWN_NODE", "SEARCH_UNAVAILABLE"} | PLUGIN_ERRORS
        if code in ("INVALID_INPUT", "UNKNOWN_NODE"):
            assert store.calls == 0, (node, payload)  # MEM-ERR-1: the plugin is not called
        assert len(result.error.message) < 600
        for text in long_strings(payload):
            assert text not in result.error.message  # no input echoed back
    return result


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node=st.sampled_from(NODE_IDS), payload=INPUTS)
@example(node="MEMORY.QUERY", payload={"limit": 0})
@example(node="MEMORY.QUERY", payload={"limit": 10001})
@example(node="MEMORY.SEARCH", payload={"query": "x", "limit": True})
@example(node="MEMORY.GET", payload={"ids": [1, 2]})
@example(node="MEMORY.WRITE", payload={"memories": [{"content": math.inf}]})
@example(node="MEMORY.WRITE", payload={"memories": [{"content": "x" * 1_000_000}]})
@example(node="MEMORY.UPDATE", payload={"memories": [{"id": "a", "key": "k", "content": 1}]})
@example(node="MEMORY.DELETE", payload={"ids": "abc"})
def test_any_input_gets_a_node_result_and_bad_input_never_reaches_the_plugin(
    node: str, payload: Any
) -> None:
    check(node, payload)


@settings(max_examples=100, deadline=None)
@given(node=st.text(max_size=20).filter(lambda n: n not in NODE_IDS), payload=INPUTS)
def test_unknown_nodes_are_refused(node: str, payload: Any) -> None:  # MEM-ERR-3
    result = check(node, payload)
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "UNKNOWN_NODE"


def test_deep_nesting_is_invalid_input_not_a_recursion_error() -> None:
    deep: Any = "leaf"
    for _ in range(5000):
        deep = {"a": deep}
    result = check("MEMORY.WRITE", {"memories": [{"content": deep}]})
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "INVALID_INPUT" and "nested deeper" in result.error.message


def test_the_spy_sees_valid_calls() -> None:
    # guards the property above: valid inputs do reach the plugin, so "calls == 0" means
    # something when an input is refused
    store = SpyStore()
    memory = create_memory(store)
    store.calls = 0
    assert memory.execute("MEMORY.QUERY", {"limit": 3}).status == "success"
    assert memory.execute("MEMORY.WRITE", {"memories": [{"content": None}]}).status == "success"
    assert store.calls == 2
