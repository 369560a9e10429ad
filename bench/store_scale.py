"""Store plugins at scale: bulk WRITE rate and QUERY / keyword SEARCH latency.

The same data and the same queries for every store (SQLite, PostgreSQL, MySQL and Qdrant), through
the direct SDK (``create_memory``: validation included, no broker):

* data: ``--n`` memories (default 100,000; ``--million`` for 1,000,000), seeded; each a
  12-30 word text drawn (Zipf-like) from the vocabulary of the LoCoMo sample
  conversations, a key, and metadata ``{user: u0..u199, kind: 5 values, n: 0..999,
  score: float, tags: [..]}``;
* WRITE: batches of ``--batch`` (1,000) memories; memories/s over the whole load;
* QUERY (``--queries`` each, default 200, after 20 warm-up calls), limit 50:
  ``eq`` (``{user: uX}``), ``range`` (``{n: {$gte, $lt}}`` over 1% of values),
  ``sorted`` (``{kind: K}`` ordered by ``score`` desc), ``page2`` (the second page of
  ``eq`` via its cursor), ``and`` (``{user, kind, n < 500}``);
* SEARCH: keyword, limit 10, two words of middle frequency per query (vocabulary ranks
  5-25 %: each in roughly 0.3-1.3 % of the records); with ``--embedder synthetic``,
  ``hashing`` or ``local`` every store embeds on WRITE and SEARCH ``vector`` and
  ``hybrid`` are measured too, with the same query texts (``--vector-queries`` calls);
  ``vector first`` is the first vector call after the load (a lazily built index's cost);
* after each load: ``open s`` (opening the store and its first call: migrations, declared
  ``queryFields`` indexes built or dropped; a kept store's indexes over all its rows),
  ``index build s`` (PostgreSQL with ``--index-after-load``: the HNSW
  index dropped before the load and built after it, as pgvector advises for bulk loads,
  in a session with ``maintenance_work_mem = --maintenance-work-mem``; then ``ANALYZE``),
  ``size MB`` on disk (SQLite: the file and the files named after it; PostgreSQL: tables,
  indexes and TOAST of the bench schema), ``peak RSS MB`` of this process (and of the
  PostgreSQL backend that built the index, when the server runs on this machine); every
  latency carries the 1-minute load average at its end (``@``; 2 shared cores here).

``--million`` is 1,000,000 memories with ``--embedder synthetic`` (unless another is
given) and ``--index-after-load``: ``bench/synthetic.py``'s clustered, perturbed 384-dim
vectors (embedding 1M texts with the model takes over an hour on two cores). Loading
goes through the public WRITE path (``create_memory(store).write``) in batches of
``--batch``: the plugins have no bulk path. ``--sqlite-file F`` keeps the SQLite store in
``F`` (``--pg-schema S``: the PostgreSQL store in schema ``S``, not dropped at the end); a
later run with the same ``F`` or ``S`` measures it as it is, without loading again (e.g.
after a plugin change that indexes on open), or with ``--from N`` writes drafts ``N`` to
``--n`` first; with ``--load-only`` a run writes and stops, so several processes can load
disjoint ranges of one kept store (``--from A --n B``) and a last run measures it (the
HNSW index is built then if it is missing).

Qdrant runs in the client's **local mode** (``QdrantClient(path=…)``: in-process, brute
force, no payload indexes; no Qdrant server can run here), so its figures are labelled
``qdrant-local``; they say what the embedded case costs, not what a server does. A store
skips the query kinds it does not declare (Qdrant: ``orderBy`` on a metadata field).
Milvus runs on **Milvus Lite 3** (``uri: <folder>/milvus.db``: a Python reimplementation
of Milvus that pymilvus starts in-process and talks gRPC to), labelled ``milvus-lite``;
like ``qdrant-local``, its figures are the embedded case, not a Milvus server's. It
declares no ``orderBy`` on metadata (``sorted`` is skipped).
``--embedder hashing`` is ``ditto_worker.testing.HashingEmbedder`` with 384 dims: the
stores' vector cost without a model's.

With ``--tenants 0,100`` each store is also loaded with the same memories spread over
100 tenant scopes (:mod:`ditto_worker.memory.scope`; batches round-robin) and measured as
tenant ``t0`` (about ``n / 100`` records visible): a scoped call should cost what a store
of one tenant's size costs, not what the whole table costs (the namespace index).

Latencies are p50/p95 in ms for one caller. The PostgreSQL URL comes from
``DITTO_WORKER_MEMORY_POSTGRES_URL`` or ``DITTO_TEST_POSTGRES_URL`` (``bash
scripts/postgres.sh start``); the bench works in a schema of its own, dropped at the end.

    python bench/store_scale.py                      # 100k, sqlite and postgres
    python bench/store_scale.py --million --stores postgres   # 1M (about an hour here)
    python bench/store_scale.py --million --stores sqlite --vector-queries 50 \
        --sqlite-file /tmp/sqlite1m.sqlite   # kept: measure again without loading
    python bench/store_scale.py --stores sqlite --n 20000
    python bench/store_scale.py --tenants 0,100      # unscoped vs one of 100 tenants
    python bench/store_scale.py --stores sqlite,postgres,qdrant --n 20000 --embedder hashing
    python bench/store_scale.py --stores sqlite,postgres,mysql --n 10000 --embedder hashing
    python bench/store_scale.py --tenants 0,4,100 --pipeline   # issue 19, see below
    python bench/store_scale.py --stores sqlite,postgres,mysql,qdrant,milvus --sizes 10000,100000 \
        --embedder hashing --cap milvus=10000 --budget-s 60 --json scale.json --plot scale.png
    python bench/store_scale.py --from-json scale.json --plot scale.png   # print/plot again

``--sizes`` measures several collection sizes in one run: each store is grown from one
size to the next and measured at each. ``--cap STORE=SIZE`` keeps a slow store (Milvus
Lite evaluates every filter in Python) below the larger sizes; the output says in words
which store was not measured at which size. ``--budget-s`` bounds the seconds spent per
query kind and size (at least 3 calls), so a p50 may be over fewer calls than
``--queries``: the table shows that count in brackets. ``--plot FILE.png`` draws p50
against collection size per store and query kind (matplotlib, the ``bench`` extra);
``--json`` keeps the figures, the command and the load average of the run.

    python bench/store_scale.py --stores sqlite --query-fields user,kind,n,score  # issue 28

``--query-fields`` (issue 28) runs each SQL store twice in one run, without and with those
``queryFields`` declared (label ``+qf``), and prints the p50 ratios of the QUERY kinds.

``--pipeline`` (issue 19) measures the retrieval pipeline instead
(``create_retrieval_memory_search_provider`` with the conversation pipeline, local
all-MiniLM-L6-v2): the LoCoMo conversation ``--conversation`` (663 turns) in a store of
its own (``0``) and as tenant ``t0`` of a store shared with ``T - 1`` other tenants
holding the same number of turns (the two sample conversations in turn), for each ``T``
of ``--tenants``; ``--questions`` (40) questions per strategy (keyword, vector, hybrid),
p50/p95 ms and the ratio to the own store. Texts are embedded once (a cache keyed by
text), so loading 100 tenants takes minutes, not an hour.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import scale_index
import scale_report

from ditto_worker import Scope, create_memory

REPO = Path(__file__).resolve().parent.parent
KINDS = ("fact", "preference", "event", "task", "note")
QUERY_LIMIT = 50


def vocabulary() -> list[str]:
    """Distinct lower-case words of the LoCoMo sample texts, most frequent first."""
    counts: Counter[str] = Counter()
    for path in sorted((REPO / "data" / "locomo").glob("*.json")):
        text = json.dumps(json.loads(path.read_text(encoding="utf-8")), ensure_ascii=False)
        counts.update(re.findall(r"[a-z]{3,}", text.lower()))
    return [word for word, _ in counts.most_common()]


def drafts(n: int, seed: int, words: list[str]) -> Iterator[dict[str, Any]]:
    """``n`` memory drafts, deterministic for ``seed``."""
    rng = random.Random(seed)
    weights = list(itertools.accumulate(1 / (rank + 10) for rank in range(len(words))))
    for i in range(n):  # cum_weights: the same draws as weights=, without O(words) per call
        text = " ".join(rng.choices(words, cum_weights=weights, k=rng.randint(12, 30)))
        yield {
            "key": f"mem:{i}",
            "content": text,
            "metadata": {
                "user": f"u{rng.randrange(200)}",
                "kind": rng.choice(KINDS),
                "n": rng.randrange(1000),
                "score": round(rng.random(), 6),
                "tags": rng.sample(KINDS, 2),
            },
        }


def query_inputs(count: int, seed: int, words: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The QUERY and SEARCH inputs, per kind (the same for every store)."""
    rng = random.Random(seed + 1)
    middle = words[len(words) // 20 : len(words) // 4]
    out: dict[str, list[dict[str, Any]]] = {
        "eq": [],
        "range": [],
        "sorted": [],
        "and": [],
        "search": [],
    }
    for _ in range(count):
        low = rng.randrange(990)
        out["eq"].append({"filter": {"user": f"u{rng.randrange(200)}"}, "limit": QUERY_LIMIT})
        out["range"].append({"filter": {"n": {"$gte": low, "$lt": low + 10}}, "limit": QUERY_LIMIT})
        out["sorted"].append(
            {
                "filter": {"kind": rng.choice(KINDS)},
                "orderBy": [{"field": "score", "direction": "desc"}],
                "limit": QUERY_LIMIT,
            }
        )
        out["and"].append(
            {
                "filter": {
                    "user": f"u{rng.randrange(200)}",
                    "kind": rng.choice(KINDS),
                    "n": {"$lt": 500},
                },
                "limit": QUERY_LIMIT,
            }
        )
        terms = " ".join(rng.sample(middle, 2))
        out["search"].append({"query": terms, "strategy": "keyword", "limit": 10})
    out["vector"] = [{**q, "strategy": "vector"} for q in out["search"]]
    out["hybrid"] = [{**q, "strategy": "hybrid"} for q in out["search"]]
    return out


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p95) of ``samples`` (ms)."""
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


def timed(
    call: Callable[[dict[str, Any]], Any], inputs: list[dict[str, Any]], budget_s: float = 0.0
) -> list[float]:
    """Latency (ms) of each call; a failed NodeResult stops the bench. With ``budget_s``
    > 0 the calls stop once that many seconds have passed (at least 3 calls are made), so
    a store that takes seconds per call gives a p50 over fewer calls (the table says how
    many)."""
    samples: list[float] = []
    started = time.perf_counter()
    for input in inputs:
        start = time.perf_counter()
        result = call(input)
        samples.append((time.perf_counter() - start) * 1000)
        if result.status != "success":
            raise SystemExit(f"call failed: {result.error}")
        if budget_s > 0 and len(samples) >= 3 and time.perf_counter() - started > budget_s:
            break
    return samples


class Scoped:
    """The SDK calling in one tenant scope (``None``: unscoped)."""

    def __init__(self, memory: Any, scope: Scope | None) -> None:
        self.memory, self.scope = memory, scope

    def write(self, input: Any, scope: Scope | None = None) -> Any:
        return self.memory.write(input, scope=scope or self.scope)

    def query(self, input: Any) -> Any:
        return self.memory.query(input, scope=self.scope)

    def search(self, input: Any) -> Any:
        return self.memory.search(input, scope=self.scope)


def tenant(index: int, tenants: int) -> Scope | None:
    """The scope of batch ``index`` when spreading over ``tenants`` (0: unscoped)."""
    return Scope("bench", f"t{index % tenants}") if tenants else None


def load(
    memory: Any,
    source: Iterator[dict[str, Any]],
    count: int,
    batch: int,
    tenants: int = 0,
    done: int = 0,
) -> float:
    """WRITE the next ``count`` drafts of ``source`` in batches (round-robin over
    ``tenants`` scopes; ``done`` memories were written before); memories/s."""
    start = time.perf_counter()
    pending: list[dict[str, Any]] = []
    wrote = 0
    for _, draft in zip(range(count), source, strict=False):
        pending.append(draft)
        if len(pending) == batch:
            wrote += _write(memory, pending, tenant((done + wrote) // batch, tenants))
            pending = []
            if wrote % (batch * 20) == 0:
                print(f"  {done + wrote:>9,} written, {time.perf_counter() - start:7.1f} s",
                      flush=True)  # fmt: skip
    if pending:
        wrote += _write(memory, pending, tenant((done + wrote) // batch, tenants))
    return wrote / (time.perf_counter() - start)


def _write(memory: Any, batch: list[dict[str, Any]], scope: Scope | None = None) -> int:
    result = memory.write({"memories": batch}, scope=scope)
    if result.status != "success":
        raise SystemExit(f"WRITE failed: {result.error}")
    return len(result.output)


Row = tuple[float, float, int, float]
"""p50 ms, p95 ms, the number of calls they are over and the 1-minute load average after."""


def measure(
    memory: Any, inputs: dict[str, list[dict[str, Any]]], caps: Any = None, budget_s: float = 0.0
) -> dict[str, Row]:
    """p50/p95 per query kind, after up to 20 warm-up calls of each (kinds the store does
    not declare are left out: a metadata ``orderBy``, ``vector``/``hybrid`` without
    vectors); ``budget_s`` bounds each kind's calls (:func:`timed`; its warm-up a quarter
    of it)."""
    rows: dict[str, Row] = {}

    def kind(name: str, call: Callable[[dict[str, Any]], Any], given: list[dict[str, Any]]) -> None:
        timed(call, given[: min(20, max(1, len(given) // 10))], budget_s / 4)
        samples = timed(call, given, budget_s)
        rows[name] = (*percentiles(samples), len(samples), os.getloadavg()[0])

    if caps is not None and "vector" in caps.search_strategies:
        (first,) = timed(memory.search, inputs["vector"][:1])
        rows["vector first"] = (first, first, 1, os.getloadavg()[0])

    kinds = ["eq", "range", "sorted", "and"]
    if caps is not None and "metadata.*" not in caps.order_by_fields:
        kinds.remove("sorted")
    for name in kinds:
        kind(f"QUERY {name}", memory.query, inputs[name])
    firsts = [memory.query(q).output for q in inputs["eq"][: rows["QUERY eq"][2]]]
    seconds = [
        {**q, "cursor": page.next_cursor}
        for q, page in zip(inputs["eq"], firsts, strict=False)
        if page.next_cursor
    ]
    if seconds:  # small --n: a user may have fewer than QUERY_LIMIT memories
        kind("QUERY page2", memory.query, seconds)
    kind("SEARCH keyword", memory.search, inputs["search"])
    for strategy in ("vector", "hybrid"):
        if caps is not None and strategy in caps.search_strategies:
            kind(f"SEARCH {strategy}", memory.search, inputs[strategy])
    return rows


def embedder_of(kind: str) -> Any:
    """The embedding provider of ``--embedder``: ``none``, ``synthetic`` (384 dims,
    ``bench/synthetic.py``), ``hashing`` (384 dims) or ``local`` (all-MiniLM-L6-v2)."""
    if kind == "none":
        return None
    if kind == "synthetic":
        from synthetic import SyntheticEmbedder

        return SyntheticEmbedder(dims=384)
    if kind == "hashing":
        from ditto_worker.testing import HashingEmbedder

        return HashingEmbedder(dims=384)
    from ditto_worker.retrieval import create_embedding_provider

    return create_embedding_provider(kind)


@contextmanager
def open_store(
    name: str, embedder: Any = None, query_fields: Sequence[str] = (), keep: str | None = None
) -> Iterator[Any]:
    """A fresh, empty store ``sqlite`` (temp file), ``postgres`` (own schema), ``mysql``
    (own database), ``qdrant`` (local mode in a temp folder) or ``milvus`` (Milvus Lite 3
    in a temp folder); ``query_fields``: the SQL stores' ``queryFields``. ``keep``: the
    SQLite file or PostgreSQL schema to use and keep at the end (the store's
    ``count_existing`` attribute says whether it existed before)."""
    declared = {"query_fields": list(query_fields)} if query_fields else {}
    if name == "milvus":
        from ditto_plugin_milvus import MilvusMemoryStore

        folder = tempfile.mkdtemp(prefix="ditto-bench-")
        milvus = MilvusMemoryStore(uri=f"{folder}/milvus.db", collection="bench",
                                   embedder=embedder)  # fmt: skip
        try:
            yield milvus
        finally:
            milvus.close()
            shutil.rmtree(folder, ignore_errors=True)
        return
    if name == "qdrant":
        from ditto_plugin_qdrant import QdrantMemoryStore

        folder = tempfile.mkdtemp(prefix="ditto-bench-")
        qdrant = QdrantMemoryStore(path=folder, collection="bench", embedder=embedder)
        try:
            yield qdrant
        finally:
            qdrant.close()
            shutil.rmtree(folder, ignore_errors=True)
        return
    if name == "sqlite" and keep:
        from ditto_plugin_sqlite import SqliteMemoryStore

        existed = Path(keep).exists()
        with SqliteMemoryStore(keep, embedder=embedder, **declared) as kept:
            kept.count_existing = existed  # type: ignore[attr-defined]
            yield kept
        return
    if name == "sqlite":
        from ditto_plugin_sqlite import SqliteMemoryStore

        folder = tempfile.mkdtemp(prefix="ditto-bench-")
        store = SqliteMemoryStore(Path(folder) / "bench.sqlite", embedder=embedder, **declared)
        try:
            yield store
        finally:
            store.close()
            shutil.rmtree(folder, ignore_errors=True)
        return
    if name == "mysql":
        with _mysql_store(embedder, declared) as mysql:
            yield mysql
        return
    import psycopg

    from ditto_plugin_postgres import PostgresMemoryStore

    url = scale_index.postgres_url()
    schema = keep or f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema])
        existed = found.fetchone() is not None
    pg = PostgresMemoryStore(url, schema=schema, embedder=embedder, **declared)
    pg.count_existing = existed  # type: ignore[attr-defined]
    try:
        yield pg
    finally:
        pg.close()
        if not keep:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def _mysql_store(embedder: Any = None, declared: Any = None) -> Iterator[Any]:
    """A MySQL store in a database of its own (``DITTO_WORKER_MEMORY_MYSQL_URL`` or
    ``DITTO_TEST_MYSQL_URL``: ``bash scripts/mysql.sh start``), dropped at the end."""
    import pymysql

    from ditto_plugin_mysql import MysqlMemoryStore
    from ditto_plugin_mysql.db import parse_url

    url = os.environ.get("DITTO_WORKER_MEMORY_MYSQL_URL") or os.environ.get("DITTO_TEST_MYSQL_URL")
    if not url:
        raise SystemExit("mysql: set DITTO_WORKER_MEMORY_MYSQL_URL (scripts/mysql.sh)")
    database = f"bench_{uuid.uuid4().hex[:12]}"
    store = MysqlMemoryStore(url, database=database, embedder=embedder, **(declared or {}))
    try:
        yield store
    finally:
        store.close()
        address = parse_url(url)
        conn = pymysql.connect(host=address.host, port=address.port, user=address.user,
                               password=address.password, autocommit=True)  # fmt: skip
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        conn.close()


def run(
    name: str, args: argparse.Namespace, words: list[str], inputs: Any, tenants: int = 0,
    query_fields: Sequence[str] = (),
) -> dict[int, dict[str, Any]]:  # fmt: skip
    """Load and measure one store (as tenant ``t0`` of ``tenants``) at each of
    ``args.sizes`` in turn: one store grown from one size to the next (the drafts are one
    seeded sequence, so the first 10,000 of a 100,000 load are the 10,000 of a 10,000 load);
    a size above the store's ``--cap`` is not loaded; ``query_fields``: its ``queryFields``.
    Returns the figures per size."""
    spread = f" over {tenants} tenants" if tenants else ""
    spread += f", queryFields {list(query_fields)}" if query_fields else ""
    cap = args.caps.get(name)
    sizes = [size for size in args.sizes if cap is None or size <= cap]
    figures: dict[int, dict[str, Any]] = {}
    keep = {"sqlite": args.sqlite_file, "postgres": args.pg_schema}.get(name)
    opening = time.perf_counter()
    with open_store(name, embedder_of(args.embedder), query_fields, keep) as store:
        memory = Scoped(create_memory(store), tenant(0, tenants))
        memory.query({"limit": 1})  # opened: migrations, declared indexes built or dropped
        args.open_s = time.perf_counter() - opening
        source, done = drafts(max(sizes, default=0), args.seed, words), 0
        if getattr(store, "count_existing", False):  # --sqlite-file/--pg-schema kept before
            sizes = sizes[-1:]
            done = sizes[0] if args.start is None else args.start  # no --from: all of them
            print(f"== {name}: {keep} holds the first {done:,} drafts")
            source = itertools.islice(source, done, None)
        for size in sizes:
            print(f"== {name}: writing to {size:,} memories{spread} in batches of {args.batch:,}")
            figures[size] = grow(name, store, memory, args, inputs, source, (size, done, tenants))
            done = size
    for size in args.sizes:
        if size not in figures:
            print(f"== {name}: CAPPED at {cap:,} memories (--cap): not measured at {size:,}")
    return figures


def grow(
    name: str, store: Any, memory: Scoped, args: argparse.Namespace, inputs: Any,
    source: Iterator[dict[str, Any]], sizes: tuple[int, int, int],
) -> dict[str, Any]:  # fmt: skip
    """Grow the store from ``done`` to ``size`` memories (``sizes = (size, done, tenants)``)
    with the next drafts of ``source`` (PostgreSQL with ``--index-after-load``: without the
    HNSW index, built after), then measure; the figures of this size."""
    size, done, tenants = sizes
    started = time.perf_counter()
    deferred = name == "postgres" and args.index_after_load and args.embedder != "none"
    if deferred and size > done:
        scale_index.drop_hnsw(memory, store.schema)
    rate = load(memory, source, size - done, args.batch, tenants, done)
    loaded = time.perf_counter() - started
    print(f"  WRITE {rate:,.0f} memories/s ({loaded:.1f} s)", flush=True)
    if args.load_only:
        return {"rate": rate, "load_s": loaded, "rows": {}, "total_s": loaded, "after": {}}
    deferred = deferred and not scale_index.has_hnsw(store.schema)
    after = scale_index.build_hnsw(store.schema, args.maintenance_work_mem) if deferred else {}
    after["open s"] = args.open_s  # the store's open and first call (``run``)
    after["size MB"] = scale_index.size_on_disk(name, store) / 2**20
    rows = measure(memory, inputs, getattr(store, "capabilities", None), args.budget_s)
    after["peak RSS MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    total = time.perf_counter() - started
    return {"rate": rate, "load_s": loaded, "rows": rows, "total_s": total, "after": after}


class CachedEmbedder:
    """An embedding provider that embeds each distinct text once (same identity)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.cache = inner, {}

    @property
    def identity(self) -> Any:
        return self.inner.identity

    def embed(self, texts: Any) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if missing:
            self.cache.update(zip(missing, self.inner.embed(missing), strict=True))
        return [self.cache[t] for t in texts]


