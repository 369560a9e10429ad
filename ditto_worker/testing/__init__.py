"""Test helpers shipped with ditto_worker: the reference in-memory store and the
conformance suite every store plugin runs (:mod:`ditto_worker.testing.conformance`).

``create_store`` is the ``memory`` entry point of ``ditto_worker.stores``. Under pytest,
importing this package registers the suite's modules for assertion rewriting (detailed
failure messages); it never imports pytest itself.
"""

from __future__ import annotations

import sys

_SUITE = ("conformance", "_conformance_harness", "_conformance_crud", "_conformance_query",
          "_conformance_search", "_conformance_scale")  # fmt: skip
if "pytest" in sys.modules:  # before the suite's modules are imported
    sys.modules["pytest"].register_assert_rewrite(*(f"{__name__}.{m}" for m in _SUITE))

from ditto_worker.testing.embedder import HashingEmbedder  # noqa: E402
from ditto_worker.testing.memory_store import InMemoryMemoryStore, create_store  # noqa: E402

__all__ = ["HashingEmbedder", "InMemoryMemoryStore", "create_store"]
