"""The SDK's mutation nodes: MEMORY.WRITE, MEMORY.UPDATE and MEMORY.DELETE."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from ditto_worker import (
    MemoryDeleteOutput,
    MemoryError,
    MemoryItem,
    MemoryUpdateInput,
    MemoryWriteInput,
    create_memory,
    to_wire,
)
from ditto_worker.memory.capabilities import StoreCapabilities
from tests.unit._spies import Spy as BaseSpy
from tests.unit._spies import code, err, out


def _echo_write(i: MemoryWriteInput) -> list[dict[str, Any]]:
    return [{"id": f"m{n}", **to_wire(d)} for n, d in enumerate(i.memories)]


def _echo_update(i: MemoryUpdateInput) -> list[dict[str, Any]]:
    return [{"content": "old", "key": f"k-{e.id}", **to_wire(e)} for e in i.memories]


class Spy(BaseSpy):
    """The spy store (no native search); by default write and update echo their input
    (write ids m0, m1, …) and delete reports every id deleted."""

    defaults = {
        **BaseSpy.defaults,
        "write": _echo_write,
        "update": _echo_update,
        "delete": lambda i: {"deleted": list(i.ids)},
    }


class DictStore:
    """A tiny working store (ids m1, m2, …) to check read-after-delete through the SDK."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)

    def get(self, input: Any, options: Any = None) -> list[dict[str, Any]]:
        ids, keys = set(input.ids or []), set(input.keys or [])
        return [r for r in self.rows.values() if r["id"] in ids or r.get("key") in keys]

    def query(self, input: Any, options: Any = None) -> dict[str, Any]:
        return {"items": list(self.rows.values())[: input.limit]}

    def write(self, input: Any, options: Any = None) -> list[dict[str, Any]]:
        out = [{"id": f"m{next(self._ids)}", **to_wire(d)} for d in input.memories]
        self.rows.update({r["id"]: r for r in out})
        return out

    def update(self, input: Any, options: Any = None) -> list[dict[str, Any]]:
        raise MemoryError("NOT_FOUND", "no such memory")

    def delete(self, input: Any, options: Any = None) -> dict[str, Any]:
        return {"deleted": [i for i in input.ids if self.rows.pop(i, None) is not None]}


# --- MEM-WRITE ------------------------------------------------------------------------


def test_write_empty_batch_returns_empty_without_plugin() -> None:
    # MEM-WRITE-1: [] in -> [] out, plugin not called
    spy = Spy()
    result = create_memory(spy).write({"memories": []})
    assert (result.status, result.output) == ("success", [])
    assert spy.calls == []


def test_write_one_item_per_draft_in_order_content_null_kept() -> None:
    # MEM-WRITE-2 / MEM-PY-4 / MEM-DATA-4: one full item per draft, in order; null content kept
    spy = Spy()
    drafts: list[dict[str, Any]] = [
        {"key": "pref", "content": {"lang": "zh-CN"}, "metadata": {"s": 1}},
        {"content": None},
    ]
    result = create_memory(spy).write({"memories": drafts})
    assert result.status == "success"
    assert all(isinstance(i, MemoryItem) for i in out(result))
    assert to_wire(spy.calls[0][1]) == {"memories": drafts}
    assert to_wire(result)["output"] == [
        {"id": "m0", **drafts[0]},
        {"id": "m1", "content": None},
    ]


@pytest.mark.parametrize(
    "returned",
    [
        [{"id": "a", "key": "k1", "content": 1}],  # one draft dropped
        [{"id": "a", "key": "k1", "content": 1}, {"id": "b", "content": 2}] * 2,  # too many
        [{"id": "a", "key": "k2", "content": 1}, {"id": "b", "content": 2}],  # key changed
        [{"id": "a", "key": "k1", "content": 1}, {"id": "b", "key": "x", "content": 2}],
        [{"id": "a", "key": "k1", "content": 1}, {"id": "a", "content": 2}],  # duplicate id
        [{"id": "a", "key": "k1"}, {"id": "b", "content": 2}],  # not a full record
    ],
)
def test_write_bad_plugin_output(returned: Any) -> None:
    # MEM-WRITE-2 / MEM-ERR-2: exactly one full item per draft, keys preserved, distinct ids
    spy = Spy(write=returned)
    result = create_memory(spy).write({"memories": [{"key": "k1", "content": 1}, {"content": 2}]})
    assert (result.status, code(result)) == ("failed", "INVALID_BACKEND_OUTPUT")
    assert spy.ops() == ["write"]  # MEM-ERR-5: no compensation, no retry


def test_write_key_conflict_is_explicit() -> None:
    # MEM-WRITE-3: a conflict fails explicitly with the plugin's code, never silently drops
    spy = Spy(write=MemoryError("CONFLICT", "key already exists"))
    result = create_memory(spy).write({"memories": [{"key": "k", "content": 1}]})
    assert (result.status, code(result), err(result).message) == (
        "failed",
        "CONFLICT",
        "key already exists",
    )