def pipeline_bench(args: argparse.Namespace) -> int:
    """The ``--pipeline`` measurement (module docstring)."""
    from ditto_worker.cli.demo import load_conversation
    from ditto_worker.cli.eval import CONVERSATION_PIPELINE, turn_drafts
    from ditto_worker.retrieval import create_retrieval_memory_search_provider
    from ditto_worker.retrieval.embed import LocalEmbeddingProvider

    embedder = CachedEmbedder(LocalEmbeddingProvider())
    main_conv = load_conversation(REPO / "data" / "locomo" / args.conversation)
    others = [load_conversation(p) for p in sorted((REPO / "data" / "locomo").glob("*.json"))]
    questions = [q.question for q in main_conv.questions if q.evidence][: args.questions]
    counts = [int(c) for c in args.tenants.split(",")]
    results: dict[str, dict[str, tuple[float, float, float]]] = {}
    for name in args.stores.split(","):
        for count in counts:
            label = f"{name}/{'own' if count == 0 else f'{count}t'}"
            print(f"== {label}: loading", flush=True)
            with open_store(name, embedder) as store:
                search = create_retrieval_memory_search_provider(
                    store, embedder, CONVERSATION_PIPELINE
                )
                memory = create_memory(store, search)
                scope = Scope("bench", "t0") if count else None
                _write(memory, turn_drafts(main_conv), scope)
                for index in range(1, count):
                    other = others[index % len(others)]
                    _write(memory, turn_drafts(other), Scope("bench", f"t{index}"))
                rows: dict[str, tuple[float, float, float]] = {}
                call = Scoped(memory, scope).search
                plans = {
                    strategy: [{"query": q, "strategy": strategy, "limit": 10} for q in questions]
                    for strategy in ("keyword", "vector", "hybrid")
                }
                for inputs in plans.values():  # warm-up: every query text embedded once
                    timed(call, inputs)
                for strategy, inputs in plans.items():
                    rows[strategy] = (*percentiles(timed(call, inputs)), os.getloadavg()[0])
                results[label] = rows
    labels = list(results)
    print(f"\npipeline over {args.conversation} ({len(questions)} questions); p50 / p95 ms, "
          "ratio = p50 / the same store's own p50")  # fmt: skip
    print(f"{'':<10}" + "".join(f"{label:>28}" for label in labels))
    for strategy in ("keyword", "vector", "hybrid"):
        cells = ""
        for label in labels:
            own = results[label.split("/")[0] + "/own"][strategy][0] if "/" in label else 0
            p50, p95, load = results[label][strategy]
            ratio = p50 / own if own else 0.0
            cells += f"{p50:>9.2f} / {p95:>7.2f} ({ratio:4.2f}x) @{load:4.1f}"
        print(f"{strategy:<10}{cells}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="memories per store")
    parser.add_argument(
        "--sizes", type=lambda text: [int(x) for x in text.split(",")], default=None,
        help="collection sizes measured in one run, e.g. 10000,100000 (each store grows "
        "from one to the next); default --n",
    )  # fmt: skip
    parser.add_argument(
        "--cap", default="",
        help="largest size per store, e.g. milvus=10000: larger sizes are not loaded for "
        "it and the output says so",
    )  # fmt: skip
    parser.add_argument(
        "--budget-s", type=float, default=0.0,
        help="seconds per query kind and size (at least 3 calls; 0: every --queries call)",
    )  # fmt: skip
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--from-json", help="print/plot a saved --json file; measure nothing")
    parser.add_argument("--plot", help="PNG: p50 vs collection size per store (matplotlib)")
    parser.add_argument("--million", action="store_true", help="1,000,000 memories")
    parser.add_argument("--batch", type=int, default=1000, help="memories per WRITE")
    parser.add_argument("--queries", type=int, default=200, help="calls per query kind")
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--embedder",
        choices=("none", "synthetic", "hashing", "local"),
        help="embed on WRITE and measure vector/hybrid SEARCH (synthetic, hashing: 384 dims, "
        "no model); default none (--million: synthetic)",
    )
    parser.add_argument("--vector-queries", type=int, help="vector/hybrid calls (--queries)")
    parser.add_argument(
        "--index-after-load",
        action="store_true",
        help="postgres: build the HNSW index after the load (implied by --million)",
    )
    parser.add_argument(
        "--maintenance-work-mem",
        default="3GB",
        help="postgres: maintenance_work_mem of the index-building session",
    )
    parser.add_argument(
        "--sqlite-file", help="sqlite: use and keep this file; an existing one is not reloaded"
    )
    parser.add_argument(
        "--pg-schema", help="postgres: use and keep this schema; an existing one is not reloaded"
    )
    parser.add_argument(
        "--from",
        dest="start",
        type=int,
        help="with a kept store that exists: it holds the first N drafts; write N..--n "
        "(default: it holds all --n)",
    )
    parser.add_argument("--load-only", action="store_true", help="write, then stop")  # fmt: skip
    parser.add_argument(
        "--tenants", default="0", help="comma-separated tenant counts; 0 = unscoped, e.g. 0,100"
    )
    parser.add_argument(
        "--query-fields", default="",
        help="comma-separated queryFields (e.g. user,kind,n,score): each SQL store is also "
        "run with them declared (label +qf), beside the same store without",
    )  # fmt: skip
    parser.add_argument("--pipeline", action="store_true", help="the retrieval pipeline bench")
    parser.add_argument("--conversation", default="30.json", help="--pipeline: data/locomo file")
    parser.add_argument("--questions", type=int, default=40, help="--pipeline: questions")
    args = parser.parse_args(argv)
    if args.pipeline:
        return pipeline_bench(args)
    if args.from_json:
        report = scale_report.load_report(args.from_json)
    else:
        report = measure_stores(args)
    scale_report.print_report(report)
    if args.json:
        scale_report.save_report(report, args.json)
    if args.plot:
        scale_report.plot_report(report, args.plot)
        print(f"plot: {args.plot}")
    return 0


