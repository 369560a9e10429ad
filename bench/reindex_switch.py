"""``ditto-worker reindex`` on SQLite: how long writers wait while it runs, in one run.

MEM-RET-4, :mod:`ditto_plugin_sqlite.reembed`. ``--n`` memories (default 100,000) are
written with the 64-dim ``HashingEmbedder`` (seed 0), then re-embedded with the 384-dim
one (seed 7) by ``SqliteMemoryStore.reembed_embeddings`` while a second thread writes
one memory at a time through another store object (the old identity, as a worker that
has not been restarted yet) and times each write. Printed: the reindex's wall time,
the longest write the writer saw while the reindex ran (the switch holds SQLite's write
lock: a write waits for it, up to the 5 s busy timeout, then fails), how many writes
failed, and the load average. The texts are ``store_scale``'s synthetic ones.

    python bench/reindex_switch.py               # 100k
    python bench/reindex_switch.py --n 20000
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from ditto_plugin_sqlite import SqliteMemoryStore
from ditto_worker.contracts import MemoryWriteInput
from ditto_worker.errors import MemoryError
from ditto_worker.testing import HashingEmbedder


def _fill(path: Path, n: int) -> None:
    words = [f"w{i}" for i in range(5000)]
    with SqliteMemoryStore(path, embedder=HashingEmbedder(dims=64, seed=0)) as store:
        for start in range(0, n, 1000):
            drafts = [
                {"content": " ".join(words[(i * k) % len(words)] for k in (1, 7, 31, 97))}
                for i in range(start, min(n, start + 1000))
            ]
            store.write(MemoryWriteInput.model_validate({"memories": drafts}))


def _writer(path: Path, stop: threading.Event, waits: list[float], failed: list[str]) -> None:
    with SqliteMemoryStore(path, embedder=HashingEmbedder(dims=64, seed=0)) as store:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                store.write(MemoryWriteInput.model_validate({"memories": [{"content": "x y"}]}))
            except MemoryError as exc:  # EMBEDDING_MISMATCH after the switch; else a wait
                failed.append(str(exc.code))  # past the busy timeout
            waits.append(time.perf_counter() - started)
            time.sleep(0.005)


def main() -> None:
    """Run the bench (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.sqlite"
        started = time.perf_counter()
        _fill(path, args.n)
        print(f"filled {args.n} memories in {time.perf_counter() - started:.1f} s")
        stop, waits, failed = threading.Event(), [], []  # type: ignore[var-annotated]
        writer = threading.Thread(target=_writer, args=(path, stop, waits, failed))
        writer.start()
        time.sleep(0.5)
        started = time.perf_counter()
        with SqliteMemoryStore(path, embedder=HashingEmbedder(dims=384, seed=7)) as new:
            done = new.reembed_embeddings(batch_size=512)
        took = time.perf_counter() - started
        stop.set()
        writer.join()
    print(f"reindex: {done} memories embedded in {took:.1f} s")
    codes = {code: failed.count(code) for code in sorted(set(failed))}
    print(f"writer: {len(waits)} writes timed, longest {max(waits) * 1000:.0f} ms; "
          f"failed: {codes or 'none'}")  # fmt: skip
    print("(EMBEDDING_MISMATCH after the switch is expected: the writer keeps the old model)")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
