"""The SQL store kit (ditto_worker.sqlkit) on its own: the shared compiler walks the AST
and leaves the leaves to the dialect, the keyset condition continues after a cursor on a
real SQLite table, and the ledgers replay (issue 34)."""

from __future__ import annotations

from typing import Any

import pytest

from ditto_plugin_sqlite import driver
from ditto_worker.errors import MemoryError
from ditto_worker.memory.filters import Cursor, FieldRef, Scalar, parse_filter, parse_order_by
from ditto_worker.memory.operations import Operation
from ditto_worker.sqlkit import (
    FilterDialect,
    LedgerDialect,
    LedgerRow,
    Sql,
    claim_call,
    compile_filter,
    keyset_condition,
    order_clause,
    record_call,
)


class Leaves(FilterDialect):
    """Leaves over plain columns ``f`` of table ``m`` (numbers only), SQLite syntax."""

    true, false, mark = "1", "0", "?"

    def equals(self, ref: FieldRef, value: Scalar) -> Sql:
        return Sql(f"(m.{ref.name} IS ?)", [value])

    def compare(self, ref: FieldRef, op: str, value: Scalar) -> Sql:
        sql_op = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}[op]
        return Sql(f"COALESCE(m.{ref.name} {sql_op} ?, 0)", [value])

    def exists(self, ref: FieldRef, exists: bool) -> Sql:
        return Sql(f"(m.{ref.name} IS {'NOT ' if exists else ''}NULL)")

    def at(self, index: int, rank: int, value: Any, op: str) -> Sql:
        return Sql(f"(r{index} = ? AND v{index} {op} ?)", [rank, value])


def test_the_compiler_walks_the_tree_and_negates_exactly() -> None:
    where = compile_filter(Leaves(), parse_filter({"a": {"$ne": 1}, "b": {"$nin": [2, 3]}}))
    assert where.text == "((NOT (m.a IS ?)) AND (NOT ((m.b IS ?) OR (m.b IS ?))))"
    assert where.params == [1, 2, 3]
    assert compile_filter(Leaves(), None).text == "1"
    assert compile_filter(Leaves(), parse_filter({"$or": [{"a": {"$exists": False}}]})).text == (
        "((m.a IS NULL))"
    )


@pytest.mark.parametrize("descending", [False, True])
def test_keyset_pages_cover_every_row_once_in_order(descending: bool) -> None:
    conn = driver.connect(":memory:")  # the process's one SQLite library
    values = [5, 3, 5, 1, 3, 5, 2]
    conn.execute("CREATE TABLE t (seq INTEGER PRIMARY KEY, r0 INTEGER, v0 INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, 1, ?)", list(enumerate(values, start=1)))
    terms = parse_order_by([{"field": "a", "direction": "desc" if descending else "asc"}])
    order = order_clause(Leaves(), terms)
    seen: list[int] = []
    cursor: Cursor | None = None
    while True:
        after = keyset_condition(Leaves(), terms, cursor) if cursor else Sql("1")
        rows = conn.execute(
            f"SELECT seq, r0, v0 FROM t WHERE {after.text} ORDER BY {order} LIMIT 2",
            after.params,
        ).fetchall()
        if not rows:
            break
        seen += [row[0] for row in rows]
        last = rows[-1]
        cursor = Cursor(values=((last[1], last[2]),), seq=last[0])
    want = sorted(range(1, 8), key=lambda s: (-values[s - 1] if descending else values[s - 1], s))
    assert seen == want


class Ledger(LedgerDialect):
    """Both ledgers in dictionaries; a claim is a look-up (as SQLite's)."""

    store = "the test store"

    def __init__(self) -> None:
        self.operations: dict[str, LedgerRow] = {}
        self.executions: dict[str, LedgerRow] = {}

    def claim_operation(self, conn: Any, op: Operation, namespace: str) -> bool:
        return op.id not in self.operations

    def find_operation(self, conn: Any, operation_id: str, namespace: str) -> LedgerRow | None:
        return self.operations.get(operation_id)

    def store_operation(self, conn: Any, op: Operation, namespace: str, output: Any) -> None:
        self.operations[op.id] = LedgerRow(op.node, op.digest, output)

    def claim_execution(self, conn: Any, execution_id: str, node: str, namespace: str) -> bool:
        return execution_id not in self.executions

    def find_execution(self, conn: Any, execution_id: str, namespace: str) -> LedgerRow | None:
        return self.executions.get(execution_id)

    def store_execution(
        self, conn: Any, execution_id: str, node: str, namespace: str, output: Any,
        retention_s: float,
    ) -> None:  # fmt: skip
        self.executions[execution_id] = LedgerRow(node, None, output)

    def prune(self, conn: Any, table: str, before: float, limit: int) -> int:
        return 0  # nothing is old in this test


def test_the_ledgers_replay_and_refuse_another_node() -> None:
    ledger = Ledger()
    first = Operation(id="op-1", node="MEMORY.WRITE", digest="d1")
    assert claim_call(ledger, None, "MEMORY.WRITE", first, "e-1", "") is None
    record_call(ledger, None, "MEMORY.WRITE", first, "e-1", ["out"], 60.0, "")
    assert claim_call(ledger, None, "MEMORY.WRITE", first, "e-2", "") == ["out"]
    # the same execution under a new operation id answers it, and records it
    second = Operation(id="op-2", node="MEMORY.WRITE", digest="d2")
    assert claim_call(ledger, None, "MEMORY.WRITE", second, "e-1", "") == ["out"]
    assert ledger.operations["op-2"].output == ["out"]
    with pytest.raises(MemoryError) as info:
        claim_call(ledger, None, "MEMORY.DELETE", None, "e-1", "")
    assert info.value.code == "CONFLICT" and "MEMORY.WRITE" in str(info.value)


def test_stored_item_is_the_validated_row_item() -> None:  # issue 36 item 0
    from ditto_worker.sqlkit.records import row_item, stored_item, written_item

    row = (7, "id7", "k7", '{"a":[1,2.5,"x"]}', '{"g":0}', "op", "2026-05-01T12:00:00.250000Z",
           "2026-05-01T12:00:00.250000Z")  # fmt: skip
    validated = row_item(row)
    for made in (stored_item(row), written_item(row)):
        assert made == validated
        assert made.model_fields_set == validated.model_fields_set
        assert made.model_dump() == validated.model_dump()
