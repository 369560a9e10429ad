"""QUERY on a kept PostgreSQL store: the filter compiler of a git ref beside this one's.

Issue 28 item 3 asks that equality, ranges and sorts on declared ``queryFields`` use their
indexes on PostgreSQL, measured old against new under the same load. This script opens
one kept bench schema (loaded once by ``bench/store_scale.py --pg-schema S --load-only``)
and measures store_scale's QUERY kinds (``eq``, ``range``, ``sorted``, ``page2``,
``and``) in four variants, one call of each in turn per round (so every variant sees the
same load):

* ``old`` / ``new``: ``ditto_plugin_postgres.sql`` as of ``--ref`` (read with ``git
  show``, loaded as a module of its own) or as in this worktree, swapped into the store
  module for the call;
* ``decl`` / ``undecl``: a store opened with ``--query-fields`` declared, or without
  (the same schema: the declared fields' indexes exist, an undeclared query does not
  match their expressions).

It prints p50 / p95 ms per kind and variant, the new/old ratio, the load average before
and after, and with ``--plans`` each variant's ``EXPLAIN (ANALYZE, COSTS OFF, TIMING
OFF)`` of the first input of each kind. Statements and plans carry values: a diagnostic
for developers, never a log.

    python bench/store_scale.py --stores postgres --n 100000 --pg-schema qf_bench --load-only
    python bench/query_ab.py --pg-schema qf_bench --ref main --queries 100 --plans

The PostgreSQL URL comes from ``DITTO_WORKER_MEMORY_POSTGRES_URL`` or
``DITTO_TEST_POSTGRES_URL``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale_index  # noqa: E402
from store_scale import REPO, percentiles, query_inputs, vocabulary  # noqa: E402

from ditto_worker import create_memory  # noqa: E402

KINDS = ("eq", "range", "sorted", "page2", "and")
SWAPPED = ("compile_filter", "in_namespace", "keyset_condition", "order_clause", "sort_columns")


def compiler_at(ref: str) -> types.ModuleType:
    """``ditto_plugin_postgres.sql`` as of git ``ref``, as a module of its own."""
    path = "plugins/postgres/ditto_plugin_postgres/sql.py"
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{ref}:{path}"], check=True,
                            capture_output=True, text=True).stdout  # fmt: skip
    module = types.ModuleType(f"sql_at_{ref}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{ref}:{path}", "exec"), module.__dict__)  # noqa: S102
    return module


@contextmanager
def compiled_by(module: types.ModuleType) -> Iterator[None]:
    """The PostgreSQL store's query compiled by ``module``'s functions meanwhile."""
    import ditto_plugin_postgres.store as store_module

    saved = {name: getattr(store_module, name) for name in SWAPPED}
    for name in SWAPPED:
        setattr(store_module, name, getattr(module, name))
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(store_module, name, value)


def explain(memory: Any, call: dict[str, Any]) -> list[str]:
    """The plan lines of the SELECT ``call`` sends (EXPLAIN ANALYZE on the same data)."""
    import psycopg

    original = psycopg.Cursor.execute
    plans: list[str] = []

    def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else query.as_string(self.connection)
        if text.lstrip().upper().startswith("SELECT *") and not plans:
            with self.connection.cursor() as cur:
                original(cur, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + text, params)
                plans.extend(str(row[0]) for row in cur.fetchall())
        return original(self, query, params, **kwargs)

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        memory.query(call)
    finally:
        psycopg.Cursor.execute = original  # type: ignore[method-assign]
    return plans


def page2_inputs(memory: Any, eq: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The second page of each ``eq`` input (its first page's cursor)."""
    out = []
    for call in eq:
        first = memory.query(call)
        if first.output and first.output.next_cursor:
            out.append({**call, "cursor": first.output.next_cursor})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-schema", required=True, help="a kept store_scale schema")
    parser.add_argument("--ref", default="main", help="git ref of the old compiler")
    parser.add_argument("--query-fields", default="user,kind,n,score")
    parser.add_argument("--queries", type=int, default=100, help="rounds (calls per variant)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--plans", action="store_true", help="print each variant's plans")
    args = parser.parse_args(argv)

    from ditto_plugin_postgres import PostgresMemoryStore
    from ditto_plugin_postgres import sql as new_sql

    url = scale_index.postgres_url()
    fields = args.query_fields.split(",")
    compilers = {"old": compiler_at(args.ref), "new": new_sql}
    stores = {
        "decl": PostgresMemoryStore(url, schema=args.pg_schema, query_fields=fields),
        "undecl": PostgresMemoryStore(url, schema=args.pg_schema),
    }
    try:
        memories = {label: create_memory(store) for label, store in stores.items()}
        inputs = query_inputs(args.queries, args.seed, vocabulary())
        inputs["page2"] = page2_inputs(memories["decl"], inputs["eq"])
        variants = [(c, s) for s in memories for c in compilers]
        report(args, variants, compilers, memories, inputs)
    finally:
        for store in stores.values():
            store.close()
    return 0


