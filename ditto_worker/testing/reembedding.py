"""Checks of a store's ``reembed_embeddings`` (``ditto-worker reindex``, MEM-RET-4),
shared by the store plugins' tests.

Each check takes ``make(embedder)``: a new store object on the *same* backing data (file,
schema, collection, database) built with that provider; the checks close what they make.
The two identities are :class:`~ditto_worker.testing.HashingEmbedder`'s (64 dims seed 0,
32 dims seed 7): no model download. That a record's stored vector is the new identity's
vector of its current text is read through the store's own ``vector`` search: queried
with exactly that vector, the record comes first with cosine similarity 1.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Final

from ditto_worker.contracts import (
    MemoryDeleteInput,
    MemoryGetInput,
    MemoryItem,
    MemoryQueryInput,
    MemorySearchInput,
    MemoryUpdateInput,
    MemoryWriteInput,
)
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.memory.ports import EmbeddingProvider, MemoryCallOptions
from ditto_worker.testing.embedder import HashingEmbedder

__all__ = [
    "NEW",
    "OLD",
    "Dying",
    "assert_vectors",
    "check_a_killed_reindex_keeps_the_old_identity_and_finishes",
    "check_calls_during_a_reindex_fail_only_with_the_identity",
    "check_cursors_survive_two_reindexes",
    "check_reindex_switches_every_vector_and_the_identity",
    "check_writes_during_a_reindex_are_not_lost",
    "use_old_and_new",
]

OLD: Final = HashingEmbedder(dims=64, seed=0)
NEW: Final = HashingEmbedder(dims=32, seed=7)
TEXTS: Final = [f"note {i} about {'tea' if i % 2 else 'coffee'}" for i in range(7)]
Make = Callable[[EmbeddingProvider], Any]


def use_old_and_new(monkeypatch: Any) -> None:
    """Make the embedder kinds ``old`` and ``new`` build :data:`OLD` and :data:`NEW` (for
    ``ditto-worker reindex --to new`` in a test); other kinds build as usual.

    Args:
        monkeypatch: pytest's ``monkeypatch`` fixture (undone after the test).
    """
    from ditto_worker.runtime import registry

    providers = {"old": OLD, "new": NEW}
    real = registry.build_embedder
    monkeypatch.setattr(
        registry,
        "build_embedder",
        lambda kind, settings=None, environ=None: (
            providers.get(str(kind)) or real(kind, settings, environ)
        ),
    )


class Dying(HashingEmbedder):
    """The new identity, failing after ``batches`` model batches (a killed reindex)."""

    def __init__(self, batches: int) -> None:
        super().__init__(dims=32, seed=7)
        self.left = batches

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.left == 0:
            raise MemoryError(ErrorCode.EMBEDDING_UNAVAILABLE, "killed")
        self.left -= 1
        return super().embed(texts)


class _Meddling(HashingEmbedder):
    """The new identity; at its ``at``-th batch, ``meddle()`` runs (another process
    writing while the reindex runs)."""

    def __init__(self, at: int, meddle: Callable[[], None]) -> None:
        super().__init__(dims=32, seed=7)
        self._at, self._meddle = at, meddle

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self._at -= 1
        if self._at == 0:
            self._meddle()
        return super().embed(texts)


def _fill(store: Any) -> list[str]:
    """Seven text records (keys, metadata, an operation id) and one without text."""
    drafts: list[dict[str, Any]] = [
        {"content": text, "key": f"k{i}", "metadata": {"n": i}} for i, text in enumerate(TEXTS)
    ]
    options = MemoryCallOptions(operation_id="op-fill")
    if not store.capabilities.operation_ids:
        options = MemoryCallOptions()
    batch = MemoryWriteInput.model_validate({"memories": [*drafts, {"content": 5}]})
    return [item.id for item in store.write(batch, options)]


def _write_one(store: Any) -> Any:
    return store.write(MemoryWriteInput.model_validate({"memories": [{"content": "x"}]}))


def _get(store: Any, ids: Sequence[str]) -> dict[str, MemoryItem]:
    return {item.id: item for item in store.get(MemoryGetInput(ids=list(ids)))}


def _search(store: Any, query: Any, strategy: str, limit: int = 10) -> list[tuple[str, float]]:
    hits = store.search(MemorySearchInput(query=query, strategy=strategy, limit=limit))
    return [(hit.memory.id, round(float(hit.score), 5)) for hit in hits]


def _mismatch(call: Callable[[], Any]) -> None:
    try:
        call()
    except MemoryError as exc:
        assert exc.code == ErrorCode.EMBEDDING_MISMATCH, exc.code
    else:
        raise AssertionError("expected EMBEDDING_MISMATCH")


def assert_vectors(store: Any, texts: dict[str, str]) -> None:
    """Every record of ``texts`` (id → current text) holds :data:`NEW`'s vector of its
    text, and no other record has a vector."""
    for record, text in texts.items():
        hits = _search(store, NEW.embed([text])[0], "vector", limit=1)
        assert hits and hits[0][0] == record, (record, hits)
        assert abs(hits[0][1] - 1.0) < 1e-4, (record, hits)
    every = _search(store, NEW.embed(["tea"])[0], "vector", limit=50)
    assert sorted(record for record, _ in every) == sorted(texts)


class _Old:
    """The old-model process of a check: kept open across the reindex, or (``one``:
    one process at a time, Qdrant's local mode) closed before another store opens and
    made again when needed."""

    def __init__(self, make: Make, one: bool) -> None:
        self._make, self._one = make, one
        self._store: Any = make(OLD)

    def __call__(self) -> Any:
        if self._store is None:
            self._store = self._make(OLD)
        return self._store

    def step_aside(self) -> None:
        if self._one:
            self.close()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def check_reindex_switches_every_vector_and_the_identity(make: Make, one: bool = False) -> None:
    """The new identity's vectors replace every vector; records, keyword search, keys,
    metadata and operation ids do not change; afterwards the old identity is refused
    and a second run has nothing to do. ``one``: one open store at a time."""
    old = _Old(make, one)
    try:
        ids = _fill(old())
        before, keyword = _get(old(), ids), _search(old(), "tea", "keyword")
        old.step_aside()
        new = make(NEW)
        try:
            _mismatch(lambda: _search(new, "tea", "vector"))  # not before the switch
            assert new.reembed_embeddings(batch_size=3) == 7  # the number has no text
            assert _get(new, ids) == before
            assert _search(new, "tea", "keyword") == keyword
            assert_vectors(new, dict(zip(ids, TEXTS, strict=False)))
            assert new.reembed_embeddings() == 0
        finally:
            new.close()
        _mismatch(lambda: _search(old(), "tea", "vector"))
        _mismatch(lambda: _write_one(old()))
    finally:
        old.close()


def check_a_killed_reindex_keeps_the_old_identity_and_finishes(
    make: Make, one: bool = False
) -> None:
    """A reindex killed after one model batch leaves the old identity serving the same
    results; the old identity's writes meanwhile are kept; the rerun completes and
    embeds only what the killed run had not staged (or had staged and was changed
    since). ``one``: one open store at a time."""
    old = _Old(make, one)
    try:
        ids = _fill(old())
        served = _search(old(), TEXTS[1], "vector")
        old.step_aside()
        dying = Dying(batches=1)
        with_dying = make(dying)
        try:
            try:
                with_dying.reembed_embeddings(batch_size=2)
            except MemoryError as exc:
                assert exc.code == ErrorCode.EMBEDDING_UNAVAILABLE
            else:
                raise AssertionError("the dying provider did not stop the reindex")
        finally:
            with_dying.close()
        assert _search(old(), TEXTS[1], "vector") == served
        texts = dict(zip(ids, TEXTS, strict=False))
        _change(old(), ids, texts)
        old.step_aside()
        kept = set(dying.texts) & set(texts.values())  # staged, unchanged since
        resumed = HashingEmbedder(dims=32, seed=7)
        new = make(resumed)
        try:
            done = new.reembed_embeddings(batch_size=2)
            assert done == len(texts) - len(kept), (done, kept)
            assert not kept & set(resumed.texts)
            assert_vectors(new, texts)
        finally:
            new.close()
        _mismatch(lambda: _write_one(old()))
    finally:
        old.close()


def _change(store: Any, ids: list[str], texts: dict[str, str]) -> None:
    """Update record 0's content, delete record 2, write one record; ``texts`` follows."""
    update = {"memories": [{"id": ids[0], "content": "rooibos infusion"}]}
    store.update(MemoryUpdateInput.model_validate(update))
    store.delete(MemoryDeleteInput(ids=[ids[2]]))
    late = store.write(MemoryWriteInput.model_validate({"memories": [{"content": "late chai"}]}))
    texts[ids[0]] = "rooibos infusion"
    del texts[ids[2]]
    texts[late[0].id] = "late chai"


def check_writes_during_a_reindex_are_not_lost(make: Make) -> None:
    """Another process of the old identity updates a record already staged and one
    being embedded, deletes one and writes one while the reindex runs (and its vector
    searches keep answering): after the switch every record holds the new identity's
    vector of its current text."""
    old = make(OLD)
    try:
        ids = _fill(old)
        texts = dict(zip(ids, TEXTS, strict=False))
        served = _search(old, TEXTS[4], "vector")

        def meddle() -> None:
            assert _search(old, TEXTS[4], "vector") == served  # the old identity serves
            batch = [{"id": ids[0], "content": "first, changed"},
                     {"id": ids[3], "content": "fourth, changed"}]  # fmt: skip
            old.update(MemoryUpdateInput.model_validate({"memories": batch}))
            texts[ids[0]], texts[ids[3]] = "first, changed", "fourth, changed"
            old.delete(MemoryDeleteInput(ids=[ids[1]]))
            del texts[ids[1]]
            late = {"memories": [{"content": "written mid-run"}]}
            texts[old.write(MemoryWriteInput.model_validate(late))[0].id] = "written mid-run"

        new = make(_Meddling(at=2, meddle=meddle))  # batch 2: records 2 and 3
        try:
            new.reembed_embeddings(batch_size=2)
            assert_vectors(new, texts)
        finally:
            new.close()
    finally:
        old.close()


def check_cursors_survive_two_reindexes(make: Make) -> HashingEmbedder:
    """A QUERY cursor issued under the old identity pages on after a reindex (same records,
    same order), and a second reindex to a third identity serves vector search; returns
    that third identity, so the store's own test can look at what the switches left."""
    old = make(OLD)
    try:
        drafts = [{"content": f"note {i}"} for i in range(5)]
        old.write(MemoryWriteInput.model_validate({"memories": drafts}))
        page = old.query(MemoryQueryInput(limit=2))
    finally:
        old.close()
    assert page.next_cursor is not None
    new = make(NEW)
    try:
        assert new.reembed_embeddings(batch_size=2) == 5
        rest = new.query(MemoryQueryInput(limit=10, cursor=page.next_cursor))
        assert [i.content for i in rest.items] == ["note 2", "note 3", "note 4"]
    finally:
        new.close()
    third = HashingEmbedder(dims=16, seed=3)
    again = make(third)
    try:
        assert again.reembed_embeddings() == 5
        hits = again.search(MemorySearchInput(query="note 3", strategy="vector", limit=1))
        assert hits[0].memory.content == "note 3"
    finally:
        again.close()
    return third


def check_calls_during_a_reindex_fail_only_with_the_identity(make: Make) -> None:
    """Old-model processes write and search (two writers, one searcher, each its own
    store object) in threads throughout a reindex of 600 records: none of their calls
    fails except with ``EMBEDDING_MISMATCH`` once the switch has committed (no lock
    wait past a timeout, no deadlock victim), and the reindex completes."""
    seed = make(OLD)
    try:
        drafts = [{"content": f"note {i} about tea"} for i in range(600)]
        seed.write(MemoryWriteInput.model_validate({"memories": drafts}))
    finally:
        seed.close()
    stop, errors = threading.Event(), []

    def loop(call: Callable[[Any], Any]) -> None:
        store = make(OLD)
        try:
            while not stop.is_set():
                try:
                    call(store)
                except MemoryError as exc:
                    errors.append(str(exc.code))
        finally:
            store.close()

    def write(store: Any) -> Any:
        return store.write(MemoryWriteInput.model_validate({"memories": [{"content": "tea"}]}))

    threads = [threading.Thread(target=loop, args=(fn,))
               for fn in (write, write, lambda store: _search(store, "tea", "vector"))]  # fmt: skip
    for thread in threads:
        thread.start()
    try:
        new = make(NEW)
        try:
            assert new.reembed_embeddings(batch_size=100) >= 600
        finally:
            new.close()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert set(errors) <= {str(ErrorCode.EMBEDDING_MISMATCH)}, errors
