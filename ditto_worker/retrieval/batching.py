"""Micro-batching: concurrent ``embed`` calls coalesced into one model batch.

A retrieval worker with a threads pool answers several RETRIEVAL.SEARCH calls at once;
each needs its query embedded. Encoding them one by one wastes the model's batch
parallelism, so :class:`MicroBatchingEmbedder` queues the calls, and one background
thread runs them together: it takes the first waiting call, then keeps collecting calls
for at most ``max_wait_ms`` or until ``max_batch_size`` texts are gathered, and makes one
``provider.embed`` call for all of them. Each caller gets its own slice back, or the
batch's error.

A call never waits more than ``max_wait_ms`` for company: a lone caller pays at most that
much extra latency (default 2 ms).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from ditto_worker.errors import MemoryError
from ditto_worker.retrieval.embed import (
    EMBEDDING_MISMATCH,
    EMBEDDING_UNAVAILABLE,
    EmbeddingIdentity,
    EmbeddingProvider,
)

__all__ = ["BatchStats", "MicroBatchingEmbedder"]

_STOP: Final = None


@dataclass
class _Request:
    texts: Sequence[str]
    done: threading.Event = field(default_factory=threading.Event)
    vectors: list[list[float]] | None = None
    error: BaseException | None = None


@dataclass
class BatchStats:
    """Counters since creation: ``calls`` embed calls answered in ``batches`` model
    batches holding ``texts`` texts; ``largest`` is the most texts in one batch;
    ``embed_s`` the seconds spent in the wrapped provider's ``embed`` (wall time of the
    batches, answered ones only), so ``calls / batches`` says how well concurrent callers
    coalesced and ``embed_s`` how much of their time the model took."""

    calls: int = 0
    batches: int = 0
    texts: int = 0
    largest: int = 0
    embed_s: float = 0.0


class MicroBatchingEmbedder:
    """An :class:`EmbeddingProvider` that batches concurrent callers into one model call.

    Args:
        provider: the provider doing the work; its identity is this one's.
        max_batch_size: most texts in one batch (a single larger call runs alone).
        max_wait_ms: how long the batch stays open for more callers after the first one
            arrives, milliseconds.

    Thread-safe; the background thread starts on first use (also after a fork) and is a
    daemon. :meth:`close` stops it; later calls fail with ``EMBEDDING_UNAVAILABLE``.
    """

    def __init__(
        self, provider: EmbeddingProvider, *, max_batch_size: int = 64, max_wait_ms: float = 2.0
    ) -> None:
        if max_batch_size < 1 or max_wait_ms < 0:
            raise ValueError("max_batch_size must be >= 1 and max_wait_ms >= 0")
        self.provider = provider
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_ms / 1000
        self.stats = BatchStats()
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._closed = False

    @property
    def identity(self) -> EmbeddingIdentity:
        """The wrapped provider's identity."""
        return self.provider.identity

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts`` within the next batch (see ``EmbeddingProvider.embed``).

        Raises:
            MemoryError: the wrapped provider's error for the whole batch, or
                ``EMBEDDING_UNAVAILABLE`` after :meth:`close`.
        """
        if not texts:
            return []
        request = _Request(list(texts))
        self._ensure_thread()
        self._queue.put(request)
        request.done.wait()
        if request.error is not None:
            raise request.error
        if request.vectors is None:  # not reachable: vectors and done are set together
            raise MemoryError(EMBEDDING_UNAVAILABLE, "the embedding batch gave no answer")
        return request.vectors

    def close(self) -> None:
        """Stop the background thread after the calls already queued; idempotent."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(_STOP)
            thread.join(timeout=5)

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._closed:
                raise MemoryError(EMBEDDING_UNAVAILABLE, "the embedding batcher is closed")
            if os.getpid() != self._pid:  # forked: the parent's thread does not exist here
                self._pid, self._queue, self._thread = os.getpid(), queue.Queue(), None
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="ditto-embed-batcher", daemon=True
                )
                self._thread.start()

    def _collect(self, first: _Request) -> tuple[list[_Request], bool]:
        """The batch opened by ``first``; True when a stop request was seen."""
        batch, size = [first], len(first.texts)
        deadline = time.monotonic() + self.max_wait_s
        while size < self.max_batch_size:
            remaining = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=remaining) if remaining > 0 else self._get_now()
            except queue.Empty:
                break
            if item is None:
                return batch, True
            batch.append(item)
            size += len(item.texts)
        return batch, False

    def _get_now(self) -> _Request | None:
        return self._queue.get_nowait()

    def _run(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = self._collect(first)
            self._answer(batch)

    def _answer(self, batch: list[_Request]) -> None:
        texts = [text for request in batch for text in request.texts]
        start = time.perf_counter()
        try:
            vectors = self.provider.embed(texts)
            if len(vectors) != len(texts):
                raise MemoryError(EMBEDDING_MISMATCH, "the provider returned a wrong count")
        except BaseException as exc:  # handed to every caller of the batch, re-raised there
            for request in batch:
                request.error = exc
                request.done.set()
            return
        stats = self.stats
        stats.embed_s += time.perf_counter() - start
        stats.calls, stats.batches = stats.calls + len(batch), stats.batches + 1
        stats.texts, stats.largest = stats.texts + len(texts), max(stats.largest, len(texts))
        start = 0
        for request in batch:
            request.vectors = vectors[start : start + len(request.texts)]
            start += len(request.texts)
            request.done.set()