def report(
    args: argparse.Namespace, variants: list[tuple[str, str]], compilers: dict[str, Any],
    memories: dict[str, Any], inputs: dict[str, list[dict[str, Any]]],
) -> None:  # fmt: skip
    """Warm up, print the plans (``--plans``), time the rounds, print the table."""

    def call(variant: tuple[str, str], input: dict[str, Any]) -> float:
        with compiled_by(compilers[variant[0]]):
            start = time.perf_counter()
            result = memories[variant[1]].query(input)
            elapsed = (time.perf_counter() - start) * 1000
        assert result.status == "success", result.error
        return elapsed

    for kind in KINDS:
        for variant in variants:
            for input in inputs[kind][:5]:
                call(variant, input)
            if args.plans:
                with compiled_by(compilers[variant[0]]):
                    plan = explain(memories[variant[1]], inputs[kind][0])
                print(f"\n--- {kind} {'/'.join(variant)}: {inputs[kind][0]}")
                print("\n".join(f"    {line}" for line in plan))
    load_before = os.getloadavg()
    samples: dict[tuple[str, str, str], list[float]] = {}
    for round_ in range(args.queries):
        for kind in KINDS:
            if round_ < len(inputs[kind]):
                for variant in variants:
                    samples.setdefault((kind, *variant), []).append(
                        call(variant, inputs[kind][round_])
                    )
    print_table(args, variants, samples, load_before)


def print_table(
    args: argparse.Namespace, variants: list[tuple[str, str]],
    samples: dict[tuple[str, str, str], list[float]], load_before: tuple[float, ...],
) -> None:  # fmt: skip
    """p50 / p95 per kind and variant, new/old p50 ratios, the load averages."""
    rows = scale_rows(samples)
    print(f"\nschema {args.pg_schema}, old = {args.ref}, queryFields {args.query_fields}; "
          f"{args.queries} rounds, one call per variant each; p50 / p95 ms")  # fmt: skip
    print(f"load average (1/5/15 min) before {'/'.join(f'{x:.2f}' for x in load_before)}, "
          f"after {'/'.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    heads = [f"{c} {s}" for c, s in variants]
    print(f"{'':<8}" + "".join(f"{h:>18}" for h in heads) + "  new/old decl  new/old undecl")
    for kind in KINDS:
        cells = "".join(
            f"{rows[(kind, *v)][0]:>8.2f} / {rows[(kind, *v)][1]:>7.2f}" for v in variants
        )
        ratios = [rows[(kind, "new", s)][0] / rows[(kind, "old", s)][0] for s in ("decl", "undecl")]
        print(f"{kind:<8}{cells}  {ratios[0]:>12.3f}  {ratios[1]:>14.3f}")


def scale_rows(
    samples: dict[tuple[str, str, str], list[float]],
) -> dict[tuple[str, str, str], tuple[float, float]]:
    """(p50, p95) per (kind, compiler, store)."""
    return {key: percentiles(values) for key, values in samples.items()}


if __name__ == "__main__":
    raise SystemExit(main())
