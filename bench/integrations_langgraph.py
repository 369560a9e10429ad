"""LangGraph rows of ``bench/integrations.py`` (issue 33 "Figures"): ``put`` / ``get`` /
``search`` through our ``DittoStore`` beside the same calls on our SDK directly and on
LangGraph's own ``SqliteStore``.

Sides, each over a fresh SQLite file with the same ``--n`` (10,000) items loaded first,
the same embedding function (precomputed vectors looked up per text: embedding cost
excluded) and the same queries:

* **sdk**: ``create_memory(SqliteMemoryStore(...))`` — put = WRITE of one record (a new
  key), get = GET of one key, search = vector SEARCH top 10;
* **invoke**: the same node calls as the sdk side through ``Runtime.invoke`` of an
  embedded runtime (``create_ditto``): the path DittoStore takes, without the adapter;
* **DittoStore**: our ``BaseStore`` over ``create_ditto([create_memory_worker(store)])``
  (embedded runtime), ``index={"dims", "embed", "fields": ["text"]}`` — ``put`` of a new
  key (a GET of the key and its namespace marker, then a WRITE), ``get``, ``search(query=…,
  limit=10)``;
* **SqliteStore**: LangGraph's (langgraph-checkpoint-sqlite 3.1.2) on a connection of
  ``ditto_plugin_sqlite.driver`` (pysqlite3, the SQLite build ours uses, as
  ``bench/peers.py`` does), the same index.

Calls alternate by rounds (``--rounds``, each round every side in rotating order,
``--calls`` calls per operation): p50 and p99 per side and operation, each p50 over the
sdk's and over invoke's (DittoStore over invoke is the adapter's own cost; the issue's
target is <= 10 % or <= 15 µs over our SDK, whichever is larger).

    pip install langgraph-checkpoint-sqlite==3.1.2   # the peer (not a dependency of ours)
    python bench/integrations.py langgraph           # 10k items, 5 rounds of 100 calls
"""

from __future__ import annotations

import hashlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

DIMS = 64
NS = ("bench", "lg")
SCOPE = {"tenant": "bench", "user": "lg"}
WORDS = ("tea coffee garden trip music paper river cat dog book city rain sun "
         "friend work game film bread lamp chair").split()  # fmt: skip


def text_of(i: int) -> str:
    """The text of item ``i`` (a few words, deterministic)."""
    return " ".join(WORDS[(i * k + k) % len(WORDS)] for k in (1, 3, 7, 11))


