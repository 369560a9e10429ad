"""Keyword SEARCH on SQLite at 100k-1M memories: p50 of two-term queries (issue 28 item 2).

``bench/store_scale.py --million`` loads through WRITE (about 2,000 memories/s on this
machine when it is shared: over 8 minutes per 1M, hours with embeddings); the keyword
index is only the text's terms, so this bench writes the same synthetic texts
(``store_scale.drafts``: seeded, Zipf-like over the LoCoMo vocabulary) straight into the
store's tables through the plugin's own indexing function
(:func:`ditto_plugin_sqlite.fts.index_record`, what WRITE calls) in one transaction, then
measures ``memory.search`` (strategy ``keyword``, limit 10) through the SDK for
two-term queries of middle-frequency words (ranks 5 %-25 % of the vocabulary), p50 / p95
ms with the load average. ``--sizes`` grows one store from size to size.

Two rows per size, in one run: ``top k first`` (no filter: the best 10 candidates are
chosen from the scores before any record is read) and ``every candidate`` (the same
queries with a filter every record passes, ``{"tag": {"$exists": false}}``: each
candidate's record is read and checked, as every keyword search did before issue 28),
and their ratio.

    python bench/keyword_scale.py --sizes 100000,1000000
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_scale import drafts, percentiles, timed, vocabulary  # noqa: E402

from ditto_plugin_sqlite import SqliteMemoryStore  # noqa: E402
from ditto_plugin_sqlite.fts import index_record  # noqa: E402
from ditto_worker import create_memory  # noqa: E402
from ditto_worker.memory.text import keyword_text  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000", help="comma-separated sizes")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    words = vocabulary()
    middle = words[len(words) // 20 : len(words) // 4]
    rng = random.Random(args.seed + 1)
    queries = [
        {"query": " ".join(rng.sample(middle, 2)), "strategy": "keyword", "limit": 10}
        for _ in range(args.queries)
    ]
    folder = tempfile.mkdtemp(prefix="ditto-kw-")
    path = Path(folder) / "kw.sqlite"
    source, done = drafts(10**9, args.seed, words), 0
    print(f"load average at start {os.getloadavg()}")
    with SqliteMemoryStore(path) as store:
        memory = create_memory(store)
        for size in sorted(int(s) for s in args.sizes.split(",")):
            rate = load(store, source, done, size - done)
            done = size
            mb = path.stat().st_size / 1e6
            print(f"{size:>9,} memories: load {rate:,.0f}/s, {mb:,.0f} MB", flush=True)
            rows = {}
            for label, extra in (("top k first", {}), ("every candidate", EVERY)):
                calls = [{**q, **extra} for q in queries]
                timed(memory.search, calls[:20])
                rows[label] = percentiles(timed(memory.search, calls))
                p50, p95 = rows[label]
                print(f"  keyword two-term, {label:<16} p50 {p50:7.2f} ms, p95 {p95:7.2f} ms")
            ratio = rows["top k first"][0] / rows["every candidate"][0]
            print(
                f"  p50 ratio top k first / every candidate: {ratio:.3f}; load average "
                + "/".join(f"{x:.2f}" for x in os.getloadavg()),
                flush=True,
            )
    for name in os.listdir(folder):
        os.remove(Path(folder) / name)
    os.rmdir(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
