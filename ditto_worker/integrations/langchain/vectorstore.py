"""The LangChain ``VectorStore`` over MEMORY nodes (see the package docstring)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from ditto_worker.integrations.langchain.calls import Calls, ScopeArg
from ditto_worker.runtime import Runtime

__all__ = ["DittoVectorStore"]


def _document(item: Mapping[str, Any]) -> Document:
    content = item.get("content")
    text = content if isinstance(content, str) else _dumps(content)
    return Document(
        page_content=text, metadata=dict(item.get("metadata") or {}), id=item.get("key")
    )


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class DittoVectorStore(VectorStore):
    """A LangChain ``VectorStore`` over MEMORY nodes (see the module docstring).

    Args:
        runtime: ``create_ditto(...)`` (embedded, or the fleet when a broker is set).
        scope: the trusted scope of every call (``{"tenant", "user"}`` or a ``Scope``).
        strategy: the SEARCH strategy (``vector`` by default; the store must have an
            embedder for it, ``plugins.sqlite.embedding: local``).
        timeout_s: each call's deadline, seconds; ``None``: ``fleet.callTimeoutS``.
    """

    def __init__(
        self,
        runtime: Runtime,
        scope: ScopeArg,
        *,
        strategy: str = "vector",
        timeout_s: float | None = None,
    ) -> None:
        self._calls = Calls(runtime, scope, timeout_s)
        self.strategy = strategy

    @property
    def embeddings(self) -> Embeddings | None:
        """``None``: the store embeds with its own provider."""
        return None

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings | None = None,
        metadatas: list[dict[Any, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> DittoVectorStore:
        """A store (``runtime=``, ``scope=`` keywords) with ``texts`` added;
        ``embedding`` is ignored (module docstring)."""
        store = cls(**kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[Any, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Add (or replace, by id) texts; returns their ids (keys), in order."""
        docs = _docs(texts, metadatas, ids)
        return self.add_documents(docs)

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Add documents; ``ids=`` or ``Document.id`` name them (else new uuid4 keys);
        an existing id is replaced. Returns the ids in order.

        Raises:
            DittoLangChainError: a WRITE or UPDATE failed (nothing of it was written).
        """
        keys = _keys(documents, kwargs.get("ids"))
        found = self._calls.run("MEMORY.GET", {"keys": list(dict.fromkeys(keys))})
        write, update = _plan(documents, keys, {i["key"]: i["id"] for i in found})
        if update:
            self._calls.run("MEMORY.UPDATE", {"memories": update})
        if write:
            self._calls.run("MEMORY.WRITE", {"memories": write})
        return keys

    async def aadd_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """:meth:`add_documents` on ``runtime.ainvoke``."""
        keys = _keys(documents, kwargs.get("ids"))
        found = await self._calls.arun("MEMORY.GET", {"keys": list(dict.fromkeys(keys))})
        write, update = _plan(documents, keys, {i["key"]: i["id"] for i in found})
        if update:
            await self._calls.arun("MEMORY.UPDATE", {"memories": update})
        if write:
            await self._calls.arun("MEMORY.WRITE", {"memories": write})
        return keys

    async def aadd_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[Any, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """:meth:`add_texts` on ``runtime.ainvoke``."""
        return await self.aadd_documents(_docs(texts, metadatas, ids))

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents of these ids (missing ones left out; order not guaranteed)."""
        if not ids:
            return []
        return [_document(i) for i in self._calls.run("MEMORY.GET", {"keys": list(ids)})]

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """:meth:`get_by_ids` on ``runtime.ainvoke``."""
        if not ids:
            return []
        found = await self._calls.arun("MEMORY.GET", {"keys": list(ids)})
        return [_document(i) for i in found]

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete the documents of ``ids`` (missing ones ignored); ``True``."""
        found = self._calls.run("MEMORY.GET", {"keys": list(ids or [])}) if ids else []
        if found:
            self._calls.run("MEMORY.DELETE", {"ids": [i["id"] for i in found]})
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """:meth:`delete` on ``runtime.ainvoke``."""
        found = await self._calls.arun("MEMORY.GET", {"keys": list(ids)}) if ids else []
        if found:
            await self._calls.arun("MEMORY.DELETE", {"ids": [i["id"] for i in found]})
        return True

    def _search(self, query: str, k: int, filter: Mapping[str, Any] | None) -> dict[str, Any]:
        search: dict[str, Any] = {"query": query, "limit": k, "strategy": self.strategy}
        if filter:
            search["filter"] = dict(filter)
        return search

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """MEMORY.SEARCH: at most ``k`` ``(document, score)``, best first; the score is
        the store's (for ``vector`` on SQLite: cosine similarity, higher is closer)."""
        hits = self._calls.run("MEMORY.SEARCH", self._search(query, k, filter))
        return [(_document(h["memory"]), float(h.get("score") or 0.0)) for h in hits]

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, filter: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """:meth:`similarity_search_with_score` on ``runtime.ainvoke``."""
        hits = await self._calls.arun("MEMORY.SEARCH", self._search(query, k, filter))
        return [(_document(h["memory"]), float(h.get("score") or 0.0)) for h in hits]

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """:meth:`similarity_search_with_score` without the scores."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, **kwargs)]

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """:meth:`asimilarity_search_with_score` without the scores."""
        found = await self.asimilarity_search_with_score(query, k, **kwargs)
        return [doc for doc, _ in found]


def _docs(
    texts: Iterable[str], metadatas: list[dict[Any, Any]] | None, ids: list[str] | None
) -> list[Document]:
    texts = list(texts)
    metas = metadatas or [{} for _ in texts]
    given: list[str | None] = list(ids) if ids else [None] * len(texts)
    return [
        Document(page_content=t, metadata=m, id=i)
        for t, m, i in zip(texts, metas, given, strict=True)
    ]


def _keys(documents: Sequence[Document], ids: Sequence[str] | None) -> list[str]:
    if ids is not None and len(ids) != len(documents):
        raise ValueError(f"{len(ids)} ids for {len(documents)} documents")
    chosen = list(ids) if ids is not None else [d.id for d in documents]
    return [key or uuid.uuid4().hex for key in chosen]


def _plan(
    documents: Sequence[Document], keys: Sequence[str], existing: Mapping[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """WRITE drafts for new keys, UPDATE entries for stored ones (the last document of a
    key given twice wins)."""
    latest = dict(zip(keys, documents, strict=True))
    write = [
        {"key": k, "content": d.page_content, "metadata": dict(d.metadata)}
        for k, d in latest.items()
        if k not in existing
    ]
    update = [
        {"id": existing[k], "content": d.page_content, "metadata": dict(d.metadata)}
        for k, d in latest.items()
        if k in existing
    ]
    return write, update