def test_write_calls_only_the_store_once() -> None:
    # MEM-WRITE-4: no model call, no embedding, no consolidation: one store.write, nothing else
    spy = Spy()
    create_memory(spy).write({"memories": [{"content": "a fact"}]})
    assert spy.ops() == ["write"]


# --- MEM-UPDATE -----------------------------------------------------------------------


def test_update_presence_semantics_reach_the_plugin() -> None:
    # MEM-UPDATE-1: omitted fields absent; content null and metadata {} are real values
    spy = Spy()
    entries = [
        {"id": "a", "content": None},
        {"id": "b", "metadata": {}},
        {"id": "c", "content": 0, "metadata": {"v": 2}},
    ]
    result = create_memory(spy).update({"memories": entries})
    sent = spy.calls[0][1]
    assert isinstance(sent, MemoryUpdateInput)
    assert [(e.has_content, e.has_metadata) for e in sent.memories] == [
        (True, False),
        (False, True),
        (True, True),
    ]
    assert to_wire(sent) == {"memories": entries}
    wire = to_wire(result)["output"]
    assert wire[0] == {"id": "a", "key": "k-a", "content": None}  # MEM-PY-4: null kept
    assert wire[1] == {"id": "b", "key": "k-b", "content": "old", "metadata": {}}


def test_update_metadata_null_is_invalid() -> None:
    # MEM-UPDATE-1: metadata replaces the whole object; {} clears, null is not an object
    spy = Spy()
    result = create_memory(spy).update({"memories": [{"id": "a", "metadata": None}]})
    assert code(result) == "INVALID_INPUT" and "memories[0].metadata" in err(result).message
    assert spy.calls == []


def test_update_entry_with_key_is_invalid_input() -> None:
    # MEM-UPDATE-2 / MEM-UPDATE-3: id/key never change; an entry carrying key fails early
    spy = Spy()
    result = create_memory(spy).update({"memories": [{"id": "a", "key": "k", "content": 1}]})
    assert (result.status, code(result)) == ("failed", "INVALID_INPUT")
    assert "memories[0].key" in err(result).message and "key" in err(result).message
    assert "UPDATE" in err(result).message
    assert spy.calls == []


def test_update_missing_target_fails_never_upserts() -> None:
    # MEM-UPDATE-2: a missing target fails with the plugin's NOT_FOUND
    result = create_memory(DictStore()).update({"memories": [{"id": "nope", "content": 1}]})
    assert (result.status, code(result)) == ("failed", "NOT_FOUND")


@pytest.mark.parametrize(
    ("entries", "where"),
    [
        ([{"id": "a", "content": 1}, {"id": "a", "content": 2}], "memories[1].id"),
        ([{"id": "a"}], "memories[0]"),
        ([{"id": "", "content": 1}], "memories[0].id"),
        ([{"content": 1}], "memories[0].id"),
    ],
)
def test_update_rejected_before_plugin(entries: Any, where: str) -> None:
    # MEM-UPDATE-3: duplicate ids, no field to update, empty/missing id -> INVALID_INPUT
    spy = Spy()
    result = create_memory(spy).update({"memories": entries})
    assert code(result) == "INVALID_INPUT" and where in err(result).message
    assert spy.calls == []


def test_update_empty_batch_and_request_order() -> None:
    # MEM-UPDATE-4: [] -> [] without plugin; success returns every id once, request order
    spy = Spy(update=lambda i: [{"id": e.id, "key": "k", "content": 1} for e in i.memories][::-1])
    memory = create_memory(spy)
    assert out(memory.update({"memories": []})) == []
    assert spy.calls == []
    result = memory.update({"memories": [{"id": "x", "content": 1}, {"id": "y", "content": 1}]})
    assert [i.id for i in out(result)] == ["x", "y"]
    assert [i.key for i in out(result)] == ["k", "k"]  # original key kept


@pytest.mark.parametrize(
    "returned",
    [
        [{"id": "x", "content": 1}],  # y missing
        [{"id": "x", "content": 1}, {"id": "y", "content": 1}, {"id": "z", "content": 1}],
        [{"id": "x", "content": 1}, {"id": "x", "content": 1}, {"id": "y", "content": 1}],
        [{"id": "x", "content": 1}, {"id": "y"}],  # not a full record
    ],
)
def test_update_bad_plugin_output(returned: Any) -> None:
    # MEM-UPDATE-4 / MEM-ERR-2: the UPDATE id set must match exactly, each once
    result = create_memory(Spy(update=returned)).update(
        {"memories": [{"id": "x", "content": 1}, {"id": "y", "metadata": {}}]}
    )
    assert code(result) == "INVALID_BACKEND_OUTPUT"


# --- MEM-DELETE -----------------------------------------------------------------------


