"""The Celery app for Celery's own command line: ``celery -A ditto_worker.fleet …``.

Celery's ``-A`` option needs a module attribute (its ``find_app`` takes no factory): for
the package ``ditto_worker.fleet`` it looks for ``ditto_worker.fleet.celery.app``, this
module's ``app``, built from ``./ditto.yaml`` (if present) and the ``DITTO_*``
environment when the module is imported — by Celery's command line only; nothing else
imports it. It has every node's task registered (names and queues), so
``celery -A ditto_worker.fleet inspect active_queues|registered``, ``control``, ``events``
and ``purge`` work against a running fleet. Start workers with ``ditto-worker worker``
(it applies the node groups, concurrency, pool and state db of ``ditto.yaml``).
"""

from __future__ import annotations

from ditto_worker.config import default_config
from ditto_worker.fleet.launch import create_worker_app

__all__ = ["app"]

app = create_worker_app(default_config())
"""The fleet's Celery app (broker and queues from ``ditto.yaml`` / ``DITTO_BROKER_URL``)."""
