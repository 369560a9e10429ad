"""Options several ``ditto-worker`` commands share, parsed strictly, and the one way a
command reports a usage or config error: one line on stderr, ``<command>: <message>``,
exit code 2.

``--scope tenant=ID,user=ID[,space=task:ID]`` is the call's trusted scope (SPEC.md MEM-TASK-2,
MEM-PY-3): the operator running the command is the trusted host, so the command line may
give it; a node input never can (:mod:`ditto_worker.memory.scope`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final, NoReturn

import typer

from ditto_worker.config import FleetSettings, RuntimeConfig, default_config
from ditto_worker.errors import ConfigError, MemoryError
from ditto_worker.runtime.registry import available_stores
from ditto_worker.scope import DEFAULT_SPACE, Scope

__all__ = [
    "SCOPE_KEYS",
    "BrokerOpt",
    "ConfigOpt",
    "LocalStoreOpt",
    "ScopeOpt",
    "StoreOpt",
    "check_store",
    "fail",
    "load_config",
    "parse_scope_option",
    "scope_or_exit",
]

SCOPE_KEYS: Final = ("tenant", "user", "space")
"""The keys ``--scope`` takes, each at most once; ``tenant`` and ``user`` are required,
``space`` defaults to ``memory`` (:class:`~ditto_worker.scope.Scope`)."""

ScopeOpt = Annotated[
    str | None,
    typer.Option(
        "--scope",
        metavar="tenant=ID,user=ID",
        help="The trusted scope the calls act for: tenant and user, optionally space=task:ID "
        "(default space memory); the operator gives it as the trusted host would. "
        "Default: unscoped.",
    ),
]


def fail(command: str, message: str, code: int = 2) -> NoReturn:
    """Print ``<command>: <message>`` as one line on stderr and exit with ``code``.

    ``message`` comes from a lower layer and names no command itself (so a prefix is
    never doubled); line breaks in it are folded into spaces.
    """
    typer.echo(f"{command}: {' '.join(message.split())}", err=True)
    raise typer.Exit(code)


def parse_scope_option(value: str) -> Scope:
    """``--scope tenant=ID,user=ID[,space=…]`` as a :class:`~ditto_worker.scope.Scope`.

    Pairs are comma-separated ``key=value``; the value is everything after the first
    ``=`` (it may hold ``=``, not ``,``), kept as written (no trimming).

    Raises:
        ConfigError: naming ``--scope``: a pair without ``=``, a key other than ``tenant``,
            ``user`` or ``space``, a key given twice, a missing tenant or user, an empty
            value, or a value the scope rules refuse (over 256 characters, a control
            character, a space other than ``memory`` or ``task:<taskId>``).
    """
    given: dict[str, str] = {}
    for pair in value.split(","):
        key, sep, part = pair.partition("=")
        if not sep:
            raise ConfigError(f"--scope: {pair!r} is not key=value (give tenant=ID,user=ID)")
        if key not in SCOPE_KEYS:
            raise ConfigError(f"--scope: unknown key {key!r} (the keys are tenant, user, space)")
        if key in given:
            raise ConfigError(f"--scope: {key} is given twice")
        if not part:
            raise ConfigError(f"--scope: {key} is empty")
        given[key] = part
    missing = [key for key in SCOPE_KEYS[:2] if key not in given]
    if missing:
        raise ConfigError(f"--scope: {' and '.join(missing)} missing (give tenant=ID,user=ID)")
    try:
        return Scope(given["tenant"], given["user"], given.get("space", DEFAULT_SPACE))
    except MemoryError as exc:  # "scope.tenant must be a string of 1-256 characters" …
        raise ConfigError(f"--scope: {exc.safe_message}") from None


def scope_or_exit(command: str, value: str | None) -> Scope | None:
    """:func:`parse_scope_option` for ``command``; ``None`` without ``--scope``; a
    malformed one is :func:`fail` (one line, exit 2)."""
    if value is None:
        return None
    try:
        return parse_scope_option(value)
    except ConfigError as exc:
        fail(command, str(exc))


def check_store(command: str, store: str | None) -> None:
    """``--store`` names an installed store plugin, else :func:`fail` (exit 2) listing
    them — before an in-process worker starts and fails every call on it."""
    if store is None or store in available_stores():
        return
    installed = ", ".join(available_stores()) or "none"
    fail(command, f"--store: no store plugin named {store!r}; installed: {installed}")


ConfigOpt = Annotated[Path | None, typer.Option("--config", help="ditto.yaml to load.")]
BrokerOpt = Annotated[
    str | None,
    typer.Option(
        "--broker",
        help="Broker URL (redis://…, amqp://…); overrides ditto.yaml and DITTO_BROKER_URL. "
        "A Redis broker is also the result backend; an amqp:// one needs "
        "DITTO_RESULT_BACKEND.",
    ),
]
StoreOpt = Annotated[
    str | None, typer.Option("--store", help="Store plugin; overrides workers.memory.store.")
]
LocalStoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Store plugin of the in-process worker (no broker set); overrides "
        "workers.memory.store. With a broker the fleet's workers use their own.",
    ),
]


def load_config(path: Path | None, broker: str | None) -> RuntimeConfig:
    """The config of a command: ``--config`` (or ``./ditto.yaml``), ``DITTO_*`` env, then
    ``--broker`` (also the result backend unless it is an ``amqp://`` one); a config error
    exits 2 with one line on stderr."""
    try:
        config = default_config(path)
    except ConfigError as exc:
        typer.echo(f"config error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if broker:
        given = {"broker_url": broker}
        if broker.split("://", 1)[0].lower() not in ("amqp", "amqps", "pyamqp"):
            given["result_backend"] = broker  # an amqp:// broker is no result backend
        context = {"sources": {"brokerUrl": "--broker", "resultBackend": "--broker"}}
        try:
            fleet = FleetSettings.model_validate(
                {**config.fleet.model_dump(), **given}, context=context
            )
        except ConfigError as exc:
            typer.echo(f"config error: {exc}", err=True)
            raise typer.Exit(2) from exc
        config = config.model_copy(update={"fleet": fleet})
    return config
