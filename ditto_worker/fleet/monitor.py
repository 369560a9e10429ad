"""Flower for the fleet, with every page, the API and ``/metrics`` behind HTTP basic auth.

``ditto-worker flower`` runs Flower (pinned in the ``ops`` and ``dev`` extras) on the
fleet's Celery app: the broker of ``ditto.yaml`` / ``DITTO_BROKER_URL``, the six node
queues declared (so ``/api/queues/length`` lists them even before a worker answers).
Workers send task events (``-E``, :mod:`ditto_worker.fleet.celery_app`), from which Flower
counts each task name — each MEMORY node is one task name — in
``flower_events_total{type, task, worker}``; :mod:`ditto_worker.fleet.metrics` adds calls by
node, status and code and the queue lengths on the same ``/metrics``.

Authentication: the credentials come only from the environment,
``FLOWER_BASIC_AUTH=user:password[,user2:password2]`` (Flower reads the variable itself);
the command refuses to start without it. Flower 2.2.0 exempts ``/metrics`` and
``/healthcheck`` from authentication (its ``docs/auth.rst``; flower#1129 removed the
check, flower#1342 asked for it back). Its metrics name every task and worker, so
:func:`require_auth_on_metrics` puts ``/metrics`` back behind the same basic auth
(``401`` without valid credentials). ``/healthcheck`` (body ``OK``, no data) stays open
for liveness probes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ditto_worker.config import RuntimeConfig
from ditto_worker.errors import ConfigError

__all__ = [
    "BASIC_AUTH_ENV",
    "DEFAULT_FLOWER_PORT",
    "basic_auth_from_env",
    "flower_argv",
    "require_auth_on_metrics",
    "run_flower",
]

BASIC_AUTH_ENV = "FLOWER_BASIC_AUTH"
"""Env var holding ``user:password`` pairs, comma-separated (Flower's own option)."""

DEFAULT_FLOWER_PORT = 5555
"""Flower's default HTTP port."""


def basic_auth_from_env(env: Mapping[str, str] | None = None) -> list[str]:
    """The ``user:password`` pairs of ``FLOWER_BASIC_AUTH``.

    Args:
        env: the environment to read (default ``os.environ``).

    Returns:
        At least one ``user:password`` string (user and password non-empty).

    Raises:
        ConfigError: the variable is unset or empty, or a pair has no ``:``, an empty
            user or an empty password. The message never contains the password.
    """
    raw = (os.environ if env is None else env).get(BASIC_AUTH_ENV, "")
    pairs = [p for p in raw.split(",") if p]
    if not pairs:
        raise ConfigError(
            f"{BASIC_AUTH_ENV} is not set: Flower's API and /metrics need basic auth, "
            f"e.g. {BASIC_AUTH_ENV}=admin:$(python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(16))')"
        )
    for number, pair in enumerate(pairs, 1):
        user, sep, password = pair.partition(":")
        if not (sep and user and password):
            raise ConfigError(f"{BASIC_AUTH_ENV}: pair {number} is not user:password")
    return pairs


def require_auth_on_metrics() -> None:
    """Serve Flower's ``/metrics`` through a handler that requires authentication.

    Replaces the ``/metrics`` route in Flower's URL table (``flower.urls.handlers``, the
    list every ``Flower`` app is built from) by a subclass of Flower's handler whose
    ``get`` is ``tornado.web.authenticated``; with basic auth configured, Flower's
    ``get_current_user`` answers ``401`` and ``WWW-Authenticate: Basic`` to a request
    without valid credentials. Idempotent.
    """
    import tornado.web
    from flower import urls
    from flower.views.monitor import Metrics

    class AuthenticatedMetrics(Metrics):  # type: ignore[misc]  # flower is untyped
        """Flower's Prometheus endpoint, behind the same authentication as the API."""

        @tornado.web.authenticated
        async def get(self) -> None:
            await super().get()

    for index, handler in enumerate(urls.handlers):
        if isinstance(handler, tuple) and handler[0] == r"/metrics":
            if handler[1].__name__ != AuthenticatedMetrics.__name__:
                urls.handlers[index] = (r"/metrics", AuthenticatedMetrics)
            return
    raise ConfigError("this Flower version has no /metrics route to protect")


def flower_argv(address: str, port: int, extra: list[str] | None = None) -> list[str]:
    """The ``celery`` argv that runs Flower (tornado options take ``--name=value``).

    Args:
        address: interface to bind, e.g. ``127.0.0.1`` (``0.0.0.0`` in a container).
        port: TCP port (0 picks a free one).
        extra: further Flower options, passed unchanged.

    Returns:
        ``["flower", "--address=…", "--port=…", *extra]``.
    """
    return ["flower", f"--address={address}", f"--port={port}", *(extra or [])]


def run_flower(
    config: RuntimeConfig,
    address: str = "127.0.0.1",
    port: int = DEFAULT_FLOWER_PORT,
    extra: list[str] | None = None,
) -> Any:
    """Run Flower on the fleet's broker until SIGTERM / Ctrl-C.

    Args:
        config: runtime config; ``config.fleet`` names the broker.
        address: interface to bind (default loopback).
        port: TCP port.
        extra: further Flower options (``--purge_offline_workers=60`` …).

    Returns:
        The exit code Celery's command line returns (``None`` on a normal stop).

    Raises:
        ConfigError: no broker configured, or ``FLOWER_BASIC_AUTH`` missing or malformed.
    """
    from ditto_worker.fleet.celery_app import create_celery_app

    if config.fleet.in_process:
        raise ConfigError("no broker configured (set DITTO_BROKER_URL or --broker)")
    basic_auth_from_env()
    require_auth_on_metrics()
    from ditto_worker.fleet.metrics import install_flower_metrics

    app = create_celery_app(config.fleet, guarded_transport=False)  # Flower: plain redis://
    install_flower_metrics(app)  # ditto_node_calls_total, ditto_queue_messages on /metrics
    return app.start(flower_argv(address, port, extra))