def test_delete_dedupes_and_empty_returns_without_plugin() -> None:
    # MEM-DELETE-1: ids de-duplicated; [] -> {deleted: []} without the plugin
    spy = Spy()
    memory = create_memory(spy)
    empty = memory.delete({"ids": []})
    assert isinstance(empty.output, MemoryDeleteOutput)
    assert to_wire(empty)["output"] == {"deleted": []} and spy.calls == []
    result = memory.delete({"ids": ["m1", "m1", "m2"]})
    assert spy.calls[0][1].ids == ["m1", "m2"]
    assert out(result).deleted == ["m1", "m2"]


def test_delete_reports_only_ids_deleted_now() -> None:
    # MEM-DELETE-2: missing ids ignored; deleting again returns []
    memory = create_memory(DictStore())
    written = out(memory.write({"memories": [{"content": 1}, {"content": 2}]}))
    first = memory.delete({"ids": [written[0].id, "missing", written[0].id]})
    assert out(first).deleted == [written[0].id]
    assert out(memory.delete({"ids": [written[0].id]})).deleted == []


@pytest.mark.parametrize(
    "returned",
    [{"deleted": ["a", "zzz"]}, {"deleted": ["a", "a"]}, {"deleted": [""]}, ["a"], {}],
)
def test_delete_bad_plugin_output(returned: Any) -> None:
    # MEM-DELETE-2 / MEM-ERR-2: deleted ids distinct and within the requested ids
    result = create_memory(Spy(delete=returned)).delete({"ids": ["a", "b"]})
    assert code(result) == "INVALID_BACKEND_OUTPUT"


def test_deleted_records_do_not_come_back() -> None:
    # MEM-DELETE-3: after DELETE, GET and QUERY no longer return the record
    memory = create_memory(DictStore())
    kept, gone = out(memory.write({"memories": [{"key": "a", "content": 1}, {"content": 2}]}))
    memory.delete({"ids": [gone.id]})
    assert [i.id for i in out(memory.get({"ids": [kept.id, gone.id]}))] == [kept.id]
    assert [i.id for i in out(memory.query({})).items] == [kept.id]


# --- operation ids (MEM-RUN-7) and conditional updates (MEM-UPDATE-5) ------------------


class DeclaringSpy(Spy):
    """A spy that declares operation ids and conditional updates."""

    capabilities = StoreCapabilities(operation_ids=True, conditional_update=True)


WRITE = {"memories": [{"content": "x"}]}
CONDITIONAL = {"memories": [{"id": "a", "content": 1, "ifMetadata": {"v": 1}}]}


@pytest.mark.parametrize("bad", ["", "x" * 257, "a\tb", "\ud800", 5, ["op"]])
def test_a_malformed_operation_id_is_invalid_input_before_the_plugin(bad: Any) -> None:
    spy = DeclaringSpy()
    result = create_memory(spy).write(WRITE, operation_id=bad)
    assert code(result) == "INVALID_INPUT" and "operationId" in err(result).message
    assert spy.calls == []


def test_operation_id_reaches_a_declaring_store_for_mutations_only() -> None:
    spy = DeclaringSpy()
    memory = create_memory(spy)
    assert memory.write(WRITE, operation_id="op-1").status == "success"
    memory.execute("MEMORY.DELETE", {"ids": ["a"]}, operation_id="op-2")
    memory.execute("MEMORY.QUERY", {}, operation_id="op-3")  # reads ignore it
    assert [(op, o.operation_id) for op, _, o in spy.calls if o is not None] == [
        ("write", "op-1"), ("delete", "op-2"), ("query", None)]  # fmt: skip


def test_undeclared_operation_ids_and_conditions_are_unsupported() -> None:
    spy = Spy()
    memory = create_memory(spy)
    assert code(memory.write(WRITE, operation_id="op")) == "UNSUPPORTED"
    assert code(memory.update(CONDITIONAL)) == "UNSUPPORTED"
    assert code(memory.delete({"ids": ["a"]}, operation_id="op")) == "UNSUPPORTED"
    assert spy.calls == []
    assert memory.write(WRITE).status == "success"  # without them, as before


@pytest.mark.parametrize(
    ("entry", "where"),
    [({"id": "a", "content": 1, "ifMetadata": {}}, "memories[0].ifMetadata"),
     ({"id": "a", "content": 1, "ifMetadata": [1]}, "memories[0].ifMetadata"),
     ({"id": "a", "content": 1, "ifMetadata": None}, "memories[0].ifMetadata"),
     ({"id": "a", "ifMetadata": {"v": 1}}, "memories[0]")],
)  # fmt: skip
def test_a_malformed_condition_is_invalid_input(entry: Any, where: str) -> None:
    spy = DeclaringSpy()
    result = create_memory(spy).update({"memories": [entry]})
    assert code(result) == "INVALID_INPUT" and where in err(result).message
    assert spy.calls == []
