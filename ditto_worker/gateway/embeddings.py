"""``POST /v1/embeddings``: an OpenAI-compatible embeddings endpoint on ``ditto-worker
serve``, backed by the retrieval worker's ``RETRIEVAL.EMBED`` (issue 35 item 8).

Request (OpenAI's shape): ``{"input": str | [str], "model"?: str, "encoding_format"?:
"float" | "base64", "dimensions"?: int, "user"?: str}``; answer ``{"object": "list",
"data": [{"object": "embedding", "index": i, "embedding": [floats] | base64}], "model",
"usage": {"prompt_tokens": 0, "total_tokens": 0}}`` (no tokenizer is run: usage is 0).
``base64`` is the little-endian float32 bytes of each vector, as OpenAI's client decodes.

It follows the node routes' rules: the guard (:mod:`ditto_worker.gateway.guard`) admits
the request first (ambiguous credentials 400, the identity's rate and share 429, the
body cap 413, an in-flight slot, JSON depth and encoding 422); then the bearer identity
(401), its grants for ``RETRIEVAL.EMBED`` (403), this request's shape (422 naming the
field, before anything is enqueued) and the node's input (422: a ``model`` or
``dimensions`` not the served one, checked by the node before its model embeds
anything); the call runs under the identity's scope and the gateway's timeout, and is
counted in the metrics. Refusals and failures are NodeResult-shaped, with the node
routes' statuses (``EMBEDDING_UNAVAILABLE`` 503 with ``Retry-After`` …); their
``error.message`` and ``error.code`` are where an OpenAI client looks.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ditto_worker.contracts import RETRIEVAL_EMBED, NodeResult, to_wire
from ditto_worker.errors import ErrorCode
from ditto_worker.gateway.auth import Identity
from ditto_worker.gateway.errors import RETRY_AFTER_S, GatewayError, http_status
from ditto_worker.gateway.guard import JSON_SCOPE_KEY, parse_json
from ditto_worker.memory.checks import describe

__all__ = ["EMBEDDINGS_PATH", "EmbeddingsRequest", "mount_embeddings"]

EMBEDDINGS_PATH = "/v1/embeddings"
"""The route's path (OpenAI's, so a client's ``base_url`` is ``http://host:port/v1``)."""

Identify = Callable[[Request], Identity]
CallAs = Callable[[str, Any, Identity], Awaitable[NodeResult[Any]]]


class EmbeddingsRequest(BaseModel):
    """The body of ``POST /v1/embeddings`` (OpenAI's embeddings request)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    input: str | list[str] = Field(description="One text or a list of 1-256 texts.")
    model: str | None = Field(default=None, description="Must name the served model if set.")
    encoding_format: Literal["float", "base64"] = Field(default="float")
    dimensions: int | None = Field(default=None, description="Must equal the model's if set.")
    user: str | None = Field(default=None, description="Accepted and ignored.")


def _request(body: Any) -> EmbeddingsRequest:
    try:
        return EmbeddingsRequest.model_validate(body)
    except ValidationError as exc:
        raise GatewayError(ErrorCode.INVALID_INPUT, f"Invalid input: {describe(exc)}") from None


def _encoded(vector: list[float], encoding: str) -> Any:
    if encoding == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def _answer(asked: EmbeddingsRequest, output: Any) -> dict[str, Any]:
    """The OpenAI answer of a successful RETRIEVAL.EMBED output ``{model, dimensions,
    vectors}`` (the node has refused a ``model`` or ``dimensions`` not the served one)."""
    model = str(output["model"])
    data = [{"object": "embedding", "index": i, "embedding": _encoded(v, asked.encoding_format)}
            for i, v in enumerate(output["vectors"])]  # fmt: skip
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": 0, "total_tokens": 0}}  # fmt: skip


def _failed(result: NodeResult[Any]) -> Response:
    """A failed RETRIEVAL.EMBED answered as the node routes answer it."""
    status = http_status(result.status, result.error.code if result.error is not None else None)
    headers = {"Retry-After": RETRY_AFTER_S[status]} if status in RETRY_AFTER_S else None
    return JSONResponse(to_wire(result), status, headers=headers)


def _refusal(exc: GatewayError) -> Response:
    return JSONResponse(exc.body(RETRIEVAL_EMBED), exc.status, headers=exc.headers or None)


def mount_embeddings(app: FastAPI, identify: Identify, call_as: CallAs, max_depth: int) -> None:
    """Add ``POST /v1/embeddings`` to ``app`` (see the module docstring).

    Args:
        app: the gateway app (its guard already installed).
        identify: the request's verified identity (401 ``GatewayError`` without one).
        call_as: runs a node call under an identity (grants, input model, timeout,
            metrics), as ``/mcp`` tools do.
        max_depth: ``gateway.maxJsonDepth``, for a body the guard did not parse.
    """

    async def embeddings(request: Request) -> Response:
        try:
            identity = identify(request)
            parsed = request.scope.get(JSON_SCOPE_KEY)
            body, problem = parsed if parsed is not None else parse_json(
                await request.body(), max_depth)  # fmt: skip
            if problem is not None:
                raise GatewayError(ErrorCode.INVALID_INPUT, problem)
            asked = _request(body)
            texts = [asked.input] if isinstance(asked.input, str) else asked.input
            call = {"texts": texts, "model": asked.model, "dimensions": asked.dimensions}
            result = await call_as(RETRIEVAL_EMBED, call, identity)
            if result.status != "success":
                return _failed(result)
            return JSONResponse(_answer(asked, to_wire(result)["output"]))
        except GatewayError as exc:
            return _refusal(exc)

    app.add_api_route(EMBEDDINGS_PATH, embeddings, methods=["POST"], name="embeddings",
                      include_in_schema=False)  # fmt: skip
