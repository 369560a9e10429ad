"""``list_namespaces`` of the LangGraph ``DittoStore`` at scale (issue 33 item 1: p50 <= 10 ms
at 100k items in 1k namespaces, on SQLite and PostgreSQL).

The store is filled through MEMORY.WRITE in batches of 1,000 with the adapter's own record
layout (``ditto_worker.integrations.langgraph.records``: ``--items`` items spread over
``--namespaces`` namespaces ``("users", "u<i>", "memories")``, and one marker per
namespace), then ``DittoStore.list_namespaces`` is called ``--calls`` times per shape,
the shapes in alternating rounds: every namespace (limit 100), a prefix
``("users", "u7")``, a suffix ``("memories",)`` with ``max_depth=2``, a page at offset
900, ``limit=10``, and ``max_depth=1`` (all 1,000 namespaces cut to one). One caller,
embedded runtime. Prints p50 / p95 / p99 (ms) per shape and store.

    python bench/langgraph_namespaces.py                       # SQLite, 100k / 1k
    python bench/langgraph_namespaces.py --store postgres      # DITTO_TEST_POSTGRES_URL
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ditto_worker import create_ditto, create_memory_worker
from ditto_worker.config import load_runtime_config
from ditto_worker.integrations.langgraph import DittoStore
from ditto_worker.integrations.langgraph import records as rec

SCOPE = {"tenant": "bench", "user": "lg"}


def _store(kind: str, folder: Path) -> Any:
    if kind == "postgres":
        from ditto_plugin_postgres import PostgresMemoryStore

        schema = f"lgns_{uuid.uuid4().hex[:8]}"
        return PostgresMemoryStore(os.environ["DITTO_TEST_POSTGRES_URL"], schema=schema)
    from ditto_plugin_sqlite import SqliteMemoryStore

    return SqliteMemoryStore(folder / "memory.sqlite")


def fill(runtime: Any, items: int, namespaces: int) -> None:
    """``items`` items over ``namespaces`` namespaces, plus their markers."""
    drafts: list[dict[str, Any]] = []
    for n in range(namespaces):
        ns = ("users", f"u{n}", "memories")
        drafts.append({"key": rec.namespace_key(ns), "content": None,
                       "metadata": rec.namespace_metadata(ns)})  # fmt: skip
    for i in range(items):
        ns = ("users", f"u{i % namespaces}", "memories")
        value = {"text": f"memory {i}", "n": i}
        drafts.append({"key": rec.item_key(ns, f"k{i}"), "content": None,
                       "metadata": rec.item_metadata(ns, f"k{i}", value, 0)})  # fmt: skip
    for start in range(0, len(drafts), 1000):
        result = runtime.invoke("MEMORY.WRITE", {"memories": drafts[start : start + 1000]},
                                scope=SCOPE)  # fmt: skip
        assert result.status == "success", result.error


def measure(store: DittoStore, calls: int, rounds: int) -> dict[str, list[float]]:
    """Milliseconds per call, per shape, shapes alternating round by round."""
    shapes: dict[str, Callable[[], list[tuple[str, ...]]]] = {
        "all (limit 100)": lambda: store.list_namespaces(),
        "prefix users/u7": lambda: store.list_namespaces(prefix=("users", "u7")),
        "suffix, depth 2": lambda: store.list_namespaces(suffix=("memories",), max_depth=2),
        "offset 900": lambda: store.list_namespaces(offset=900, limit=100),
        "limit 10": lambda: store.list_namespaces(limit=10),
        "max_depth 1": lambda: store.list_namespaces(max_depth=1),
    }
    assert len(shapes["all (limit 100)"]()) == 100
    assert shapes["max_depth 1"]() == [("users",)]
    times: dict[str, list[float]] = {name: [] for name in shapes}
    for r in range(rounds):
        order = list(shapes)[r % len(shapes) :] + list(shapes)[: r % len(shapes)]
        for name in order:
            for _ in range(calls):
                start = time.perf_counter()
                shapes[name]()
                times[name].append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--namespaces", type=int, default=1_000)
    parser.add_argument("--calls", type=int, default=50, help="calls per shape per round")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        memory = _store(args.store, Path(tmp))
        config = load_runtime_config(None, env={})
        with create_ditto([create_memory_worker(memory)], config) as runtime:
            started = time.perf_counter()
            fill(runtime, args.items, args.namespaces)
            print(f"filled {args.items} items in {args.namespaces} namespaces "
                  f"({args.store}) in {time.perf_counter() - started:.0f} s")  # fmt: skip
            times = measure(DittoStore(runtime, scope=SCOPE), args.calls, args.rounds)
    print(f"{'list_namespaces':<18} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for name, values in times.items():
        ordered = sorted(values)
        p95, p99 = (ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.95, 0.99))
        print(f"{name:<18} {statistics.median(values):>8.2f} {p95:>8.2f} {p99:>8.2f}")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
