"""The query vectors of a coalesced batch of SEARCH calls, from one embed call (issue 36
item 3).

A fleet batch (:mod:`ditto_worker.fleet.batch`) of vector SEARCHes would embed its queries
one model call each. Before its calls run, :func:`prefetch_queries` embeds all their query
texts in one ``embed`` call and keeps the vectors until the batch has run; each call then
runs as before, and where it embeds its query (:func:`embed_text`) it takes the kept
vector instead of calling the model. Vectors are kept by the embedder's identity (model
and dimensions: :class:`~ditto_worker.memory.ports.EmbeddingIdentity`) and the exact text,
so a call only ever gets the vector its own embedder makes of its own text — computed in
a batch rather than alone (a model may differ in the last float bits between the two).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Final

from ditto_worker.memory.ports import EmbeddingProvider, check_vectors

__all__ = ["embed_text", "prefetch_queries"]

log = logging.getLogger(__name__)

_Key = tuple[str, str]
_VECTORS: Final[dict[_Key, tuple[int, list[float]]]] = {}  # key -> (batches holding it, vector)
_LOCK: Final = threading.Lock()


def embed_text(embedder: EmbeddingProvider, text: str) -> list[list[float]]:
    """``embedder.embed([text])``, or the vector a batch already made of ``text`` with an
    embedder of the same identity (module docstring)."""
    if _VECTORS:
        key = (embedder.identity.to_json(), text)
        with _LOCK:
            kept = _VECTORS.get(key)
        if kept is not None:
            return [kept[1]]
    return embedder.embed([text])


def prefetch_queries(embedder: EmbeddingProvider, texts: Sequence[str]) -> Callable[[], None]:
    """Embed ``texts`` (each once) in one call and keep their vectors; returns the release
    to call when the batch's calls ended. Fewer than two distinct texts: nothing is done.
    Never raises: an embed that fails leaves each call to embed (and fail) on its own."""
    wanted = list(dict.fromkeys(t for t in texts if t.strip()))
    if len(wanted) < 2:
        return _nothing
    try:
        identity = embedder.identity
        vectors = embedder.embed(wanted)
        check_vectors(vectors, len(wanted), identity.dims)
    except Exception as exc:
        log.warning("a batch's query embedding failed (%s)", type(exc).__name__)
        return _nothing
    name = identity.to_json()
    keys = [(name, text) for text in wanted]
    with _LOCK:
        for key, vector in zip(keys, vectors, strict=True):
            held = _VECTORS.get(key)
            _VECTORS[key] = (1 if held is None else held[0] + 1, list(vector))

    def release() -> None:
        with _LOCK:
            for key in keys:
                held = _VECTORS.pop(key, None)
                if held is not None and held[0] > 1:
                    _VECTORS[key] = (held[0] - 1, held[1])

    return release


def _nothing() -> None:
    """The release of a batch that kept nothing."""
