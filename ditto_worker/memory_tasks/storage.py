"""``open_memory_storage``: the MEMORY worker a task runs on, per backend.

The seed (memory-capabilities, "Backends"; "register Workers using
openMemoryStorage({backend,directory,namespace,config})"):

=========  ==========================================  ==================================
backend    persistent database                         SEARCH
=========  ==========================================  ==================================
sqlite     ``<directory>/memory.sqlite``               keyword (FTS5 BM25), no vectors
postgres   ``DITTO_WORKER_MEMORY_POSTGRES_URL``,       keyword (parameterised SQL)
           schema ``<namespace>``
qdrant     ``DITTO_WORKER_MEMORY_QDRANT_URL`` or local  vectors (real embeddings, Cosine);
           mode in ``<directory>/qdrant``, collection  only ``kind=preference`` records
           ``<namespace>``                             are embedded: checkpoints are
                                                       payloads without vectors
=========  ==========================================  ==================================

``namespace`` names the table/schema or collection — it is *not* the trusted scope: the
tenant, user and space of every call come from the host (:class:`~ditto_worker.scope.
Scope`). Stores are built through their ``ditto_worker.stores`` entry points, like a
worker process builds them, so this module imports no plugin; building one connects to
nothing (each store connects on first use). Database URLs come only from the
environment (MEM-CONF-5).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ditto_worker.errors import ConfigError
from ditto_worker.memory.worker import create_memory_worker
from ditto_worker.runtime.definition import WorkerDefinition

__all__ = ["DEFAULT_NAMESPACE", "SQLITE_FILE", "MemoryStorage", "open_memory_storage"]

SQLITE_FILE: Final = "memory.sqlite"
"""The SQLite database file inside a task directory (the seed's ``memory.sqlite``)."""
DEFAULT_NAMESPACE: Final = "ditto_memory_tasks"
"""Schema (PostgreSQL) / collection (Qdrant) of the worked tasks when none is given."""


@dataclass
class MemoryStorage:
    """A task's long-term storage: the store and the worker definitions serving it.

    Attributes:
        backend: ``sqlite`` | ``postgres`` | ``qdrant``.
        store: the store plugin object (application-owned: :meth:`close` closes it).
        workers: worker definitions to pass to ``create_ditto(workers=[*storage.workers,
            …])`` (the MEMORY worker over ``store``).
        location: where the data lives, for people (a path, a schema, a collection; never
            a URL with credentials).
    """

    backend: str
    store: Any
    workers: list[WorkerDefinition] = field(default_factory=list)
    location: str = ""

    def close(self) -> None:
        """Close the store's connections (idempotent)."""
        close = getattr(self.store, "close", None)
        if callable(close):
            close()


def _settings(
    backend: str, directory: Path, namespace: str, config: Mapping[str, Any]
) -> tuple[dict[str, Any], str]:
    if backend == "sqlite":
        path = directory / SQLITE_FILE
        return {"path": str(path), **config}, str(path)
    if backend == "postgres":
        return {"schema": namespace, **config}, f"postgres schema {namespace}"
    if backend == "qdrant":
        settings = {
            "collection": namespace,
            "path": str(directory / "qdrant"),
            "embedding": "local",
            "embedKinds": ["preference"],
            **config,
        }
        where = "server" if os.environ.get("DITTO_WORKER_MEMORY_QDRANT_URL") else "local mode"
        return settings, f"qdrant collection {namespace} ({where})"
    raise ConfigError(f"unknown backend {backend[:40]!r}: sqlite, postgres or qdrant")


def open_memory_storage(
    backend: str,
    directory: str | os.PathLike[str],
    namespace: str = DEFAULT_NAMESPACE,
    config: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> MemoryStorage:
    """The store of ``backend`` and the MEMORY worker over it (see the module docstring).

    Args:
        backend: ``sqlite`` | ``postgres`` | ``qdrant``.
        directory: the task directory (SQLite's file; Qdrant's local-mode folder).
        namespace: PostgreSQL schema / Qdrant collection name (not the trusted scope).
        config: the plugin's own settings on top of the defaults above (e.g.
            ``{"embedding": "http"}``); ``plugins.<backend>`` of ``ditto.yaml``.
        env: the environment for ``DITTO_WORKER_MEMORY_<BACKEND>_*`` (default
            ``os.environ``).

    Returns:
        A :class:`MemoryStorage`; nothing has connected yet.

    Raises:
        ConfigError: an unknown backend, a plugin that is not installed, an invalid
            setting, a missing ``DITTO_WORKER_MEMORY_POSTGRES_URL``.
        MemoryError: ``EMBEDDING_UNAVAILABLE`` when Qdrant's embedding model cannot load.
    """
    from ditto_worker.runtime.registry import ENTRY_POINT_GROUP, entry_points

    settings, location = _settings(backend, Path(directory), namespace, dict(config or {}))
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == backend]
    if not found:
        raise ConfigError(
            f"the {backend} store is not installed: pip install 'ditto-worker[{backend}]'"
        )
    factory = found[0].load()
    store = factory(settings, os.environ if env is None else env)
    worker = create_memory_worker(store, require_scope=True)
    return MemoryStorage(backend, store, [worker], location)
