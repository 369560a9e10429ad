"""SDK validation, error mapping, safe messages, cancellation and deadlines.

MEM-ERR, MEM-PY-2 (cancellation/timeout), MEM-PY-4 (strict validation, wire shape).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

import pytest

from ditto_worker import (
    CancelToken,
    MemoryCallOptions,
    MemoryError,
    MemoryQueryOutput,
    NodeResult,
    create_memory,
    to_wire,
)
from tests.unit._spies import SearchSpy, code, err

SECRET = "postgresql://user:hunter2@host/db SELECT * FROM x"


class Spy(SearchSpy):
    """The spy store with native search; by default write returns one item ``w`` per draft."""

    defaults = {
        **SearchSpy.defaults,
        "write": lambda i: [{"id": "w", "content": d.content} for d in i.memories],
    }


# --- MEM-ERR-1 / MEM-PY-4: strict input validation ------------------------------------


@pytest.mark.parametrize("node", ["MEMORY.QUERY", "MEMORY.SEARCH"])
@pytest.mark.parametrize("limit", [True, "10", 10.0, 0, 10001, -1, [10]])
def test_limit_must_be_an_integer_1_to_10000(node: str, limit: Any) -> None:
    # MEM-ERR-1 / MEM-PY-4: limit: true, "10", 10.0, 0, 10001 -> INVALID_INPUT naming limit
    spy = Spy()
    result = create_memory(spy).execute(
        node, {"query": "q", "limit": limit} if "SEARCH" in node else {"limit": limit}
    )
    assert (result.status, code(result)) == ("failed", "INVALID_INPUT")
    assert "limit" in err(result).message
    assert spy.calls == []


@pytest.mark.parametrize("limit", [1, 10000])
def test_limit_bounds_are_inclusive(limit: int) -> None:
    # MEM-ERR-1: 1 and 10000 are valid
    spy = Spy()
    assert create_memory(spy).query({"limit": limit}).status == "success"
    assert spy.calls[0][1].limit == limit


@pytest.mark.parametrize(
    ("node", "request_", "field"),
    [
        ("MEMORY.GET", {"ids": "a"}, "ids"),  # arrays
        ("MEMORY.GET", {"ids": ["a", ""]}, "ids[1]"),  # non-empty ids
        ("MEMORY.GET", {"keys": [""]}, "keys[0]"),  # non-empty keys
        ("MEMORY.GET", {"ids": [1]}, "ids[0]"),
        ("MEMORY.WRITE", {}, "memories"),  # required field
        ("MEMORY.WRITE", {"memories": [{"key": "k"}]}, "memories[0].content"),
        ("MEMORY.WRITE", {"memories": [{"content": 1, "metadata": []}]}, "memories[0].metadata"),
        ("MEMORY.WRITE", {"memories": [{"content": 1, "key": ""}]}, "memories[0].key"),
        ("MEMORY.WRITE", {"memories": ({"content": 1},)}, "memories"),
        ("MEMORY.SEARCH", {"query": "q", "options": "fast"}, "options"),
        ("MEMORY.SEARCH", {"query": "q", "filter": [1]}, "filter"),
        ("MEMORY.SEARCH", {"query": "q", "strategy": ""}, "strategy"),
        ("MEMORY.QUERY", {"orderBy": {"field": "a"}}, "orderBy"),
        ("MEMORY.DELETE", {"ids": ["a", None]}, "ids[1]"),
        ("MEMORY.DELETE", {"ids": ["a"], "tenant": "other"}, "tenant"),
    ],
)
def test_input_checked_before_plugin(node: str, request_: Any, field: str) -> None:
    # MEM-ERR-1: arrays, required fields, non-empty ids/keys, object types -> INVALID_INPUT
    spy = Spy()
    result = create_memory(spy).execute(node, request_)
    assert (result.status, code(result)) == ("failed", "INVALID_INPUT")
    assert field in err(result).message
    assert spy.calls == []


def test_input_message_never_echoes_values() -> None:
    # MEM-ERR-1 / MEM-ERR-4: messages name fields, never values
    result = create_memory(Spy()).query({"limit": "hunter2", "cursor": 12, "filter": SECRET})
    assert code(result) == "INVALID_INPUT"
    assert "hunter2" not in err(result).message and "SELECT" not in err(result).message
    assert "limit" in err(result).message and "filter" in err(result).message


def test_input_may_be_the_contract_model_or_snake_case() -> None:
    # MEM-PY-4: a contract model, wire camelCase or snake_case names are all accepted
    from ditto_worker import MemoryQueryInput

    spy = Spy()
    memory = create_memory(spy)
    model = MemoryQueryInput(order_by=[{"field": "a"}], limit=2)  # type: ignore[list-item]
    for request_ in (
        model,
        {"orderBy": [{"field": "a"}], "limit": 2},
        {"order_by": [{"field": "a"}], "limit": 2},
    ):
        assert memory.query(request_).status == "success"
    assert all(call[1].order_by[0].field == "a" for call in spy.calls)


def test_typescript_document_parses() -> None:
    # MEM-PY-4 / SPEC "Python mapping": a JSON document in the TS original's shape parses
    doc = json.loads(
        '{"filter": {"tenant": "project-a", "state": "active"},'
        ' "orderBy": [{"field": "createdAt", "direction": "desc"}], "limit": 20}'
    )
    spy = Spy(
        query=json.loads(
            '{"items": [{"id": "m1", "key": "k", "content": null}], "nextCursor": "c2"}'
        )
    )
    result = create_memory(spy).execute("MEMORY.QUERY", doc)
    assert result.status == "success"
    assert isinstance(result.output, MemoryQueryOutput) and result.output.next_cursor == "c2"
    wire = to_wire(result)
    assert wire["output"] == {
        "items": [{"id": "m1", "key": "k", "content": None}],
        "nextCursor": "c2",
    }
    assert set(wire) == {"executionId", "node", "status", "output"}
    assert NodeResult[Any].model_validate(json.loads(json.dumps(wire))).status == "success"


# --- MEM-ERR-2: output shape ----------------------------------------------------------


@pytest.mark.parametrize("returned", [None, "items", 3, {"items": None}, [{"id": 1, "content": 1}]])
def test_malformed_output_is_invalid_backend_output(returned: Any) -> None:
    # MEM-ERR-2: record shape checked after the plugin -> INVALID_BACKEND_OUTPUT
    memory = create_memory(Spy(get=returned, query=returned))
    for result in (memory.get({"ids": ["a"]}), memory.query({})):
        assert (result.status, code(result)) == ("failed", "INVALID_BACKEND_OUTPUT")
        assert result.output is None


def test_plugin_returning_a_node_result_is_not_double_wrapped() -> None:
    # MEM-NODE-1 / MEM-ERR-2: plugins return the raw output; an envelope is a violation
    envelope = {
        "executionId": "x",
        "node": "MEMORY.QUERY",
        "status": "success",
        "output": {"items": []},
    }
    assert code(create_memory(Spy(query=envelope)).query({})) == "INVALID_BACKEND_OUTPUT"


# --- MEM-ERR-3 / MEM-ERR-4: error mapping ---------------------------------------------


@pytest.mark.parametrize("plugin_code", ["NOT_FOUND", "CONFLICT", "QUOTA_EXCEEDED"])
def test_memory_error_code_and_message_pass_through(plugin_code: str) -> None:
    # MEM-ERR-3: MemoryError(code, safe_message) from a plugin keeps its code and message
    result = create_memory(Spy(get=MemoryError(plugin_code, "safe words"))).get({"ids": ["a"]})
    assert (result.status, code(result), err(result).message) == (
        "failed",
        plugin_code,
        "safe words",
    )


def test_unclassified_exception_hides_secrets_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # MEM-ERR-4: an unclassified exception -> MEMORY_BACKEND_ERROR, no driver text/URL/SQL
    spy = Spy(write=RuntimeError(SECRET))
    with caplog.at_level(logging.ERROR, logger="ditto_worker"):
        result = create_memory(spy).write({"memories": [{"content": 1}]})
    assert (result.status, code(result)) == ("failed", "MEMORY_BACKEND_ERROR")
    wire = json.dumps(to_wire(result))
    assert "hunter2" not in wire and "SELECT" not in wire and "postgresql" not in wire
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and errors[0].exc_info is not None  # the real exception goes to the log


def test_no_retry_no_compensation() -> None:
    # MEM-ERR-5: a failed call is not retried, and a bad output is not compensated
    spy = Spy(delete=RuntimeError("boom"))
    create_memory(spy).delete({"ids": ["a"]})
    spy2 = Spy(write=[{"id": "w", "content": 1}, {"id": "extra", "content": 2}])
    assert (
        code(create_memory(spy2).write({"memories": [{"content": 1}]})) == "INVALID_BACKEND_OUTPUT"
    )
    assert [c[0] for c in spy.calls] == ["delete"] and [c[0] for c in spy2.calls] == ["write"]


def test_unknown_node() -> None:
    # MEM-ERR-3: execute with an unknown node -> UNKNOWN_NODE, nothing called
    spy = Spy()
    result = create_memory(spy).execute("MEMORY.UPSERT", {"ids": ["a"]}, execution_id="e1")
    assert (result.status, code(result), result.node, result.execution_id) == (
        "failed",
        "UNKNOWN_NODE",
        "MEMORY.UPSERT",
        "e1",
    )
    assert spy.calls == []


# --- MEM-PY-2: cancellation, deadlines, call options ----------------------------------


def test_call_options_reach_the_plugin() -> None:
    # MEM-PY-2 / MEM-RUN-2: cancel token, deadline and execution id are passed to the plugin
    spy, token, deadline = Spy(), CancelToken(), time.time() + 60
    result = create_memory(spy).get(
        {"ids": ["a"]}, cancel=token, execution_id="e-7", deadline=deadline
    )
    options = spy.calls[0][2]
    assert isinstance(options, MemoryCallOptions)
    assert (options.cancel, options.deadline, options.execution_id) == (token, deadline, "e-7")
    assert result.execution_id == "e-7"


def test_execution_id_defaults_to_uuid4() -> None:
    # MEM-PY-2 / MEM-DATA-3: each call gets a fresh uuid4 execution id
    memory = create_memory(Spy())
    first, second = memory.get({"ids": []}), memory.get({"ids": []})
    assert uuid.UUID(first.execution_id).version == 4
    assert first.execution_id != second.execution_id


def test_already_cancelled_does_not_call_plugin() -> None:
    # MEM-PY-2: a token cancelled before the call -> cancelled / MEMORY_CANCELLED
    spy, token = Spy(), CancelToken()
    token.cancel()
    result = create_memory(spy).write({"memories": [{"content": 1}]}, cancel=token)
    assert (result.status, code(result)) == ("cancelled", "MEMORY_CANCELLED")
    assert result.output is None and spy.calls == []


@pytest.mark.parametrize("outcome", ["raises", "returns"])
def test_cancelled_while_running(outcome: str) -> None:
    # MEM-PY-2 / MEM-RUN-2: cancelled during the plugin -> cancelled, even if it returned;
    # a completed write is not rolled back
    token = CancelToken()

    def write(input: Any) -> Any:
        token.cancel()
        if outcome == "raises":
            raise RuntimeError("interrupted")
        return [{"id": "w", "content": 1}]

    spy = Spy(write=write)
    result = create_memory(spy).write({"memories": [{"content": 1}]}, cancel=token)
    assert (result.status, code(result)) == ("cancelled", "MEMORY_CANCELLED")
    assert [c[0] for c in spy.calls] == ["write"]  # no compensating delete


def test_deadline_already_passed_does_not_call_plugin() -> None:
    # MEM-PY-2: a deadline in the past -> timeout / MEMORY_TIMEOUT, plugin not called
    spy = Spy()
    result = create_memory(spy).query({}, deadline=time.time() - 1)
    assert (result.status, code(result)) == ("timeout", "MEMORY_TIMEOUT")
    assert spy.calls == []


def test_deadline_passing_while_running_is_timeout() -> None:
    # MEM-PY-2: the deadline passed while the plugin ran -> timeout (writes not rolled back)
    def slow(input: Any) -> Any:
        time.sleep(0.06)
        return {"items": []}

    result = create_memory(Spy(query=slow)).query({}, deadline=time.time() + 0.03)
    assert (result.status, code(result)) == ("timeout", "MEMORY_TIMEOUT")


@pytest.mark.parametrize(
    ("plugin_code", "status"), [("MEMORY_CANCELLED", "cancelled"), ("MEMORY_TIMEOUT", "timeout")]
)
def test_plugin_cancel_and_timeout_codes_set_the_status(plugin_code: str, status: str) -> None:
    # MEM-PY-2: a plugin's own MEMORY_CANCELLED / MEMORY_TIMEOUT map to that status
    result = create_memory(Spy(get=MemoryError(plugin_code, "stopped"))).get({"ids": ["a"]})
    assert (result.status, code(result)) == (status, plugin_code)
