"""``fleet:`` — where the queues live, and the check of a broker or result-backend URL."""

from __future__ import annotations

import re
from typing import Any, Final, Literal
from urllib.parse import unquote, urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ditto_worker.config.sections import Section
from ditto_worker.errors import ConfigError

__all__ = ["FLEET_ENV", "CoalescingSettings", "FleetSettings", "check_fleet_url", "sentinel_parts"]


class CoalescingSettings(Section):
    """``fleet.coalescing:`` — concurrent calls of one node from one client travel together
    as one message on that node's queue (:mod:`ditto_worker.fleet.coalescing`)."""

    enabled: bool = Field(
        default=True,
        description="Coalesce concurrent calls of a node into batch messages (a Redis result "
        "backend only). false: one message per call.",
    )
    in_flight: int = Field(
        default=0,
        ge=0,
        description="Messages of one node a client keeps in flight before new calls gather "
        "into the next batch. 0: the concurrency of the worker group serving the node.",
    )
    max_calls: int = Field(
        default=64, ge=1, le=4096, description="A gathering batch goes out at this many calls."
    )
    max_wait_us: int = Field(
        default=2000,
        ge=0,
        description="A gathering batch goes out this many microseconds after its first call "
        "at the latest, even with in-flight messages still unanswered.",
    )


class FleetSettings(Section):
    """``fleet:`` — where the queues live.

    An empty ``broker_url`` means "no server": commands run an in-process worker on
    kombu's ``memory://`` transport with a ``cache+memory://`` result backend (MEM-PY-7).
    """

    broker_url: str = Field(default="", description="Celery broker URL; env DITTO_BROKER_URL.")
    result_backend: str = Field(
        default="",
        description="Result backend URL; env DITTO_RESULT_BACKEND. Empty: the broker's Redis "
        "(or cache+memory:// in-process).",
    )
    call_timeout_s: float = Field(
        default=30.0, gt=0, description="Default client timeout per node call, seconds."
    )
    visibility_timeout_s: float = Field(
        default=3600.0,
        gt=0,
        description="Redis transport: how long an unacknowledged message (a mutation whose "
        "worker died) waits before redelivery, seconds. Longer than the longest call.",
    )

    max_input_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        description="Largest node input a worker accepts, bytes of JSON; larger is "
        "INVALID_INPUT before any handler runs (every node kind).",
    )

    start_wait_s: float = Field(
        default=30.0,
        ge=0,
        description="How long a starting worker waits for the broker to answer and for a "
        "store it only reads (a retrieval target's) to appear, seconds; then it exits "
        "non-zero.",
    )
    time_limit_margin_s: float = Field(
        default=10.0,
        ge=0,
        description="Hard time limit of a call on a prefork worker: its deadline plus this "
        "margin, seconds; a pool process still running the call then is killed and replaced "
        "(the call fails). 0: none. The threads and solo pools enforce no time limit.",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="Log lines of every ditto-worker process: text (UTC timestamp, level, "
        "process, logger, message) or json (one object per line).",
    )
    log_repeat_window_s: float = Field(
        default=60.0,
        ge=0,
        description="A warning or error repeating one logged less than this many seconds "
        "ago is dropped (counted in the next one logged); 0 keeps all.",
    )
    task_events: bool = Field(
        default=True,
        description="Celery task events: task-sent from clients, task-received, -started and "
        "-succeeded/-failed from workers, which Flower and celery events read. false: none "
        "are sent (one Redis publish fewer per call from the client and three from the "
        "worker; the figures are in docs/fleet.md); Flower then shows no tasks.",
    )
    log_content: bool = Field(
        default=False,
        description="Debugging only: show node inputs and NodeResults (memory content, "
        "queries, filter values, model text) in worker logs, Celery events, Flower and "
        "celery inspect. false: ids, node, status, code, sizes and timings only.",
    )

    coalescing: CoalescingSettings = Field(
        default_factory=CoalescingSettings,
        description="Batching of concurrent calls of one node (docs/capacity.md).",
    )

    transport: str = Field(
        default="celery",
        description="How a client with a broker reaches the fleet: an installed "
        "ditto_worker.transports entry point (celery: Celery on the broker).",
    )
    sentinel_master_name: str = Field(
        default="",
        description="Redis Sentinel: the monitored master's name, for a sentinel:// broker "
        "and result backend (their transport option master_name).",
    )
    broker_transport_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Celery broker_transport_options over the fleet's own (e.g. "
        "sentinel_kwargs, socket_timeout); set key by key.",
    )
    result_backend_transport_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Celery result_backend_transport_options (e.g. sentinel_kwargs).",
    )

    @model_validator(mode="after")
    def _amqp_needs_a_result_backend(self) -> FleetSettings:
        scheme = self.broker_url.split("://", 1)[0].lower()
        if scheme in ("amqp", "amqps", "pyamqp") and not self.result_backend:
            raise ConfigError(
                "fleet.resultBackend / DITTO_RESULT_BACKEND is required with an amqp:// broker: "
                "a Redis URL (redis://host:6379/0); results and cancel flags live there"
            )
        return self

    @property
    def in_process(self) -> bool:
        """True when no broker is configured (the embedded default)."""
        return not self.broker_url or self.broker_url.startswith("memory://")

    @field_validator("broker_url", "result_backend")
    @classmethod
    def _fleet_url(cls, value: str, info: ValidationInfo) -> str:
        name = "brokerUrl" if info.field_name == "broker_url" else "resultBackend"
        sources = info.context.get("sources", {}) if isinstance(info.context, dict) else {}
        return check_fleet_url(value, name, sources.get(name))


