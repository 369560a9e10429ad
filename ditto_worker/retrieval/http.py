"""``HttpEmbeddingProvider``: an OpenAI-compatible ``/embeddings`` endpoint via httpx.

Configured from the environment (:data:`~ditto_worker.retrieval.embed.ENV_PREFIX`):
``DITTO_WORKER_RETRIEVAL_EMBEDDING_BASE_URL``, ``_MODEL``, ``_DIMENSIONS`` (or the seed's
``DITTO_WORKER_MEMORY_EMBEDDING_DIMENSIONS``), ``_API_KEY`` (secret: never logged, never in
an error message or ``repr``), optional ``_REVISION`` and ``_TIMEOUT_S``. Errors are those
of :mod:`ditto_worker.retrieval.embed`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ditto_worker.errors import ConfigError, MemoryError
from ditto_worker.retrieval.embed import (
    EMBEDDING_UNAVAILABLE,
    ENV_PREFIX,
    EmbeddingIdentity,
    check_vectors,
    l2_normalize,
)

__all__ = ["SEED_DIMENSIONS_ENV", "HttpEmbeddingProvider", "http_provider"]

logger = logging.getLogger(__name__)

SEED_DIMENSIONS_ENV: Final = "DITTO_WORKER_MEMORY_EMBEDDING_DIMENSIONS"
"""The seed's name for the dimensions (memory-capabilities' env block); accepted as well as
``DITTO_WORKER_RETRIEVAL_EMBEDDING_DIMENSIONS`` (both set: they must agree)."""


def _positive(env: Mapping[str, str], var: str) -> int | None:
    raw = env.get(var)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"{var} must be a positive integer") from exc
    if value < 1:
        raise ConfigError(f"{var} must be a positive integer")
    return value


def _dimensions(env: Mapping[str, str]) -> int:
    ours = _positive(env, ENV_PREFIX + "DIMENSIONS")
    seed = _positive(env, SEED_DIMENSIONS_ENV)
    if ours is not None and seed is not None and ours != seed:
        raise ConfigError(f"{ENV_PREFIX}DIMENSIONS and {SEED_DIMENSIONS_ENV} differ; set one")
    dims = ours if ours is not None else seed
    if dims is None:
        raise ConfigError(f"{ENV_PREFIX}DIMENSIONS (or {SEED_DIMENSIONS_ENV}) is not set")
    return dims


class HttpEmbeddingProvider:
    """An OpenAI-compatible ``/embeddings`` endpoint (``POST {base_url}/embeddings``).

    Request body ``{"model": model, "input": [texts], "encoding_format": "float"}``;
    answer ``{"data": [{"index": i, "embedding": [floats]}]}``. Vectors are checked for
    ``dims`` (never padded or truncated) and L2-normalized here, so the identity's
    normalization is ``l2`` whatever the server does.

    Args:
        base_url: e.g. ``http://127.0.0.1:8080/v1`` (env ``..._BASE_URL``).
        model: model name sent to the server (env ``..._MODEL``).
        dims: expected vector length (env ``..._DIMENSIONS``).
        api_key: bearer token (env ``..._API_KEY``); never logged, never in an error or repr.
        revision: the identity's revision (env ``..._REVISION``, default ``""``).
        timeout_s: per-request timeout, seconds (env ``..._TIMEOUT_S``, default 30).
        transport: an httpx transport (tests).

    Raises (from :meth:`embed`):
        MemoryError: ``EMBEDDING_UNAVAILABLE`` for a connection error, a timeout, a non-2xx
            status or a malformed answer; ``EMBEDDING_MISMATCH`` for vectors of another
            length or count.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        dims: int,
        *,
        api_key: str | None = None,
        revision: str = "",
        timeout_s: float = 30.0,
        transport: Any = None,
    ) -> None:
        import httpx

        if not base_url or not model or dims < 1:
            raise ConfigError("the HTTP embedding provider needs a base URL, a model and dims")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=base_url.rstrip("/") + "/", headers=headers, timeout=timeout_s,
            transport=transport,
        )  # fmt: skip
        self._model = model
        self._identity = EmbeddingIdentity("openai-compatible", model, revision, dims, "l2")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HttpEmbeddingProvider:
        """Build from ``DITTO_WORKER_RETRIEVAL_EMBEDDING_*`` (see :data:`ENV_PREFIX`); the
        dimensions may also come from the seed's :data:`SEED_DIMENSIONS_ENV`.

        Raises:
            ConfigError: ``BASE_URL``, ``MODEL`` or the dimensions missing or invalid, or
                both dimension variables set to different values.
        """
        env = os.environ if env is None else env
        base_url, model = env.get(ENV_PREFIX + "BASE_URL"), env.get(ENV_PREFIX + "MODEL")
        if not base_url or not model:
            raise ConfigError(f"{ENV_PREFIX}BASE_URL and {ENV_PREFIX}MODEL must be set")
        try:
            timeout_s = float(env.get(ENV_PREFIX + "TIMEOUT_S") or 30.0)
        except ValueError as exc:
            raise ConfigError(f"{ENV_PREFIX}TIMEOUT_S must be a number of seconds") from exc
        return cls(
            base_url, model, _dimensions(env),
            api_key=env.get(ENV_PREFIX + "API_KEY") or None,
            revision=env.get(ENV_PREFIX + "REVISION", ""), timeout_s=timeout_s,
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"HttpEmbeddingProvider({self._identity.describe()})"

    @property
    def identity(self) -> EmbeddingIdentity:
        """``openai-compatible/<model>`` with the configured dims, L2-normalized."""
        return self._identity

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts`` with one request (see :meth:`EmbeddingProvider.embed`)."""
        if not texts:
            return []
        body = {"model": self._model, "input": list(texts), "encoding_format": "float"}
        data = self._post(body)
        try:
            rows = sorted(data["data"], key=lambda row: int(row["index"]))
            vectors = [[float(x) for x in row["embedding"]] for row in rows]
        except (KeyError, TypeError, ValueError) as exc:
            raise MemoryError(
                EMBEDDING_UNAVAILABLE, "the embedding endpoint answered a malformed body"
            ) from exc
        check_vectors(vectors, len(texts), self._identity.dims)
        return [l2_normalize(vector) for vector in vectors]

    def _post(self, body: dict[str, Any]) -> Any:
        import httpx

        try:
            response = self._client.post("embeddings", json=body)
        except httpx.HTTPError as exc:  # no URL or key in the message (MEM-ERR-4)
            logger.warning("embedding endpoint unreachable: %s", type(exc).__name__)
            raise MemoryError(
                EMBEDDING_UNAVAILABLE, "the embedding endpoint is unreachable"
            ) from None
        if response.status_code // 100 != 2:
            logger.warning("embedding endpoint answered HTTP %s", response.status_code)
            raise MemoryError(
                EMBEDDING_UNAVAILABLE,
                f"the embedding endpoint answered HTTP {response.status_code}",
            )
        try:
            return response.json()
        except ValueError:
            raise MemoryError(
                EMBEDDING_UNAVAILABLE, "the embedding endpoint answered a malformed body"
            ) from None


def http_provider(
    settings: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> HttpEmbeddingProvider:
    """The ``http`` entry point of ``ditto_worker.embedders``:
    :meth:`HttpEmbeddingProvider.from_env` (``DITTO_WORKER_RETRIEVAL_EMBEDDING_*``).

    Raises:
        ConfigError: any setting (the environment alone configures it, so the key never
            sits in ``ditto.yaml``); a missing or invalid variable.
    """
    if settings:
        raise ConfigError("the http embedding provider is configured by environment only")
    return HttpEmbeddingProvider.from_env(env)
