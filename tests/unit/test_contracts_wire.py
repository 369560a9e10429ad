"""The contract models' hot paths (issue 28 item 4): ``check_json`` and the wire dump.

Both run on every item of a WRITE batch and of every fleet reply, so they take exact-type
fast paths; these tests pin that the fast paths accept and refuse exactly what JSON data is
(MEM-DATA-4, MEM-ERR-1, issue 13) and that a dump leaves out exactly the optional fields
that are ``None`` — ``content`` only when it was not given (MEM-UPDATE-1).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from ditto_worker.contracts import (
    MAX_JSON_DEPTH,
    MemoryItem,
    MemoryUpdateEntry,
    MemoryUpdateInput,
    NodeResult,
    _Wire,
    check_json,
    to_wire,
)


def reference_ok(value: Any, depth: int = 0) -> bool:
    """JSON data as the contract defines it, written plainly (the oracle)."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | dict):
        if depth >= MAX_JSON_DEPTH:
            return False
        if isinstance(value, dict):
            keys_ok = all(isinstance(k, str) and reference_ok(k) for k in value)
            return keys_ok and all(reference_ok(v, depth + 1) for v in value.values())
        return all(reference_ok(v, depth + 1) for v in value)
    return False


TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=4)
SCALARS = st.one_of(
    st.none(), st.booleans(), TEXT, st.integers(-(2**64), 2**64), st.floats(),
    st.builds(tuple), st.builds(bytes),
)  # fmt: skip
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(TEXT, st.integers(0, 3)), inner, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_check_json_accepts_exactly_json_data(value: Any) -> None:  # MEM-DATA-4
    try:
        check_json(value)
        accepted = True
    except ValueError:
        accepted = False
    assert accepted == reference_ok(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": [1, 2**63]}, "integer outside the 64-bit range"),
        ({"a": float("nan")}, "NaN and Infinity are not JSON numbers"),
        ([1, (2, 3)], "a tuple is not JSON data"),
        ({1: "x"}, "object keys must be strings"),
        ({"k": ["ok", "\ud83d"]}, "the string at .k[1] contains a lone surrogate"),
        ({"\udc00": 1}, "an object key contains a lone surrogate"),
    ],
)
def test_check_json_says_why(value: Any, message: str) -> None:  # MEM-ERR-1, issue 13
    with pytest.raises(ValueError) as caught:
        check_json(value)
    assert message in str(caught.value)


def test_check_json_depth_limit_and_subclasses() -> None:
    deep: Any = "leaf"
    for _ in range(MAX_JSON_DEPTH):
        deep = [deep]
    assert check_json(deep) is deep  # 64 containers: the limit itself is fine
    with pytest.raises(ValueError, match="nested deeper than 64 levels"):
        check_json([deep])

    class Text(str):
        pass

    ordered = OrderedDict([(Text("k"), Text("v")), ("n", [True, None, 1.5, -(2**63)])])
    assert check_json(ordered) is ordered
    with pytest.raises(ValueError, match="lone surrogate"):
        check_json({"k": Text("\ud800")})


def test_dump_leaves_out_none_optionals_and_keeps_given_content() -> None:  # MEM-UPDATE-1
    assert to_wire(MemoryItem(id="a", content=None)) == {"id": "a", "content": None}
    assert to_wire(MemoryItem(id="a", content=1, key="k", operation_id="op")) == {
        "id": "a", "key": "k", "content": 1, "operationId": "op",
    }  # fmt: skip
    assert to_wire(MemoryUpdateEntry(id="a")) == {"id": "a"}
    assert to_wire(MemoryUpdateEntry(id="a", content=None)) == {"id": "a", "content": None}
    update = MemoryUpdateInput.model_validate(
        {"memories": [{"id": "a", "metadata": {}}, {"id": "b", "content": None}]}
    )
    assert to_wire(update) == {"memories": [{"id": "a", "metadata": {}},
                                            {"id": "b", "content": None}]}  # fmt: skip
    assert MemoryUpdateEntry(id="a").model_dump() == {"id": "a"}  # snake_case dumps too
    failed = NodeResult.failure("e", "MEMORY.GET", "NOT_FOUND", "gone")
    assert to_wire(failed) == {
        "executionId": "e", "node": "MEMORY.GET", "status": "failed",
        "error": {"code": "NOT_FOUND", "message": "gone"},
    }  # fmt: skip


def test_an_optional_content_outside_set_content_wire_is_refused() -> None:
    with pytest.raises(TypeError, match="optional content"):

        class Loose(_Wire):  # would drop a given null content from its dumps
            content: Any = Field(default=None)


def test_trusted_builds_what_model_construct_builds() -> None:  # issue 36 item 0
    from ditto_worker.contracts import MemoryItem, any_result
    from ditto_worker.wire import to_wire, trusted

    fields = {"id": "a1", "key": "k", "content": {"x": [1, "é"]}, "metadata": None,
              "operation_id": None, "created_at": "2026-05-01T12:00:00.250000Z",
              "updated_at": "2026-05-01T12:00:00.250000Z"}  # fmt: skip
    made = trusted(MemoryItem, dict(fields), MemoryItem.model_fields)
    built = MemoryItem.model_construct(**fields)
    assert made == built == MemoryItem(**fields)
    assert made.__dict__ == built.__dict__
    assert made.model_fields_set == built.model_fields_set
    assert to_wire(made) == to_wire(MemoryItem(**fields))
    with pytest.raises(Exception, match="frozen"):
        made.key = "other"  # type: ignore[misc]
    values = {"execution_id": "e1", "node": "MEMORY.GET", "status": "success",
              "output": [made], "error": None}  # fmt: skip
    result = trusted(any_result(), values, ("execution_id", "node", "status", "output"))
    validated = any_result()(execution_id="e1", node="MEMORY.GET", status="success", output=[made])
    assert result == validated
    assert result.model_fields_set == validated.model_fields_set
    assert to_wire(result) == to_wire(validated)
