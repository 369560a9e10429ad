"""Build the RETRIEVAL worker of this process from ``workers.retrieval`` in ``ditto.yaml``.

Each target names a store plugin (its settings are ``plugins.<store>``) and a pipeline.
An empty pipeline serves the store's native search (``create_memory_retrieval_provider``,
MEM-RET-3); otherwise :func:`ditto_worker.retrieval.build_pipeline_provider` builds the
embedding + search + fusion + rerank pipeline over that store.
"""

from __future__ import annotations

from typing import Any

from ditto_worker.config import RuntimeConfig
from ditto_worker.contracts import MemoryDefaults
from ditto_worker.errors import ConfigError
from ditto_worker.memory.core import Memory
from ditto_worker.memory.ports import MemorySearchProvider
from ditto_worker.retrieval.delegation import retrieval_definition, search_only
from ditto_worker.runtime.definition import WorkerDefinition
from ditto_worker.runtime.process import PerProcess

__all__ = ["build_retrieval_worker", "from_config", "native_search"]


def native_search(store: Any) -> MemorySearchProvider:
    """The store's own ``search`` as a provider (a store without one is a ConfigError)."""
    if not callable(getattr(store, "search", None)):
        raise ConfigError(f"store {type(store).__name__} has no native search")
    provider: MemorySearchProvider = store
    return provider


def _provider(config: RuntimeConfig, store_name: str, pipeline: dict[str, Any]) -> Any:
    from ditto_worker.runtime.registry import build_store

    # a retrieval worker reads the memory workers' store: never create an empty one (a
    # wrong path on another machine would answer every search with [])
    store = build_store(config, store_name, must_exist=True)
    if not pipeline:
        return native_search(store)
    from ditto_worker.retrieval import build_pipeline_provider  # loads models: only here

    return build_pipeline_provider(store, pipeline, config)


def _targets(config: RuntimeConfig) -> dict[str, Memory]:
    settings = config.retrieval_worker
    if not settings.targets:
        raise ConfigError("workers.retrieval.targets is empty")
    providers = {
        name: _provider(config, target.store, target.pipeline)
        for name, target in settings.targets.items()
    }
    return search_only(providers, MemoryDefaults(search_limit=settings.search_limit))


def _embedder(config: RuntimeConfig) -> PerProcess[Any] | None:
    """``workers.retrieval.embedder`` built once per process on the first RETRIEVAL.EMBED
    call (``None`` for ``none``: no node)."""
    from ditto_worker.runtime.registry import build_embedder

    settings = config.retrieval_worker
    if settings.embedder in ("", "none"):
        return None
    own = ({"device": settings.device, "threads": settings.torch_threads}
           if settings.embedder == "local" else {})  # fmt: skip
    return PerProcess(lambda: build_embedder(settings.embedder, own))


def build_retrieval_worker(config: RuntimeConfig) -> WorkerDefinition:
    """One search provider per configured target, behind RETRIEVAL.SEARCH, built now
    (and RETRIEVAL.EMBED, its model built on the first call).

    Raises:
        ConfigError: no targets, an unknown store plugin, or a store without search.
    """
    targets = _targets(config)
    embedder = _embedder(config)
    return retrieval_definition(lambda: targets, config.retrieval_worker.concurrency,
                                embedder=None if embedder is None else embedder.get)  # fmt: skip


def from_config(config: RuntimeConfig) -> WorkerDefinition:
    """The RETRIEVAL worker of a worker process, from ``workers.retrieval`` in ``ditto.yaml``.

    Each target's store and pipeline (models included) are built once per process, on
    ``open`` (before the worker announces ready) or on the first call — never at import.
    """
    targets = PerProcess(lambda: _targets(config))
    embedder = _embedder(config)
    return retrieval_definition(targets.get, config.retrieval_worker.concurrency, targets.open,
                                None if embedder is None else embedder.get)  # fmt: skip
