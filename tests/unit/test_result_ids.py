"""Execution ids of a fleet client's result listener (:mod:`ditto_worker.fleet.results`):
uuid4-shaped, unique, all under the listener's prefix (its one pattern subscription), their
random part read from ``os.urandom`` in blocks rather than once per call."""

from __future__ import annotations

import os
import threading
import uuid
from unittest import mock

from ditto_worker.fleet.results import ResultListener


def test_ids_are_unique_uuid4s_under_the_listeners_prefix() -> None:
    listener = ResultListener("redis://127.0.0.1:1/0")  # never connected: ids only
    try:
        ids: list[str] = []

        def make() -> None:
            ids.extend(listener.new_id() for _ in range(700))

        threads = [threading.Thread(target=make) for _ in range(4)]
        with mock.patch("ditto_worker.fleet.results.os.urandom", wraps=os.urandom) as urandom:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert len(set(ids)) == len(ids) == 2800  # across threads and block refills
        assert 2800 // 256 <= urandom.call_count <= 2800 // 256 + 1
        for eid in ids[:50] + ids[-50:]:
            assert eid.startswith(listener.prefix + "-")
            assert uuid.UUID(eid).version == 4 and str(uuid.UUID(eid)) == eid
    finally:
        listener.close()