_BROKER_SCHEMES: Final = (
    "redis", "rediss", "redis+socket", "sentinel", "amqp", "amqps", "pyamqp", "memory",
)  # fmt: skip
_BACKEND_SCHEMES: Final = ("redis", "rediss", "redis+socket", "sentinel", "cache+memory")
FLEET_ENV: Final = {"brokerUrl": "DITTO_BROKER_URL", "resultBackend": "DITTO_RESULT_BACKEND"}
_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def check_fleet_url(url: str, setting: str, source: str | None = None) -> str:
    """Return ``url`` if it can be a broker (``setting`` ``brokerUrl``) or result backend
    (``resultBackend``) URL of the fleet; ``""`` is "not set".

    Checks what Celery would otherwise trip over much later (a ``redis//host`` typo ends
    in an import of a module named ``redis//host``): a ``scheme://`` prefix, a scheme the
    fleet runs on (broker: redis, rediss, redis+socket, sentinel, memory; result backend:
    the same with cache+memory instead of memory), a numeric port and a numeric Redis
    database (``/0``).

    Args:
        url: the value.
        setting: ``brokerUrl`` or ``resultBackend`` (``fleet.<setting>`` in ditto.yaml).
        source: where the value came from, for the message (e.g. ``env DITTO_BROKER_URL``);
            ``None``: ditto.yaml or the environment.

    Raises:
        ConfigError: naming the setting, its env variable and what is wrong; the URL
            itself is never shown (it may carry a password).
    """
    if not url:
        return url
    where = f"fleet.{setting}" + (f" (from {source})" if source else f" / {FLEET_ENV[setting]}")
    for part in url.split(";"):  # sentinel://h1:26379;sentinel://h2:26379
        _check_one_url(part.strip(), setting, where)
    return url


def _check_one_url(url: str, setting: str, where: str) -> None:
    allowed = _BROKER_SCHEMES if setting == "brokerUrl" else _BACKEND_SCHEMES
    example = "redis://127.0.0.1:6379/0"
    match = _SCHEME.match(url)
    if match is None:
        raise ConfigError(
            f"{where}: not a URL: it must start with a scheme and '://', e.g. {example}"
        )
    scheme = match.group(1).lower()
    if scheme not in allowed:
        raise ConfigError(
            f"{where}: the scheme {scheme[:20]!r} is not one the fleet runs on; use one of "
            f"{', '.join(allowed)} (e.g. {example})"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise ConfigError(f"{where}: the port is not a number from 1 to 65535") from None
    if scheme in ("redis", "rediss") and not re.fullmatch(r"/?(\d+)?", parts.path):
        raise ConfigError(f"{where}: the Redis database must be a number, e.g. {example}")


def sentinel_parts(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """``([(host, port), …], master connection kwargs {db, password})`` of a sentinel URL.

    Raises:
        ConfigError: a part that is not ``sentinel://host:port`` (the URL is not shown).
    """
    hosts: list[tuple[str, int]] = []
    kwargs: dict[str, Any] = {}
    for part in url.split(";"):
        split = urlsplit(part.strip())
        if split.scheme != "sentinel" or not split.hostname:
            raise ConfigError("a sentinel URL must be sentinel://host:port[/db], ';'-joined")
        hosts.append((split.hostname, split.port or 26379))
        if split.password and "password" not in kwargs:
            kwargs["password"] = unquote(split.password)
        db = split.path.strip("/")
        if db.isdigit() and "db" not in kwargs:
            kwargs["db"] = int(db)
    return hosts, kwargs
