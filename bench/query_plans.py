"""The query plans of a scoped search, every statement the retrieval pipeline issues.

Issue 19 asks that a search inside one tenant scope of a shared store cost what the same
data costs in a store of its own, and that the closing note show the plans. This script
loads the LoCoMo conversation ``--conversation`` as tenant ``t0`` of a store shared with
``--tenants - 1`` other tenants (the other sample conversations in turn), runs one scoped
search per strategy (keyword, vector, hybrid) through the retrieval pipeline
(``create_retrieval_memory_search_provider`` with the conversation pipeline), records
every SELECT the store sends, and prints each distinct statement (abridged) with its plan:

* SQLite: statements from ``Connection.set_trace_callback`` (values inlined), plans from
  ``EXPLAIN QUERY PLAN`` on the same connection;
* PostgreSQL: statements recorded at ``psycopg.Cursor.execute``, plans from ``EXPLAIN
  (COSTS OFF)`` with the same parameters on the same connection;
* MySQL / MariaDB: statements recorded at ``pymysql.cursors.Cursor.execute``, plans from
  ``EXPLAIN`` (table, access type, key, estimated rows, extra) on the same connection.

Embeddings are ``HashingEmbedder(dims=384)`` (the MiniLM's dimensions without loading a
model): plans depend on the statements and the data's shape, not on vector values. This
prints SQL (with values): a diagnostic for developers, never a log.

Then (issue 28) the QUERY kinds of ``bench/store_scale.py`` (``eq``, ``sorted``, ``and``)
on ``--records`` of its synthetic memories, each in a store without and with
``queryFields`` ``--query-fields`` declared: the plans say whether the declared fields'
indexes are used (``--records 0`` skips this part).

    python bench/query_plans.py                          # sqlite and postgres, 4 tenants
    python bench/query_plans.py --stores sqlite --tenants 100
    python bench/query_plans.py --stores sqlite --records 100000
    python bench/query_plans.py --stores mysql --tenants 1 --records 20000

The PostgreSQL URL comes from ``DITTO_WORKER_MEMORY_POSTGRES_URL`` or
``DITTO_TEST_POSTGRES_URL`` (``bash scripts/postgres.sh start``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_scale import REPO, _write, drafts, open_store, query_inputs, vocabulary  # noqa: E402

from ditto_worker import Scope, create_memory  # noqa: E402

STRATEGIES = ("keyword", "vector", "hybrid")


def _abridged(sql: str, width: int = 160) -> str:
    text = re.sub(r"\s+", " ", sql).strip()
    text = re.sub(r"'[^']{40,}'", "'…'", text)  # long literals (vectors, texts)
    text = re.sub(r"\[[-0-9.e, ]{60,}\]", "[…]", text)
    text = re.sub(r"(\(COALESCE.{80}).*", r"\1…", text)  # long filter expressions
    return text if len(text) <= width else text[: width - 1] + "…"


@contextmanager
def sqlite_statements(store: Any) -> Iterator[Callable[[], list[tuple[str, list[str]]]]]:
    """Record the statements of ``store``'s connection on this thread; yields a function
    returning ``[(statement, plan lines)]`` for the distinct SELECTs seen."""
    conn = store._conn()  # the connection this thread's calls use
    seen: list[str] = []
    conn.set_trace_callback(seen.append)

    def plans() -> list[tuple[str, list[str]]]:
        conn.set_trace_callback(None)
        found = []
        for sql in dict.fromkeys(
            s for s in seen if s.lstrip().upper().startswith(("SELECT", "WITH"))
        ):
            rows = conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall()
            found.append((sql, [f"{'  ' * _depth(rows, r)}{r[3]}" for r in rows]))
        return found

    try:
        yield plans
    finally:
        conn.set_trace_callback(None)


def _depth(rows: list[Any], row: Any) -> int:
    parents = {r[0]: r[1] for r in rows}
    depth, parent = 0, row[1]
    while parent in parents:
        depth, parent = depth + 1, parents[parent]
    return depth


@contextmanager
def postgres_statements() -> Iterator[Callable[[], list[tuple[str, list[str]]]]]:
    """Record the SELECTs psycopg runs (each with its plan, taken on the same connection
    right after it ran); yields a function returning ``[(statement, plan lines)]``."""
    import psycopg

    original = psycopg.Cursor.execute
    found: dict[str, list[str]] = {}
    busy = False

    def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        nonlocal busy
        result = original(self, query, params, **kwargs)
        text = query if isinstance(query, str) else query.as_string(self.connection)
        if not busy and text.lstrip().upper().startswith(("SELECT", "WITH")) and text not in found:
            busy = True
            try:
                with self.connection.cursor() as explain:
                    original(explain, "EXPLAIN (COSTS OFF) " + text, params)
                    found[text] = [str(row[0]) for row in explain.fetchall()]
            finally:
                busy = False
        return result

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        yield lambda: list(found.items())
    finally:
        psycopg.Cursor.execute = original  # type: ignore[method-assign]


@contextmanager
def mysql_statements() -> Iterator[Callable[[], list[tuple[str, list[str]]]]]:
    """Record the SELECTs PyMySQL runs (each with its ``EXPLAIN`` rows, taken on the same
    connection right after it ran); yields a function returning ``[(statement, plan)]``."""
    import pymysql

    original = pymysql.cursors.Cursor.execute
    found: dict[str, list[str]] = {}
    busy = False

    def execute(self: Any, query: Any, args: Any = None) -> Any:
        nonlocal busy
        result = original(self, query, args)
        text = str(query)
        if not busy and text.lstrip().upper().startswith(("SELECT", "WITH")) and text not in found:
            busy = True
            try:
                with self.connection.cursor(pymysql.cursors.DictCursor) as explain:
                    original(explain, "EXPLAIN " + text, args)
                    found[text] = [
                        f"{row['table']}: {row['type']} key={row['key']} rows={row['rows']} "
                        f"{row['Extra'] or ''}"
                        for row in explain.fetchall()
                    ]
            finally:
                busy = False
        return result

    pymysql.cursors.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        yield lambda: list(found.items())
    finally:
        pymysql.cursors.Cursor.execute = original  # type: ignore[method-assign]


def recorder_of(name: str, store: Any) -> Any:
    """The statement recorder of store ``name``."""
    if name == "sqlite":
        return sqlite_statements(store)
    return mysql_statements() if name == "mysql" else postgres_statements()


def _print(title: str, statements: list[tuple[str, list[str]]]) -> None:
    print(f"\n=== {title}: {len(statements)} distinct SELECTs")
    for sql, plan in statements:
        print(f"--- {_abridged(sql)}")
        for line in plan:
            indent = len(line) - len(line.lstrip())
            print(f"    {' ' * indent}{_abridged(line, 150)}")


def query_plans(name: str, records: int, fields: list[str]) -> None:
    """Plans of QUERY eq / sorted / and (store_scale's inputs) on ``records`` synthetic
    memories, without and with ``fields`` declared (``queryFields``)."""
    words = vocabulary()
    inputs = query_inputs(1, 7, words)
    for declared in ([], fields):
        with open_store(name, None, declared) as store:
            memory = create_memory(store)
            batch: list[dict[str, Any]] = []
            for draft in drafts(records, 7, words):
                batch.append(draft)
                if len(batch) == 1000:
                    _write(memory, batch)
                    batch = []
            if batch:
                _write(memory, batch)
            for kind in ("eq", "sorted", "and"):
                call = inputs[kind][0]
                memory.query(call)  # warm
                recorder = recorder_of(name, store)
                with recorder as plans:
                    result = memory.query(call)
                    statements = plans()
                assert result.status == "success", result.error
                title = f"{name}, {records:,} records, QUERY {kind} {call.get('filter')} "
                _print(f"{title}{call.get('orderBy', '')}, queryFields {declared}", statements)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated")
    parser.add_argument("--tenants", type=int, default=4, help="scopes in the shared store")
    parser.add_argument("--conversation", default="30.json", help="data/locomo file")
    parser.add_argument("--records", type=int, default=20000, help="QUERY part: memories")
    parser.add_argument("--query-fields", default="user,kind,n,score", help="QUERY part")
    args = parser.parse_args(argv)

    from ditto_worker.cli.demo import load_conversation
    from ditto_worker.cli.eval import CONVERSATION_PIPELINE, turn_drafts
    from ditto_worker.retrieval import create_retrieval_memory_search_provider
    from ditto_worker.testing import HashingEmbedder

    embedder = HashingEmbedder(dims=384)
    conversation = load_conversation(REPO / "data" / "locomo" / args.conversation)
    others = [load_conversation(p) for p in sorted((REPO / "data" / "locomo").glob("*.json"))]
    question = next(q.question for q in conversation.questions if q.evidence)
    for name in args.stores.split(","):
        with open_store(name, embedder) as store:
            search = create_retrieval_memory_search_provider(store, embedder, CONVERSATION_PIPELINE)
            memory = create_memory(store, search)
            scope = Scope("bench", "t0")
            _write(memory, turn_drafts(conversation), scope)
            for index in range(1, args.tenants):
                _write(
                    memory, turn_drafts(others[index % len(others)]), Scope("bench", f"t{index}")
                )
            for strategy in STRATEGIES:
                call = {"query": question, "strategy": strategy, "limit": 10}
                memory.search(call, scope=scope)  # warm: statements prepared, caches filled
                recorder = recorder_of(name, store)
                with recorder as plans:
                    result = memory.search(call, scope=scope)
                    statements = plans()
                assert result.status == "success", result.error
                _print(f"{name}, tenant t0 of {args.tenants}, {strategy}", statements)
    for name in args.stores.split(",") if args.records else ():
        query_plans(name, args.records, args.query_fields.split(","))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
