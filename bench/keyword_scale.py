"""Keyword SEARCH on SQLite at 100k-1M memories: p50 of two-term queries (issue 28 item 2).

``bench/store_scale.py --million`` loads through WRITE (about 2,000 memories/s on this
machine when it is shared: over 8 minutes per 1M, hours with embeddings); the keyword
index is only the text's terms, so this bench writes the same synthetic texts
(``store_scale.drafts``: seeded, Zipf-like over the LoCoMo vocabulary) straight into the
store's tables through the plugin's own indexing function
(:func:`ditto_plugin_sqlite.fts.index_record`, what WRITE calls) in one transaction, then
measures two-term queries of middle-frequency words (ranks 5 %-25 % of the vocabulary),
p50 / p95 ms with the 1-minute load average. ``--sizes`` grows one store from size to
size; ``--sqlite-file F`` keeps the store in ``F`` and reuses it (a file holding a size
already is not written again), so a 1M file is loaded once.

Rows per size, in one run:

* ``SDK, …``: ``memory.search`` (strategy ``keyword``, ``--limit``) without a filter,
  with one every record passes (``{"tag": {"$exists": false}}``), one kept by about 20 %
  (``kind``) and one by about 0.5 % (``user``).
* ``store, …``: the same four, the same queries interleaved one by one on the store's
  connection in a read transaction: the page statement before the pruning (no filter:
  every candidate scored in SQL, the best ``--limit`` sorted out there, then their
  records; a filter: every candidate scored and its record read and checked) beside the
  current one (``ditto_plugin_sqlite.search._best_rows`` / ``_filtered_rows``), their
  p50 ratio, CPU ms per query (``time.process_time``: what a query costs on free cores,
  the machine being shared) and how many pages differ (ids, order or scores; 0 expected).
* ``--writes N``: WRITE through ``memory.write`` in batches of 1,000 (no vectors) into two
  new stores, rounds alternating: the keyword indexing before schema 7 (no
  ``keyword_scopes.shortest``, reproduced here) and now; memories/s each and the ratio.

    python bench/keyword_scale.py --sizes 100000,1000000
    python bench/keyword_scale.py --sizes 1000000 --sqlite-file /tmp/kw.db   # kept
    python bench/keyword_scale.py --sizes 0 --writes 100000   # WRITE only
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_scale import drafts, percentiles, timed, vocabulary  # noqa: E402

from ditto_plugin_sqlite import SqliteMemoryStore  # noqa: E402
from ditto_plugin_sqlite import store as store_module  # noqa: E402
from ditto_plugin_sqlite.fts import KeywordPlan, index_record, keyword_plan  # noqa: E402
from ditto_plugin_sqlite.fts import _scope as keyword_scope  # noqa: E402
from ditto_plugin_sqlite.search import _best_rows, _filtered_rows, _keyword_sql  # noqa: E402
from ditto_plugin_sqlite.sql import compile_filter, in_namespace  # noqa: E402
from ditto_worker import create_memory  # noqa: E402
from ditto_worker.memory.filters import parse_filter  # noqa: E402
from ditto_worker.memory.text import index_terms, keyword_text  # noqa: E402
from ditto_worker.sqlkit.records import COLUMNS  # noqa: E402

EVERY = {"filter": {"tag": {"$exists": False}}}
"""A filter every bench record passes (their metadata has ``tags``, not ``tag``)."""


def load(store: SqliteMemoryStore, source: object, start: int, count: int) -> float:
    """Write ``count`` drafts of ``source`` as records ``start + 1 …``; records/s."""
    began = time.perf_counter()
    conn = store._conn()
    conn.execute("BEGIN IMMEDIATE")
    for offset in range(count):
        draft = next(source)  # type: ignore[call-overload]
        seq = start + offset + 1
        conn.execute(
            "INSERT INTO memories (seq, namespace, id, key, content, metadata, created_at,"
            " updated_at) VALUES (?, '', ?, ?, ?, ?, ?, ?)",
            (seq, uuid.uuid4().hex, draft["key"], json.dumps(draft["content"]),
             json.dumps(draft["metadata"]), "2026-01-01T00:00:00.000000Z",
             "2026-01-01T00:00:00.000000Z"),
        )  # fmt: skip
        index_record(conn, seq, "", keyword_text(draft["content"], draft["key"]))
    conn.execute("COMMIT")
    return count / (time.perf_counter() - began)


Way = Callable[[Any, KeywordPlan, Any, int], list[tuple[Any, ...]]]
"""A page statement: ``(conn, plan, where, limit) -> rows`` (each ends with the score)."""


def previous_rows(conn: Any, plan: KeywordPlan, where: Any, limit: int) -> list[tuple[Any, ...]]:
    """The page statement of an unfiltered search before the pruning: every candidate
    scored in SQL, the best ``limit`` chosen there, then their records."""
    sql = (
        f"{plan.sql}SELECT {COLUMNS}, s.score AS score FROM "
        "(SELECT seq, score FROM s ORDER BY score DESC, seq LIMIT ?) AS s "
        f"JOIN memories AS m ON m.seq = s.seq WHERE {where.text} "
        "ORDER BY score DESC, m.seq LIMIT ?"
    )
    return list(conn.execute(sql, [*plan.params, limit, *where.params, limit]))


def every_candidate(conn: Any, plan: KeywordPlan, where: Any, limit: int) -> list[tuple[Any, ...]]:
    """The page statement of a filtered search before the pruning (and its fallback now):
    every candidate scored and its record read and checked."""
    return list(conn.execute(*_keyword_sql(plan, where, limit)))


COMPARED: dict[str, tuple[dict[str, Any] | None, Way, Way]] = {
    "no filter": (None, previous_rows, _best_rows),
    "filter all pass": (EVERY["filter"], every_candidate, _filtered_rows),
    "filter kind (20 %)": ({"kind": "fact"}, every_candidate, _filtered_rows),
    "filter user (0.5 %)": ({"user": "u7"}, every_candidate, _filtered_rows),
}
"""Per row: the filter, the previous page statement and the current one."""


def side_by_side(store: SqliteMemoryStore, queries: list[str], limit: int, row: str) -> None:
    """Both page statements of ``row``, interleaved query by query; p50s, CPU, ratio and
    the pages that differ."""
    given, previous, now = COMPARED[row]
    where = in_namespace(compile_filter(parse_filter(given)), "", lookup=False)
    ways = {"before": previous, "now": now}
    wall: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    differ = 0
    with store._tx(None, write=False) as conn:
        for query in queries:
            pages = []
            for name, way in ways.items():
                began, used = time.perf_counter(), time.process_time()
                plan = keyword_plan(conn, query, "", read=name == "now")
                pages.append([] if plan is None else way(conn, plan, where, limit))
                wall[name].append((time.perf_counter() - began) * 1000)
                cpu[name].append((time.process_time() - used) * 1000)
            differ += pages[0] != pages[1]
    load_now = "/".join(f"{x:.2f}" for x in os.getloadavg())
    (b50, b95), (n50, n95) = percentiles(wall["before"]), percentiles(wall["now"])
    bcpu, ncpu = percentiles(cpu["before"])[0], percentiles(cpu["now"])[0]
    print(f"  store, {row:<20} before p50 {b50:8.2f} / p95 {b95:8.2f} ms (CPU {bcpu:6.2f}), "
          f"now {n50:7.2f} / {n95:7.2f} ms (CPU {ncpu:6.2f}); ratio {b50 / n50:.2f}x wall, "
          f"{bcpu / ncpu:.2f}x CPU; pages that differ {differ} of {len(queries)}; "
          f"load {load_now}", flush=True)  # fmt: skip


def previous_index_record(conn: Any, seq: int, namespace: str, text: str) -> None:
    """``fts.index_record`` before schema 7: the same, without ``shortest`` and ``kept``."""
    terms = index_terms(text)
    if not terms:
        return
    scope = keyword_scope(conn, namespace, create=True)
    conn.execute(
        "INSERT INTO memories_fts (rowid, terms) VALUES (?, ?)",
        (seq, " ".join(f"{scope}_{term}" for term in terms)),
    )
    conn.execute(
        "INSERT INTO memories_fts_docs (seq, scope, terms) VALUES (?, ?, ?)",
        (seq, scope, len(terms)),
    )
    conn.execute(
        "UPDATE keyword_scopes SET records = records + 1, terms = terms + ? WHERE id = ?",
        (len(terms), scope),
    )


def writes(count: int, seed: int, words: list[str], rounds: int = 10) -> None:
    """WRITE ``count`` memories into each of two new stores in alternating rounds (batches
    of 1,000): the keyword indexing before schema 7 (reproduced here) and now; memories/s
    each and their ratio."""
    folder = Path(tempfile.mkdtemp(prefix="ditto-kw-writes-"))
    ways = {"previous": previous_index_record, "now": index_record}
    names = list(ways)
    spent = dict.fromkeys(ways, 0.0)
    sources = {name: drafts(count, seed, words) for name in ways}
    stores = {name: SqliteMemoryStore(folder / f"{name}.sqlite") for name in ways}
    try:
        for turn in range(rounds):
            for name in names if turn % 2 == 0 else names[::-1]:  # each goes first in turn
                store_module.index_record = ways[name]  # type: ignore[assignment]
                memory = create_memory(stores[name])
                for _ in range(count // rounds // 1000):
                    batch = [next(sources[name]) for _ in range(1000)]
                    began = time.perf_counter()
                    result = memory.write({"memories": batch})
                    spent[name] += time.perf_counter() - began
                    assert result.status == "success", result.error
    finally:
        store_module.index_record = index_record
        for store in stores.values():
            store.close()
        for name in os.listdir(folder):
            os.remove(folder / name)
        folder.rmdir()
    done = count // rounds // 1000 * 1000 * rounds
    rates = {name: done / seconds for name, seconds in spent.items()}
    print(f"WRITE {done:,} memories per store, batches of 1,000, {rounds} alternating rounds: "
          f"previous {rates['previous']:,.0f}/s, now {rates['now']:,.0f}/s, ratio now / "
          f"previous {rates['now'] / rates['previous']:.3f}; load average "
          + "/".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)  # fmt: skip


def held(path: Path) -> int:
    """Records an existing bench file holds (0 for a new one)."""
    if not path.exists():
        return 0
    with SqliteMemoryStore(path) as store, store._tx(None, write=False) as conn:
        return int(conn.execute("SELECT coalesce(max(seq), 0) FROM memories").fetchone()[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000", help="comma-separated sizes")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--limit", type=int, default=10, help="SEARCH limit")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sqlite-file", type=Path, help="keep and reuse the store here")
    parser.add_argument("--writes", type=int, default=0, help="WRITE comparison: memories")
    args = parser.parse_args(argv)
    words = vocabulary()
    if args.writes:
        writes(args.writes, args.seed, words)
    middle = words[len(words) // 20 : len(words) // 4]
    rng = random.Random(args.seed + 1)
    texts = [" ".join(rng.sample(middle, 2)) for _ in range(args.queries)]
    queries = [{"query": text, "strategy": "keyword", "limit": args.limit} for text in texts]
    folder = None if args.sqlite_file else tempfile.mkdtemp(prefix="ditto-kw-")
    path = args.sqlite_file or Path(str(folder)) / "kw.sqlite"
    done = held(path)
    source = drafts(10**9, args.seed, words)
    for _ in range(done):
        next(source)
    print(f"load average at start {os.getloadavg()}; {done:,} records held")
    with SqliteMemoryStore(path) as store:
        memory = create_memory(store)
        for size in sorted(int(s) for s in args.sizes.split(",") if int(s)):
            if size > done:
                rate = load(store, source, done, size - done)
                print(f"{size:>9,} memories: loaded {rate:,.0f}/s", flush=True)
                done = size
            print(f"{size:>9,} memories (file holds {done:,}): "
                  f"{path.stat().st_size / 1e6:,.0f} MB, limit {args.limit}")  # fmt: skip
            for row, (given, _, _) in COMPARED.items():
                calls = [{**q, "filter": given} if given else q for q in queries]
                timed(memory.search, calls[:20])
                p50, p95 = percentiles(timed(memory.search, calls))
                print(f"  SDK, {row:<20} p50 {p50:7.2f} ms, p95 {p95:7.2f} ms, load "
                      f"{os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
            for row in COMPARED:
                side_by_side(store, texts, args.limit, row)
    if folder is not None:
        for name in os.listdir(folder):
            os.remove(Path(folder) / name)
        os.rmdir(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
