"""The Celery app for Celery's own command line: ``celery -A ditto_worker.fleet …``.

Celery's ``-A`` option needs a module attribute (its ``find_app`` takes no factory): for
the package ``ditto_worker.fleet`` it looks for ``ditto_worker.fleet.celery.app``, this
module's ``app``, built from ``./ditto.yaml`` (if present) and the ``DITTO_*``
environment when the module is imported — by Celery's command line only; nothing else
imports it. It has every node's task registered (names and queues), so
``celery -A ditto_worker.fleet inspect active_queues|registered``, ``control``, ``events``
and ``purge`` work against a running fleet. Start workers with ``ditto-worker worker``
(it applies the node groups, concurrency, pool and state db of ``ditto.yaml``).

Without a broker (``fleet.brokerUrl`` / ``DITTO_BROKER_URL`` unset, or ``memory://``) the
app would be on kombu's in-process ``memory://`` transport, which no other process can
reach: every command would wait and say "No nodes replied". Importing this module then
exits instead (:data:`NO_BROKER_EXIT`) with one line on stderr naming the setting; a
config error exits the same way with its message. The in-process transport itself stays
for in-process use (``create_ditto``, ``open_fleet``), which never imports this module.
"""

from __future__ import annotations

import sys
from typing import Final

from celery import Celery

from ditto_worker.config import default_config
from ditto_worker.errors import ConfigError
from ditto_worker.fleet.launch import create_worker_app

__all__ = ["NO_BROKER_EXIT", "NO_BROKER_MESSAGE", "app", "fleet_app"]

NO_BROKER_EXIT: Final = 2
"""Exit code of Celery's command line on this module without a broker (a config error,
as ``ditto-worker`` uses)."""

NO_BROKER_MESSAGE: Final = (
    "celery -A ditto_worker.fleet: no broker configured; set DITTO_BROKER_URL (or "
    "fleet.brokerUrl in ./ditto.yaml) to the fleet's broker, e.g. redis://127.0.0.1:6379/0"
)
"""The one line printed instead of waiting on the in-process transport."""


def fleet_app() -> Celery:
    """The fleet's Celery app, or exit Celery's command line with one line on stderr.

    Raises:
        SystemExit: :data:`NO_BROKER_EXIT` when no broker is configured or the config is
            invalid (``ditto.yaml`` / ``DITTO_*``); the line names the setting.
    """
    try:
        config = default_config()
    except ConfigError as exc:
        print(f"celery -A ditto_worker.fleet: config error: {exc}", file=sys.stderr)
        raise SystemExit(NO_BROKER_EXIT) from None
    if config.fleet.in_process:
        print(NO_BROKER_MESSAGE, file=sys.stderr)
        raise SystemExit(NO_BROKER_EXIT)
    return create_worker_app(config)


app = fleet_app()
"""The fleet's Celery app (broker and queues from ``ditto.yaml`` / ``DITTO_BROKER_URL``)."""
