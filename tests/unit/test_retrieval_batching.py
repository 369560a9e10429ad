"""MicroBatchingEmbedder: concurrent embed calls coalesce into few model batches."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from ditto_worker.errors import MemoryError
from ditto_worker.retrieval.batching import MicroBatchingEmbedder
from ditto_worker.retrieval.embed import EmbeddingIdentity
from ditto_worker.testing import HashingEmbedder


class SlowEmbedder(HashingEmbedder):
    """A hashing embedder whose every batch costs ``delay_s`` (like a model forward)."""

    def __init__(self, delay_s: float = 0.02, fail: bool = False) -> None:
        super().__init__(dims=16)
        self.delay_s, self.fail = delay_s, fail

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        time.sleep(self.delay_s)
        if self.fail:
            raise MemoryError("EMBEDDING_UNAVAILABLE", "the model is down")
        return super().embed(texts)


def _concurrently(batcher: MicroBatchingEmbedder, texts: list[str]) -> list[list[float]]:
    """Each text embedded by its own thread, all released at once."""
    results: list[list[float]] = [[] for _ in texts]
    start = threading.Barrier(len(texts))

    def call(index: int) -> None:
        start.wait()
        results[index] = batcher.embed([texts[index]])[0]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)  # a bound for a busy machine, not the expected time
    return results


class GatedEmbedder(SlowEmbedder):
    """A slow embedder whose first batch waits at the gate until the test opens it (the
    model busy while the other callers queue: the batch sizes then follow from events,
    not from how fast a busy machine starts 24 threads)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.entered = threading.Event(), threading.Event()
        self.first_size = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not self.entered.is_set():
            self.first_size = len(texts)
            self.entered.set()
            assert self.gate.wait(120)
        return super().embed(texts)


def test_concurrent_calls_share_batches_and_get_their_own_vectors() -> None:
    provider = GatedEmbedder()
    batcher = MicroBatchingEmbedder(provider, max_batch_size=64, max_wait_ms=20)
    texts = [f"memory number {i}" for i in range(24)]

    def open_the_gate_once_all_queued() -> None:
        deadline = time.monotonic() + 120  # a bound for a busy machine
        while time.monotonic() < deadline:
            queued = batcher._queue.qsize()
            if provider.entered.is_set() and provider.first_size + queued == len(texts):
                break
            time.sleep(0.01)
        provider.gate.set()

    opener = threading.Thread(target=open_the_gate_once_all_queued)
    opener.start()
    began = time.perf_counter()
    vectors = _concurrently(batcher, texts)
    span_s = time.perf_counter() - began
    opener.join(120)
    assert vectors == HashingEmbedder(dims=16).embed(texts)  # each caller got its own
    assert batcher.stats.calls == 24 and batcher.stats.texts == 24
    # the first batch, then every caller that queued meanwhile in one: not 24 batches
    assert len(provider.calls) == batcher.stats.batches <= 2
    assert batcher.stats.largest >= 12
    # the model's busy time: at least delay_s per batch, and not the callers' summed waits
    # (24 callers waiting at once sum to far more than the run's wall time; one batch
    # thread's busy time fits inside it, however slow a busy machine makes each batch)
    assert provider.delay_s * batcher.stats.batches <= batcher.stats.embed_s <= span_s
    assert batcher.identity == provider.identity
    batcher.close()


def test_max_batch_size_splits_batches() -> None:
    provider = SlowEmbedder(delay_s=0.0)
    batcher = MicroBatchingEmbedder(provider, max_batch_size=4, max_wait_ms=50)
    _concurrently(batcher, [f"t{i}" for i in range(12)])
    assert all(len(batch) <= 4 for batch in provider.calls)
    assert sum(len(batch) for batch in provider.calls) == 12
    batcher.close()


def test_a_lone_call_waits_at_most_the_window() -> None:
    # a 20 ms window: a lone call that waited for company (forever) or read the window
    # as seconds (20 s) is far past 5 s; a busy machine's scheduling delays are not
    batcher = MicroBatchingEmbedder(SlowEmbedder(delay_s=0.0), max_wait_ms=20)
    batcher.embed(["warm up"])
    start = time.perf_counter()
    assert len(batcher.embed(["alone"])) == 1
    assert time.perf_counter() - start < 5.0
    assert batcher.embed([]) == []
    batcher.close()


def test_errors_reach_every_caller_of_the_batch_and_close_refuses() -> None:
    batcher = MicroBatchingEmbedder(SlowEmbedder(fail=True), max_wait_ms=20)
    errors: list[str] = []

    def call() -> None:
        try:
            batcher.embed(["x"])
        except MemoryError as exc:
            errors.append(exc.code)

    threads = [threading.Thread(target=call) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)  # a bound for a busy machine, not the expected time
    assert errors == ["EMBEDDING_UNAVAILABLE"] * 5
    batcher.close()
    with pytest.raises(MemoryError) as info:
        batcher.embed(["after close"])
    assert info.value.code == "EMBEDDING_UNAVAILABLE"


def test_hashing_embedder_is_deterministic_and_normalized() -> None:
    one, two = HashingEmbedder(dims=32), HashingEmbedder(dims=32)
    a, b, empty = one.embed(["Jon likes coffee", "jon LIKES coffee!", ""])
    assert a == b == two.embed(["Jon likes coffee"])[0]
    assert sum(x * x for x in a) == pytest.approx(1.0) and len(a) == 32
    assert sum(x * x for x in empty) == pytest.approx(1.0)
    assert one.identity == EmbeddingIdentity("testing", "hashing", "seed=0", 32, "l2")
    assert HashingEmbedder(dims=32, seed=1).identity != one.identity
