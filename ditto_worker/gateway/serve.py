"""``ditto-worker serve``: the gateway app on uvicorn, over the embedded runtime or a fleet.

With no broker configured it serves the embedded runtime: the same worker definitions in
this one process. Several server processes would each hold their own CONTEXT cache and
model, so ``--workers`` above 1 is refused there; with a broker every process is only a
client of the fleet and ``--workers N`` runs N of them. Shutdown (SIGTERM/SIGINT) stops
accepting connections and drains the calls in flight for up to
``gateway.shutdownGraceS`` seconds before the runtime closes. An idle keep-alive
connection stays open ``gateway.keepAliveS`` seconds (75; uvicorn's own default is 5).
uvicorn's access log is off unless ``gateway.accessLog`` is true.
TLS is left to the proxy in front (docs/http.md). Each response is written to the socket
once (:mod:`ditto_worker.gateway.protocol`).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ditto_worker.errors import ConfigError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ditto_worker.config import RuntimeConfig

__all__ = ["build_app", "fleet_ready", "serve"]

CONFIG_ENV = "DITTO_GATEWAY_CONFIG"
"""The ``ditto.yaml`` a worker process of ``--workers N`` reads (set by :func:`serve`)."""


def build_app(config: RuntimeConfig, config_path: str | Path | None) -> FastAPI:
    """The app over ``create_ditto(None, config)``, closed with the app.

    Raises:
        ConfigError: no gateway identities, or an invalid ``gateway:`` section.
    """
    from ditto_worker.gateway.app import create_app
    from ditto_worker.gateway.settings import load_gateway_settings
    from ditto_worker.runtime import create_ditto

    settings = load_gateway_settings(config_path)
    runtime = create_ditto(None, config)
    ready = None if config.fleet.in_process else _ready_check(config)
    try:
        return create_app(runtime, settings, call_timeout_s=config.fleet.call_timeout_s,
                          ready=ready, owns_runtime=True)  # fmt: skip
    except ConfigError:
        runtime.close()
        raise


def _ready_check(config: RuntimeConfig):  # type: ignore[no-untyped-def]
    async def ready() -> bool:
        return await asyncio.to_thread(fleet_ready, config)

    return ready


def fleet_ready(config: RuntimeConfig, timeout_s: float = 2.0) -> bool:
    """True when the broker and the result backend both answer within ``timeout_s``."""
    from kombu import Connection  # type: ignore[attr-defined]

    try:
        with Connection(config.fleet.broker_url, connect_timeout=timeout_s) as conn:  # type: ignore[no-untyped-call]
            conn.ensure_connection(max_retries=1, timeout=timeout_s)
        backend = config.fleet.result_backend or config.fleet.broker_url
        if backend.startswith(("redis://", "rediss://", "unix://")):
            import redis

            client = redis.Redis.from_url(
                backend, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
            )
            try:
                client.ping()
            finally:
                client.close()
    except Exception:  # noqa: BLE001 - any failure to answer is "not ready"
        return False
    return True


def app_from_env() -> FastAPI:
    """The app of one ``--workers N`` process (uvicorn factory): config from the env."""
    from ditto_worker.config import default_config

    path = os.environ.get(CONFIG_ENV) or None
    return build_app(default_config(Path(path) if path else None), path)


# uvicorn's supervisor restarts a --workers process that does not answer its ping within
# this many seconds: uvicorn's own default, 5 s, killed healthy workers that were still
# importing on a busy machine (a restart loop); a hung process is still replaced, later
WORKER_HEALTHCHECK_S = 60


def serve(
    config: RuntimeConfig,
    config_path: str | Path | None,
    host: str = "127.0.0.1",
    port: int = 8080,
    workers: int = 1,
) -> None:
    """Run the gateway until SIGTERM/SIGINT.

    Raises:
        ConfigError: ``workers`` > 1 on the embedded runtime; see :func:`build_app`.
    """
    import uvicorn

    from ditto_worker.gateway.protocol import coalescing_protocol
    from ditto_worker.gateway.settings import load_gateway_settings

    settings = load_gateway_settings(config_path)
    # each response reaches the socket in one write (gateway.protocol); no WebSocket
    # routes, so no WebSocket upgrade either
    http, ws, grace_s = coalescing_protocol(), "none", int(settings.shutdown_grace_s)
    keep_alive_s, access_log = settings.keep_alive_s, settings.access_log
    if workers > 1:
        if config.fleet.in_process:
            raise ConfigError(
                "--workers > 1 needs a broker (fleet.brokerUrl): embedded, each process "
                "would hold its own CONTEXT cache and model"
            )
        if config_path is not None:
            os.environ[CONFIG_ENV] = str(config_path)
        uvicorn.run("ditto_worker.gateway.serve:app_from_env", factory=True, host=host,
                    port=port, workers=workers, http=http, ws=ws, access_log=access_log,
                    timeout_keep_alive=keep_alive_s, timeout_graceful_shutdown=grace_s,
                    timeout_worker_healthcheck=WORKER_HEALTHCHECK_S)  # fmt: skip
        return
    uvicorn.run(build_app(config, config_path), host=host, port=port, http=http, ws=ws,
                access_log=access_log, timeout_keep_alive=keep_alive_s,
                timeout_graceful_shutdown=grace_s)  # fmt: skip
