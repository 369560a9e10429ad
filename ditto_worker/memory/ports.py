"""The plugin ports: ``MemoryStore``, ``MemorySearchProvider``, ``EmbeddingProvider``, and
the per-call options.

Two independent ``typing.Protocol`` s, as in the seed ("两个独立插件接口"): no base class,
no registry. A plugin returns the *raw* output (contract models, or plain dicts with the
same fields); the SDK validates it and wraps it once in a NodeResult (MEM-NODE-1).

Plugins raise :class:`~ditto_worker.errors.MemoryError` with a safe message for classified
failures; any other exception becomes ``MEMORY_BACKEND_ERROR`` (MEM-ERR-4).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from ditto_worker.contracts import (
    MemoryDeleteInput,
    MemoryDeleteOutput,
    MemoryGetInput,
    MemoryItem,
    MemoryQueryInput,
    MemoryQueryOutput,
    MemorySearchInput,
    MemorySearchResult,
    MemoryUpdateInput,
    MemoryWriteInput,
)
from ditto_worker.errors import ErrorCode, MemoryError
from ditto_worker.runtime.cancel import CancelToken
from ditto_worker.scope import Scope

__all__ = [
    "CancelToken",
    "EmbeddingIdentity",
    "EmbeddingProvider",
    "MemoryCallOptions",
    "MemorySearchProvider",
    "MemoryStore",
    "ReembeddingStore",
    "check_vectors",
    "l2_normalize",
    "reembed_provider",
    "sync_until_settled",
]


@dataclass(frozen=True)
class MemoryCallOptions:
    """Per-call options handed to a plugin method (the seed's ``MemoryCallOptions``).

    Attributes:
        cancel: set when the caller cancelled; plugins should pass it to the driver
            (MEM-RUN-2). ``None`` when the call cannot be cancelled.
        deadline: absolute wall-clock deadline (``time.time()`` seconds) after which the
            caller has given up, or ``None``.
        execution_id: the call's execution id (the Celery task id on the fleet).
        operation_id: the caller's operation id of a mutation (MEM-RUN-7,
            :mod:`ditto_worker.operation`), already validated, or ``None``. A store that
            declares ``capabilities.operation_ids`` applies the mutation at most once per
            id and namespace (:mod:`ditto_worker.memory.operations`).
        scope: the trusted tenant scope the store must confine the call to (all six
            operations; :mod:`ditto_worker.scope`), or ``None`` for the unscoped
            namespace. Never taken from the request body.
        extra: JSON-safe values from the host (never from the request body).
        runtime: the seed's ``MemoryCallOptions.runtime``: a callable
            ``invoke(node, input, *, timeout=None) -> NodeResult`` for sub-calls (inside a
            worker, the call's ``NodeContext.invoke``: sub-calls inherit its deadline,
            cancellation and scope), or ``None`` outside a runtime. A
            ``RemoteRetrievalSearchProvider`` without an explicit client uses it (MEM-RET-5).
    """

    cancel: CancelToken | None = None
    deadline: float | None = None
    execution_id: str | None = None
    scope: Scope | None = None
    operation_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    runtime: Any = None

    @property
    def remaining_s(self) -> float | None:
        """Seconds left before ``deadline`` (may be negative), or ``None``."""
        return None if self.deadline is None else self.deadline - time.time()


@runtime_checkable
class MemoryStore(Protocol):
    """The fact store: exact reads, structured queries and mutations.

    Each method receives a validated input whose ``limit`` (QUERY) is already resolved
    (MEM-CONF-2), and returns the raw output. Rules the store owns: MEM-GET-2/5,
    MEM-QUERY-2/3/4, MEM-WRITE-2/3, MEM-UPDATE-1/2/4, MEM-DELETE-2/3, MEM-PY-5/6/11/12.
    """

    def get(
        self, input: MemoryGetInput, options: MemoryCallOptions | None = None
    ) -> Sequence[MemoryItem | dict[str, Any]]:
        """Records whose id or key was requested; missing ones omitted."""
        ...

    def query(
        self, input: MemoryQueryInput, options: MemoryCallOptions | None = None
    ) -> MemoryQueryOutput | dict[str, Any]:
        """One page: at most ``input.limit`` items, stably ordered, keyset cursor."""
        ...

    def write(
        self, input: MemoryWriteInput, options: MemoryCallOptions | None = None
    ) -> Sequence[MemoryItem | dict[str, Any]]:
        """Create records after commit; one full item per draft, in order."""
        ...

    def update(
        self, input: MemoryUpdateInput, options: MemoryCallOptions | None = None
    ) -> Sequence[MemoryItem | dict[str, Any]]:
        """Partial updates by id; a missing id raises ``MemoryError("NOT_FOUND", …)``."""
        ...

    def delete(
        self, input: MemoryDeleteInput, options: MemoryCallOptions | None = None
    ) -> MemoryDeleteOutput | dict[str, Any]:
        """Delete existing ids; returns only the ids deleted now."""
        ...


@runtime_checkable
class MemorySearchProvider(Protocol):
    """Relevance search (MEM-SEARCH). A store may implement it natively."""

    def search(
        self, input: MemorySearchInput, options: MemoryCallOptions | None = None
    ) -> Sequence[MemorySearchResult | dict[str, Any]]:
        """At most ``input.limit`` results (resolved by the SDK), in the provider's order.

        Raises:
            MemoryError: ``UNSUPPORTED_STRATEGY`` for an unknown strategy,
                ``INVALID_INPUT`` for a query the provider cannot use.
        """
        ...


@dataclass(frozen=True)
class EmbeddingIdentity:
    """What fixes a vector space (MEM-RET-4); two providers are compatible iff equal.

    Attributes:
        provider: who computes the vectors (``sentence-transformers``,
            ``openai-compatible``, ``testing``).
        model: the model name, e.g. ``all-MiniLM-L6-v2``.
        revision: the model's version (package version, endpoint revision); ``""`` when
            unknown.
        dims: the vector length, a positive int (384 for all-MiniLM-L6-v2).
        normalization: ``"l2"``: every vector has unit length, so cosine similarity is
            the dot product.
    """

    provider: str
    model: str
    revision: str
    dims: int
    normalization: str = "l2"

    def to_json(self) -> str:
        """Canonical JSON text (sorted keys), as stored by a vector collection."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> EmbeddingIdentity:
        """Parse :meth:`to_json` output.

        Raises:
            MemoryError: ``EMBEDDING_MISMATCH`` when the text is not an identity.
        """
        try:
            return cls(**json.loads(text))
        except (TypeError, ValueError) as exc:
            raise MemoryError(
                ErrorCode.EMBEDDING_MISMATCH, "the stored embedding identity is invalid"
            ) from exc

    def describe(self) -> str:
        """Short human form, e.g. ``sentence-transformers/all-MiniLM-L6-v2@x (384, l2)``."""
        revision = f"@{self.revision}" if self.revision else ""
        return f"{self.provider}/{self.model}{revision} ({self.dims}, {self.normalization})"


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Turns a batch of texts into vectors of a fixed length (STYLE.md ``Embedder``)."""

    @property
    def identity(self) -> EmbeddingIdentity:
        """The vector space of this provider."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order.

        Returns:
            ``len(texts)`` lists of ``identity.dims`` finite floats, unit length when
            ``identity.normalization == "l2"``; ``[]`` for ``[]``.

        Raises:
            MemoryError: ``EMBEDDING_UNAVAILABLE`` when the model or endpoint fails,
                ``EMBEDDING_MISMATCH`` when it answers vectors of another length.
        """
        ...


@runtime_checkable
class ReembeddingStore(Protocol):
    """A store that can move its vectors to another embedding identity (MEM-RET-4):
    ``ditto-worker reindex`` builds the store with the new provider and calls
    :meth:`reembed_embeddings`. Implemented by the SQLite, PostgreSQL, Qdrant, MySQL and
    Milvus plugins (docs/retrieval.md, "Changing the embedding model")."""

    @property
    def embedder(self) -> EmbeddingProvider | None:
        """The provider of the identity to move to."""
        ...

    def reembed_embeddings(self, batch_size: int = 256) -> int:
        """Re-embed every record with :attr:`embedder` and record its identity; until
        the last vector is written the store stays in its old identity, and a rerun
        after a crash finishes the work.

        Returns:
            The number of records embedded (0: the identity was already recorded).

        Raises:
            MemoryError: ``INVALID_INPUT`` without a provider or for ``batch_size < 1``;
                ``EMBEDDING_UNAVAILABLE``; ``CONFLICT`` while another run holds the
                store; ``MEMORY_BACKEND_ERROR`` (safe message).
        """
        ...


def reembed_provider(embedder: EmbeddingProvider | None, batch_size: int) -> EmbeddingProvider:
    """The provider a :meth:`ReembeddingStore.reembed_embeddings` call moves to, after the
    checks every store makes before touching anything (MEM-RET-4).

    Args:
        embedder: the store's provider (``None``: the store has none, or no vector space).
        batch_size: records per model batch.

    Raises:
        MemoryError: ``INVALID_INPUT`` without a provider or for ``batch_size < 1``.
    """
    if embedder is None:
        raise MemoryError(ErrorCode.INVALID_INPUT, "embedding: reindex needs a provider")
    if batch_size < 1:
        raise MemoryError(ErrorCode.INVALID_INPUT, "batchSize must be at least 1")
    return embedder


def sync_until_settled(sync: Callable[[], tuple[bool, int]], passes: int) -> int:
    """Run ``sync`` — one pass copying what changed since the last into the new identity's
    collection, returning ``(changed anything, records embedded)`` — until a pass changes
    nothing, at most ``passes`` times, so writes of old-model processes meanwhile are
    carried over (MEM-RET-4; the Qdrant and Milvus stores). Returns the records embedded."""
    done = 0
    for _ in range(passes):
        changed, embedded = sync()
        done += embedded
        if not changed:
            break
    return done


def l2_normalize(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to unit length (a zero vector is returned unchanged)."""
    norm = math.sqrt(sum(x * x for x in vector))
    return [float(x) / norm for x in vector] if norm > 0 else [float(x) for x in vector]


def check_vectors(vectors: Sequence[Sequence[float]], count: int, dims: int) -> None:
    """Check that there are ``count`` vectors of ``dims`` finite floats.

    Raises:
        MemoryError: ``EMBEDDING_MISMATCH`` naming the expected and received shape.
    """
    if len(vectors) != count:
        raise MemoryError(
            ErrorCode.EMBEDDING_MISMATCH, f"expected {count} vectors, got {len(vectors)}"
        )
    for vector in vectors:
        if len(vector) != dims:
            raise MemoryError(
                ErrorCode.EMBEDDING_MISMATCH, f"expected vectors of {dims} dims, got {len(vector)}"
            )
        # one C-speed sum first: NaN or an infinity anywhere makes it non-finite; only a
        # non-finite sum (a bad value, or finite values overflowing) is looked at closely
        if not math.isfinite(sum(vector)) and not all(math.isfinite(x) for x in vector):
            raise MemoryError(
                ErrorCode.EMBEDDING_MISMATCH, "the embedding contains a non-finite value"
            )
