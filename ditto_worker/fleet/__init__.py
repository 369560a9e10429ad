"""The Celery fleet: app and queues, tasks, the invoke client, results, cancellation.

Everything that imports Celery, kombu or redis lives here; the SDK
(:mod:`ditto_worker.memory`) and the contracts never import it (SPEC.md MEM-RT-5).

* :mod:`.celery_app` — a configured Celery app, one queue per node, JSON only;
* :mod:`.tasks` — one thin task per node id;
* :mod:`.client` — :class:`DittoClient`, ``invoke`` / ``ainvoke``;
* :mod:`.results` — one Redis pub/sub listener per client;
* :mod:`.cancellation` — the per-call cancel flag a worker watches;
* :mod:`.transport` — kombu's Redis transport, guarded against Redis restarts;
* :mod:`.launch` — :func:`open_fleet` (a client, plus an in-process worker without a
  broker) and :func:`create_worker_app`;
* :mod:`.status`, :mod:`.monitor` — ``ditto-worker status`` and Flower;
* :mod:`.celery` — the module attribute ``app`` for Celery's own command line
  (``celery -A ditto_worker.fleet inspect …``).
"""

from __future__ import annotations

from ditto_worker.fleet.celery_app import create_celery_app, queue_for
from ditto_worker.fleet.client import DittoClient
from ditto_worker.fleet.launch import create_worker_app, open_fleet

__all__ = ["DittoClient", "create_celery_app", "create_worker_app", "open_fleet", "queue_for"]
