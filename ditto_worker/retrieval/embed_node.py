"""``RETRIEVAL.EMBED``: the retrieval worker's embedding model as a node (issue 35 item 8).

The RETRIEVAL worker computes embeddings for its pipelines; this node lends that model
to callers on its own queue, ``retrieval.embed``. ``ditto-worker serve`` publishes it as
an OpenAI-compatible ``POST /v1/embeddings`` (:mod:`ditto_worker.gateway.embeddings`), so
a store configured with ``embedding: http`` — or any service that wants the project's
embeddings — can use a fleet's retrieval workers.

Input ``{texts: [str], model?: str, dimensions?: int}`` (1-256 texts of 1-8,000
characters; ``model`` and ``dimensions``, when given, must be the served model's, checked
before the model embeds anything); output ``{model, dimensions,
vectors}``: one L2-normalized vector of ``dimensions`` floats per text, in input order.
The provider is ``workers.retrieval.embedder`` (an embedder entry point: ``local`` by
default, all-MiniLM-L6-v2, 384 dimensions, on ``workers.retrieval.device``), built once
per process on the first call. Failures: ``INVALID_INPUT`` naming the field (before the
model embeds), ``EMBEDDING_UNAVAILABLE`` (the model cannot load, an endpoint failed),
``EMBEDDING_MISMATCH`` (vectors of another length or count).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Final

from pydantic import Field, ValidationError

from ditto_worker.contracts import RETRIEVAL_EMBED, NodeResult
from ditto_worker.errors import ErrorCode
from ditto_worker.memory.checks import describe
from ditto_worker.runtime.context import NodeContext
from ditto_worker.runtime.definition import NodeSpec
from ditto_worker.wire import _Wire

__all__ = ["MAX_TEXTS", "RetrievalEmbedInput", "RetrievalEmbedOutput", "embed_spec"]

MAX_TEXTS: Final = 256
"""Texts one call may embed."""
MAX_TEXT_CHARS: Final = 8000
"""Characters one text may have."""


class RetrievalEmbedInput(_Wire):
    """``RETRIEVAL.EMBED``'s input."""

    texts: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]],
        Field(min_length=1, max_length=MAX_TEXTS),
    ] = Field(description="The texts to embed, 1-256, each 1-8000 characters.")
    model: str | None = Field(
        default=None, description="If set, must name the served model (else INVALID_INPUT)."
    )
    dimensions: int | None = Field(
        default=None, ge=1, description="If set, must equal the model's (else INVALID_INPUT)."
    )


class RetrievalEmbedOutput(_Wire):
    """``RETRIEVAL.EMBED``'s output."""

    model: str = Field(description="The embedding model's name (all-MiniLM-L6-v2 …).")
    dimensions: int = Field(ge=1, description="The length of every vector.")
    vectors: list[list[float]] = Field(
        description="One L2-normalized vector per text, in input order."
    )


def _refused(ctx: NodeContext, message: str) -> NodeResult[Any]:
    return NodeResult.failure(ctx.execution_id, RETRIEVAL_EMBED, ErrorCode.INVALID_INPUT, message)


def _handler(embedder: Callable[[], Any]) -> Callable[[Any, NodeContext], Any]:
    def embed(input: Any, ctx: NodeContext) -> Any:
        try:
            asked = RetrievalEmbedInput.model_validate(input)
        except ValidationError as exc:
            return _refused(ctx, f"Invalid input: {describe(exc)}")
        provider = embedder()  # MemoryError (EMBEDDING_UNAVAILABLE) ends the call with it
        identity = provider.identity
        if asked.model is not None and asked.model != identity.model:
            return _refused(ctx, f"Invalid input: model: this service embeds with {identity.model}")
        if asked.dimensions is not None and asked.dimensions != identity.dims:
            return _refused(
                ctx, f"Invalid input: dimensions: this model's vectors have {identity.dims}"
            )
        vectors = provider.embed(asked.texts)
        return RetrievalEmbedOutput(model=identity.model, dimensions=identity.dims,
                                    vectors=vectors).model_dump(by_alias=True)  # fmt: skip

    return embed


def embed_spec(embedder: Callable[[], Any]) -> NodeSpec:
    """The ``RETRIEVAL.EMBED`` node over ``embedder()`` (an
    :class:`~ditto_worker.memory.ports.EmbeddingProvider`, built by the caller's factory,
    e.g. once per process)."""
    return NodeSpec(RETRIEVAL_EMBED, _handler(embedder), output=RetrievalEmbedOutput,
                    input=RetrievalEmbedInput)  # fmt: skip
