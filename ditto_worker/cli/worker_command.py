"""``ditto-worker worker``: a Celery worker on the queues of some nodes (``--nodes``).

:func:`resolve_nodes` turns ``--nodes`` (worker kinds, groups, node ids) into the queues,
pool and concurrency of one worker process; Celery's own worker options pass through,
except those that select queues, the app or the broker. Registered on the command line's
app by :mod:`ditto_worker.cli.commands`.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from ditto_worker.cli.options import BrokerOpt, ConfigOpt, StoreOpt, fail, load_config
from ditto_worker.config import RuntimeConfig
from ditto_worker.errors import ConfigError
from ditto_worker.runtime.registry import NodeTable

__all__ = ["NodeSelection", "resolve_nodes", "worker"]


@dataclass(frozen=True)
class NodeSelection:
    """What ``--nodes`` selects: node ids and how one worker process runs them.

    Attributes:
        nodes: node ids, in the order named (a kind or group expands in its own order).
        concurrency: pool size (a single group's own, else the kind's; 1 for mutations on
            a single-writer store).
        pool: ``prefork`` | ``threads`` | ``solo`` (a single group's own, else the first
            selected kind's; ``threads`` for mutations on a single-writer store).
        state_db: Celery worker state file of that kind (``workers.<name>.stateDb``).
        name: the worker name prefix (the first selected kind, lower case).
    """

    nodes: list[str]
    concurrency: int
    pool: str
    state_db: str
    name: str


def _kind_names(table: NodeTable) -> dict[str, list[str]]:
    kinds: dict[str, list[str]] = {}
    for node, (definition, _) in table.items():
        kinds.setdefault(definition.kind.lower(), []).append(node)
    return kinds


def resolve_nodes(
    config: RuntimeConfig, nodes: str | None, table: NodeTable | None = None,
    store: str | None = None, pool: str | None = None,
) -> NodeSelection:  # fmt: skip
    """What ``--nodes`` names: kinds, groups and/or node ids, comma-separated.

    A kind name (``memory``, ``retrieval``, ``context`` … lower case) is all its nodes; a
    group (``workers.<kind>.groups.<name>``, e.g. ``reads``) is its nodes; anything else
    must be a node id. No ``--nodes`` is ``memory``. Pool, concurrency and state db come
    from the first kind named (``workers.<kind>``), a single group's concurrency and pool
    (when set) from the group. MEMORY mutations alone (the ``writes`` group, or node ids)
    on a store with one writer (``store``, default ``workers.memory.store``; SQLite) run
    on ``threads`` with concurrency 1 (:func:`_one_writer`) unless ``pool`` (``--pool``)
    or their group names a pool.

    Raises:
        ConfigError: a name that is neither a kind, a group nor a node id.
    """
    from ditto_worker.runtime.registry import node_table, worker_definitions

    table = node_table(worker_definitions(config)) if table is None else table
    kinds = _kind_names(table)
    groups = {
        group_name: (kind, group)
        for kind in kinds
        for group_name, group in config.process_settings(kind).groups.items()
    }
    names = [n.strip() for n in (nodes or "memory").split(",") if n.strip()]
    picked: list[str] = []
    for name in names:
        if name.lower() in kinds:
            found = kinds[name.lower()]
        elif name in groups:
            found = list(groups[name][1].nodes)
        elif name.upper() in table:
            found = [name.upper()]
        else:
            raise ConfigError(f"--nodes: {name!r} is neither a worker kind, a group nor a node id")
        picked += [node for node in found if node not in picked]
    unknown = [node for node in picked if node not in table]
    if unknown:
        raise ConfigError(f"--nodes: no worker kind serves {', '.join(unknown)}")
    kind = table[picked[0]][0].kind.lower()
    settings = config.process_settings(kind)
    group = groups[names[0]][1] if len(names) == 1 and names[0] in groups else None
    concurrency = settings.concurrency if group is None else group.concurrency
    chosen = pool or (group.pool if group is not None else None)
    if chosen is None and _one_writer(config, table, picked, store):
        chosen, concurrency = "threads", 1
    return NodeSelection(picked, concurrency, chosen or settings.pool, settings.state_db, kind)


def _one_writer(
    config: RuntimeConfig, table: NodeTable, nodes: list[str], store: str | None
) -> bool:
    """Every node is a MEMORY mutation and the store takes one writer at a time (SQLite):
    the worker then runs one call at a time on one thread. A prefork pool process would add
    the hand-over of each batch (1,000 memories: +11-16 ms CPU, about 10 % of the write
    itself, bench/fleet_writes.py) and a second one only waits for the database's write
    lock (issue 28 item 4)."""
    from ditto_worker.runtime.registry import store_single_writer

    if not all(table[n][0].kind == "MEMORY" and table[n][1].mutation for n in nodes):
        return False
    return store_single_writer(config, store)


_OWN_QUEUE_OPTIONS = ("-Q", "--queues", "-X", "--exclude-queues", "-A", "--app", "-b")


def _celery_extra(args: list[str]) -> list[str]:
    """Celery worker options passed through unchanged (``--max-tasks-per-child 100``,
    ``-O fair``, ``--logfile …``, ``--without-gossip`` …).

    Raises:
        ConfigError: an option that selects queues, the app or the broker, which
            ``--nodes`` / ``--broker`` / ``ditto.yaml`` own.
    """
    for arg in args:
        if arg.split("=", 1)[0] in _OWN_QUEUE_OPTIONS:
            raise ConfigError(
                f"{arg.split('=', 1)[0]} is set by ditto-worker (use --nodes for the "
                "queues, --broker or DITTO_BROKER_URL for the broker)"
            )
    return args


def worker(
    ctx: typer.Context,
    nodes: Annotated[
        str | None,
        typer.Option(help="Worker kinds, groups or node ids, comma-separated (default: memory)."),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-c", help="Pool size; overrides YAML.")
    ] = None,
    pool: Annotated[
        str | None, typer.Option("--pool", "-P", help="prefork | threads | solo.")
    ] = None,
    autoscale: Annotated[
        str | None,
        typer.Option(help="MAX,MIN pool processes (Celery --autoscale); overrides --concurrency."),
    ] = None,
    loglevel: Annotated[str, typer.Option("--loglevel", "-l", help="Log level.")] = "INFO",
    hostname: Annotated[
        str | None, typer.Option("--hostname", "-n", help="Celery node name.")
    ] = None,
    statedb: Annotated[
        str | None,
        typer.Option(
            "--statedb",
            help="Worker state file: revokes survive a restart (%n = node name); "
            "overrides workers.<kind>.stateDb.",
        ),
    ] = None,
    config: ConfigOpt = None,
    broker: BrokerOpt = None,
    store: StoreOpt = None,
) -> None:
    """Start a Celery worker on the queues of some nodes.

    The nodes are --nodes: worker kinds (memory, retrieval, context, infer …), group names
    (reads, writes, search) or node ids, comma-separated; default memory (its six nodes).

    Other options are Celery's own worker options, passed through: --max-tasks-per-child N,
    --max-memory-per-child KIB, -O fair, --prefetch-multiplier N, --logfile FILE,
    --without-gossip, --without-mingle, --without-heartbeat, --time-limit S,
    --soft-time-limit S (see 'celery worker --help'). Queues, app and broker are set here.

    Exit 0 after a normal stop, 2 for a config error, non-zero when the worker cannot start
    (broker unreachable, resources that do not open).
    """
    from ditto_worker.fleet.celery_app import queue_for
    from ditto_worker.fleet.launch import create_worker_app

    cfg = load_config(config, broker)
    if cfg.fleet.in_process:
        fail("worker", "no broker configured (set DITTO_BROKER_URL or --broker)")
    try:
        extra = _celery_extra(list(ctx.args))
        celery_app = create_worker_app(cfg, store=store)
        selection = resolve_nodes(cfg, nodes, celery_app.ditto_runtime.table, store, pool)
    except ConfigError as exc:
        fail("worker", str(exc))
    from ditto_worker.fleet.startup import check_broker, check_resources

    wait_s = cfg.fleet.start_wait_s
    failure = check_broker(celery_app, wait_s) or check_resources(
        celery_app.ditto_runtime, selection.nodes, selection.pool, wait_s
    )
    if failure:  # before Celery announces ready: a worker that would fail every call
        fail("worker", f"cannot start: {failure}", 1)
    state_db = statedb or selection.state_db  # revoked ids persisted across restarts
    suffix = "-".join(n.split(".", 1)[1].lower() for n in selection.nodes)
    name = hostname or f"{selection.name}-{suffix}@{socket.gethostname()}"
    argv = [
        "worker",
        "-Q", ",".join(queue_for(n) for n in selection.nodes),
        "-c", str(concurrency or selection.concurrency),
        "-P", selection.pool,
        "-l", loglevel,
        "-n", name,
        *(["-E"] if cfg.fleet.task_events else []),
        *(["--autoscale", autoscale] if autoscale else []),
        *(["--statedb", state_db] if state_db else []),
        *extra,
    ]  # fmt: skip
    from celery import signals

    from ditto_worker.cli.logs import celery_setup_logging

    fleet = cfg.fleet
    setup = celery_setup_logging(fleet.log_format, fleet.log_repeat_window_s)
    signals.setup_logging.connect(setup, weak=False)  # Celery's level and --logfile, our format
    quiet = ["--quiet"] if fleet.log_format == "json" else []  # no banner among JSON lines
    raise typer.Exit(_run_worker(celery_app, [*quiet, *argv]))


def _run_worker(celery_app: Any, argv: list[str]) -> int:
    """Run Celery's worker command with ``argv``; its exit code (non-zero when it could not
    start). ``app.worker_main`` drops the code Celery's command exits with (a worker that
    fails to connect exited 0); ``app.start`` returns it."""
    import click

    try:
        code = celery_app.start(argv)
    except click.ClickException as exc:  # an unknown or malformed Celery option
        exc.show()
        return int(exc.exit_code)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return int(code or 0)