def measure_stores(args: argparse.Namespace) -> dict[str, Any]:
    """Run every store of ``--stores`` (and tenant count of ``--tenants``) at every size
    of ``--sizes``; the report :mod:`scale_report` prints, saves and plots."""
    if args.million:
        args.sizes, args.index_after_load = [1_000_000], True
        args.embedder = args.embedder or "synthetic"
    elif args.sizes is None:
        args.sizes = [args.n]
    args.sizes = sorted(set(args.sizes))
    args.caps = scale_report.parse_caps(args.cap)
    args.embedder = args.embedder or "none"
    words = vocabulary()
    inputs = query_inputs(args.queries, args.seed, words)
    for strategy in ("vector", "hybrid"):
        inputs[strategy] = inputs[strategy][: args.vector_queries or args.queries]
    label = {"qdrant": "qdrant-local", "milvus": "milvus-lite"}
    load_before = os.getloadavg()
    declared = tuple(f for f in args.query_fields.split(",") if f)
    variants = [()] + ([declared] if declared else [])
    stores = {
        label.get(name, name) + (f"/{count}t" if count else "") + ("+qf" if fields else ""): run(
            name, args, words, inputs, count, fields
        )
        for name in args.stores.split(",")
        for count in (int(c) for c in args.tenants.split(","))
        for fields in (variants if name in ("sqlite", "postgres", "mysql") else [()])
    }
    return {
        "command": "python bench/store_scale.py " + " ".join(sys.argv[1:]),
        "sizes": args.sizes,
        "queries": args.queries,
        "vector_queries": args.vector_queries or args.queries,
        "budget_s": args.budget_s,
        "embedder": args.embedder,
        "caps": {label.get(k, k): v for k, v in args.caps.items()},
        "load_average": {"start": list(load_before), "end": list(os.getloadavg())},
        "stores": stores,
    }


if __name__ == "__main__":
    sys.exit(main())