def vector_of(text: str) -> list[float]:
    """A unit vector of ``DIMS`` from the text's hash (the shared embedding function)."""
    raw = hashlib.sha256(text.encode()).digest() * (DIMS // 32 + 1)
    values = [b - 127.5 for b in raw[:DIMS]]
    norm = sum(v * v for v in values) ** 0.5
    return [v / norm for v in values]


class Table:
    """The embedding function every side gets: precomputed vectors by text."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.vectors = {t: vector_of(t) for t in texts}

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.vectors[t] for t in texts]


class Side:
    """One side: ``put(i)``, ``get(i)``, ``search(query)``."""

    def __init__(self, name: str, put: Callable[[int], Any], get: Callable[[int], Any],
                 search: Callable[[str], Any]) -> None:  # fmt: skip
        self.name, self.put, self.get, self.search = name, put, get, search


@contextmanager
def sides(folder: Path, table: Table) -> Iterator[list[Side]]:
    """The three sides, each on its own file."""
    from langgraph.store.sqlite import SqliteStore

    from ditto_plugin_sqlite import SqliteMemoryStore, driver
    from ditto_worker import create_ditto, create_memory, create_memory_worker
    from ditto_worker.config import load_runtime_config
    from ditto_worker.integrations.langgraph import DittoStore, embedding_provider

    index: Any = {"dims": DIMS, "embed": table, "fields": ["text"], "text_fields": ["text"]}
    with ExitStack() as stack:
        sdk_store = SqliteMemoryStore(folder / "sdk.sqlite", embedder=embedding_provider(index))
        stack.callback(sdk_store.close)
        memory = create_memory(sdk_store)
        lg_store = SqliteMemoryStore(folder / "lg.sqlite", embedder=embedding_provider(index))
        stack.callback(lg_store.close)
        runtime = stack.enter_context(
            create_ditto([create_memory_worker(lg_store)], load_runtime_config(None, env={}))
        )
        ours = DittoStore(runtime, scope=SCOPE, index=index)
        conn = driver.connect(folder / "peer.sqlite", check_same_thread=False,
                              isolation_level=None)  # fmt: skip
        stack.callback(conn.close)
        peer = SqliteStore(conn, index=index)
        peer.setup()

        def sdk_put(i: int) -> None:
            draft = {"key": f"k{i}", "content": text_of(i), "metadata": {"n": i}}
            assert memory.write({"memories": [draft]}).status == "success"

        def sdk_search(query: str) -> Any:
            return memory.search({"query": query, "strategy": "vector", "limit": 10}).output

        inv_store = SqliteMemoryStore(folder / "inv.sqlite", embedder=embedding_provider(index))
        stack.callback(inv_store.close)
        inv = stack.enter_context(
            create_ditto([create_memory_worker(inv_store)], load_runtime_config(None, env={}))
        )

        def invoke(node: str, call: dict[str, Any]) -> Any:
            result = inv.invoke(node, call, scope=SCOPE)
            assert result.status == "success", result.error
            return result.output

        def inv_put(i: int) -> None:
            draft = {"key": f"k{i}", "content": text_of(i), "metadata": {"n": i}}
            invoke("MEMORY.WRITE", {"memories": [draft]})

        yield [
            Side("sdk", sdk_put, lambda i: memory.get({"keys": [f"k{i}"]}).output, sdk_search),
            Side("invoke", inv_put, lambda i: invoke("MEMORY.GET", {"keys": [f"k{i}"]}),
                 lambda q: invoke("MEMORY.SEARCH", {"query": q, "strategy": "vector",
                                                    "limit": 10})),
            Side("DittoStore", lambda i: ours.put(NS, f"k{i}", {"text": text_of(i), "n": i}),
                 lambda i: ours.get(NS, f"k{i}"),
                 lambda q: ours.search(NS, query=q, limit=10)),
            Side("SqliteStore", lambda i: peer.put(NS, f"k{i}", {"text": text_of(i), "n": i}),
                 lambda i: peer.get(NS, f"k{i}"),
                 lambda q: peer.search(NS, query=q, limit=10)),
        ]  # fmt: skip


def _timed(fn: Callable[[], Any], out: list[float]) -> None:
    start = time.perf_counter()
    fn()
    out.append((time.perf_counter() - start) * 1e6)


def measure(n: int, rounds: int, calls: int) -> dict[tuple[str, str], list[float]]:
    """Microseconds per call, per (side, operation)."""
    total = n + rounds * calls
    table = Table([text_of(i) for i in range(total)] + [f"query {q}" for q in range(calls)])
    folder = Path(tempfile.mkdtemp(prefix="ditto-bench-lg-"))
    times: dict[tuple[str, str], list[float]] = {}
    try:
        with sides(folder, table) as all_sides:
            for side in all_sides:
                for i in range(n):
                    side.put(i)
            for r in range(rounds):
                order = all_sides[r % len(all_sides) :] + all_sides[: r % len(all_sides)]
                for side in order:
                    for c in range(calls):
                        i = n + r * calls + c
                        ops = {"put": partial(side.put, i),
                               "get": partial(side.get, (i * 7919) % n),
                               "search": partial(side.search, f"query {c}")}  # fmt: skip
                        for op, call in ops.items():
                            _timed(call, times.setdefault((side.name, op), []))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return times


def langgraph_rows(n: int, rounds: int, calls: int) -> list[tuple[str, str, float, float]]:
    """``(operation, side, p50 µs, p99 µs)`` rows."""
    times = measure(n, rounds, calls)
    rows = []
    for (side, op), values in sorted(times.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        ordered = sorted(values)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        rows.append((op, side, statistics.median(values), p99))
    return rows


def print_langgraph(rows: list[tuple[str, str, float, float]]) -> None:
    """The table: each p50 over the sdk's and over invoke's, per operation."""
    p50 = {(op, side): v for op, side, v, _ in rows}
    print(f"{'op':<7} {'side':<12} {'p50 µs':>9} {'p99 µs':>9} {'/ sdk':>7} {'/ invoke':>9}")
    for op, side, median, p99 in rows:
        sdk, inv = p50[(op, "sdk")], p50[(op, "invoke")]
        print(f"{op:<7} {side:<12} {median:>9.0f} {p99:>9.0f} {median / sdk:>7.2f} "
              f"{median / inv:>9.2f}")  # fmt: skip
