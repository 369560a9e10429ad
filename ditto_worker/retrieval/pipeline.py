"""The retrieval pipeline: moved to :mod:`ditto_worker.memory.search.pipeline` (issue 24).

The SDK's layer holds it now, so store plugins and RETRIEVAL both reach it downward;
this old path re-exports its names, the same objects (its ``__all__`` is the new
module's, so the two cannot drift apart).
"""

from __future__ import annotations

from ditto_worker.memory.search.pipeline import *  # noqa: F403 - the moved module's __all__
from ditto_worker.memory.search.pipeline import __all__ as __all__
