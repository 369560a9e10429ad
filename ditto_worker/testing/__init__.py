"""Test helpers shipped with ditto_worker: the reference in-memory store.

``create_store`` is the ``memory`` entry point of ``ditto_worker.stores``.
"""

from __future__ import annotations

from ditto_worker.testing.memory_store import InMemoryMemoryStore, create_store

__all__ = ["InMemoryMemoryStore", "create_store"]
