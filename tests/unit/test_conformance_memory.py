"""The conformance suite against the in-memory reference store."""

from __future__ import annotations

import pytest

from ditto_worker.testing import InMemoryMemoryStore
from ditto_worker.testing.conformance import *  # noqa: F403


@pytest.fixture
def conformance_store() -> InMemoryMemoryStore:
    return InMemoryMemoryStore()
