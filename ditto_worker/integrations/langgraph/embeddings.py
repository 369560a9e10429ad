"""LangGraph's ``IndexConfig.embed`` as our ``EmbeddingProvider``, so the store under a
:class:`~ditto_worker.integrations.langgraph.DittoStore` embeds records and queries with
the very function a LangGraph store would (source: ``langgraph.store.base.embed``)."""

from __future__ import annotations

from collections.abc import Sequence

from langgraph.store.base import IndexConfig
from langgraph.store.base.embed import ensure_embeddings

from ditto_worker.memory.ports import EmbeddingIdentity, l2_normalize

__all__ = ["LangGraphEmbeddings", "embedding_provider"]


class LangGraphEmbeddings:
    """An ``EmbeddingProvider`` over LangGraph's ``embed`` (an ``Embeddings``, a function
    of a list of texts, or a ``"provider:model"`` string).

    Args:
        index: LangGraph's ``IndexConfig`` (``dims`` and ``embed`` are used).
        model: the name in the identity (default: the class or function name); another
            name is another vector space to a store (MEM-RET-4).

    Vectors are L2-normalised (cosine similarity unchanged: the scores LangGraph's own
    stores report).
    """

    def __init__(self, index: IndexConfig, model: str | None = None) -> None:
        embed = index["embed"]
        self._embeddings = ensure_embeddings(embed)
        name = model or (embed if isinstance(embed, str) else getattr(
            embed, "__name__", type(embed).__name__))  # fmt: skip
        self._identity = EmbeddingIdentity("langgraph", str(name), "", int(index["dims"]), "l2")

    @property
    def identity(self) -> EmbeddingIdentity:
        """``langgraph/<name>`` with ``dims`` dims, L2-normalised."""
        return self._identity

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text, in order (``embed_documents``)."""
        vectors = self._embeddings.embed_documents(list(texts))
        return [l2_normalize([float(x) for x in vector]) for vector in vectors]


def embedding_provider(index: IndexConfig, model: str | None = None) -> LangGraphEmbeddings:
    """The provider a store under a ``DittoStore(index=index)`` is built with."""
    return LangGraphEmbeddings(index, model)
