"""The ``ditto-worker`` command line (typer): one function per command.

Config comes from ``--config`` or ``./ditto.yaml`` (if present), then ``DITTO_*`` env;
``--broker`` overrides the broker and, unless it is an ``amqp://`` one (which needs
``DITTO_RESULT_BACKEND``), the result backend. With no broker
configured, ``invoke`` and ``demo`` run an in-process worker (MEM-PY-7). The text users see
in ``--help`` is :data:`HELP` and each command's docstring: plain text, no markup, no rule
ids (``tests/unit/test_cli_help.py`` keeps it so and checks every command is listed).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from ditto_worker.cli.eval_command import eval_app
from ditto_worker.cli.example import example
from ditto_worker.cli.mcp_command import mcp
from ditto_worker.cli.options import (
    BrokerOpt,
    ConfigOpt,
    LocalStoreOpt,
    ScopeOpt,
    StoreOpt,
    check_store,
    fail,
    load_config,
    scope_or_exit,
)
from ditto_worker.cli.prune_command import prune
from ditto_worker.cli.reindex_command import reindex
from ditto_worker.cli.transfer_command import export, import_
from ditto_worker.cli.worker_command import NodeSelection, resolve_nodes, worker
from ditto_worker.config import RuntimeConfig
from ditto_worker.contracts import to_wire
from ditto_worker.errors import ConfigError, DittoError

__all__ = ["NodeSelection", "app", "main", "resolve_nodes"]

HELP = """Long-term memory for LLM agents, served by a Celery worker fleet.

Every node (MEMORY.GET, QUERY, SEARCH, WRITE, UPDATE, DELETE, RETRIEVAL.SEARCH, and
the CONTEXT and INFER nodes) is a task on its own queue. Settings come from --config or
./ditto.yaml (if present), then DITTO_* environment variables; --broker overrides the
broker. With no broker set, invoke and demo run a worker in this process: invoke on the
configured store (SQLite: ./.ditto/memory.sqlite, kept between calls), demo on a fresh
SQLite file in a temporary folder deleted when it exits.

Run 'ditto-worker COMMAND --help' for a command's options.
"""

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help=HELP,
    rich_markup_mode=None,  # help text is plain: "[retrieval]" is not a markup tag
)


def _print_version(value: bool) -> None:
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    typer.echo(
        f"ditto-worker {of('ditto-worker')} (celery {of('celery')}, kombu {of('kombu')}, "
        f"redis-py {of('redis')}, Python {sys.version.split()[0]})"
    )
    raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print versions and exit."
        ),
    ] = False,
) -> None:
    pass


# the commands in the order --help lists them
app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(worker)

_CHECKOUT_LOCOMO = Path(__file__).resolve().parents[2] / "data" / "locomo" / "30.json"
"""LoCoMo 30.json of a source checkout (not in the wheel: LoCoMo states no licence)."""


@app.command()
def invoke(
    node: Annotated[str, typer.Argument(help="Node id, e.g. MEMORY.GET.")],
    input_json: Annotated[str, typer.Argument(metavar="JSON", help="The node input as JSON.")],
    timeout: Annotated[
        float | None,
        typer.Option(help="Seconds the call may take (default: fleet.callTimeoutS, 30)."),
    ] = None,
    scope: ScopeOpt = None,
    config: ConfigOpt = None,
    broker: BrokerOpt = None,
    store: LocalStoreOpt = None,
) -> None:
    """Run one node call and print its NodeResult as JSON.

    Prints exactly one JSON object on stdout; exit code 0 when its status is success, 1
    otherwise, 2 for a config or option error (one line on stderr). Nodes that keep data
    per tenant and user (CONTEXT.UPDATE, CONTEXT.LOAD, workers with requireScope) need
    --scope tenant=ID,user=ID.
    """
    from ditto_worker.contracts import NodeResult
    from ditto_worker.errors import ErrorCode
    from ditto_worker.fleet.launch import open_fleet

    cfg = load_config(config, broker)
    trusted = scope_or_exit("invoke", scope)
    if cfg.fleet.in_process:
        check_store("invoke", store)
    try:
        payload: Any = json.loads(input_json)
    except json.JSONDecodeError as exc:
        result: NodeResult[Any] = NodeResult.failure(
            "-", node, ErrorCode.INVALID_INPUT, _json_error(exc)
        )
    else:
        with open_fleet(cfg, store=store, open_nodes=[node], scope=trusted) as client:
            result = client.invoke(node, payload, timeout=timeout)
    sys.stdout.write(json.dumps(to_wire(result), ensure_ascii=False) + "\n")
    raise typer.Exit(0 if result.status == "success" else 1)


def _json_error(exc: json.JSONDecodeError) -> str:
    """Where the JSON argument breaks: the parser's reason, line, column and character
    offset (1-based column, 0-based offset as ``json`` counts), never the text itself."""
    return (
        f"Invalid input: the JSON argument is not valid JSON: {exc.msg} at line {exc.lineno} "
        f"column {exc.colno} (character {exc.pos})"
    )


def _demo_where(cfg: RuntimeConfig, store: str | None, run_cfg: RuntimeConfig) -> str:
    """Where the demo's calls run and what they store, as its first output line says."""
    if not cfg.fleet.in_process:
        return "fleet on a broker (redis broker), store of the fleet's workers"
    name = store or cfg.memory_worker.store
    where = " (a temporary file, deleted at exit)" if run_cfg is not cfg else ""
    return f"fleet in-process (memory://), store {name}{where}"


def _demo_config(cfg: RuntimeConfig, store: str | None, tmp: str) -> RuntimeConfig:
    """In-process sqlite demo: a fresh store file of its own in ``tmp``."""
    if not cfg.fleet.in_process or (store or cfg.memory_worker.store) != "sqlite":
        return cfg
    plugins = dict(cfg.plugins)
    plugins["sqlite"] = {**cfg.plugin_settings("sqlite"), "path": os.path.join(tmp, "demo.sqlite")}
    return cfg.model_copy(update={"plugins": plugins})


@app.command()
def demo(
    conversation: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            help="A conversation JSON file (LoCoMo format). Default: data/locomo/30.json "
            "in a source checkout, else the sample conversation installed with the package.",
        ),
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Memories per MEMORY.WRITE.")] = 50,
    keep: Annotated[
        bool,
        typer.Option(
            help="Do not delete the run's memories at the end (the in-process SQLite "
            "demo file is deleted at exit all the same)."
        ),
    ] = False,
    scope: ScopeOpt = None,
    config: ConfigOpt = None,
    broker: BrokerOpt = None,
    store: LocalStoreOpt = None,
) -> None:
    """Write a conversation through the fleet, read it back, search it.

    Every turn is written with MEMORY.WRITE, read back with GET and QUERY, every question
    searched with MEMORY.SEARCH, a few memories changed with MEMORY.UPDATE and the run's
    memories removed with MEMORY.DELETE (unless --keep); prints evidence recall and
    per-node latency.

    With no broker set, the demo runs a worker in this process; with the SQLite store
    (the default) it writes to a fresh file in a temporary folder deleted when the demo
    exits, so nothing is left in ./.ditto/. With a broker, the fleet's workers use their
    own store. With --scope, every call acts for that tenant and user.
    """
    from ditto_worker.cli.demo import SAMPLE_CONVERSATION, run_demo
    from ditto_worker.contracts import NODE_IDS
    from ditto_worker.fleet.launch import open_fleet

    cfg = load_config(config, broker)
    trusted = scope_or_exit("demo", scope)
    if cfg.fleet.in_process:
        check_store("demo", store)
    source: Any = conversation
    if source is None:
        source = _CHECKOUT_LOCOMO if _CHECKOUT_LOCOMO.is_file() else SAMPLE_CONVERSATION
    tmp = tempfile.mkdtemp(prefix="ditto-demo-")
    try:
        run_cfg = _demo_config(cfg, store, tmp)
        shown = "the sample conversation" if source is SAMPLE_CONVERSATION else source.name
        typer.echo(f"ditto-worker demo: {shown}, {_demo_where(cfg, store, run_cfg)}")
        with open_fleet(run_cfg, store=store, open_nodes=NODE_IDS, scope=trusted) as client:
            report = run_demo(client, source, batch_size=batch_size, keep=keep)
    except DittoError as exc:
        fail("demo", f"failed: {exc}", 1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    typer.echo(
        f"{report.turns} turns written, {report.questions} questions with evidence; "
        + "; ".join(f"{k}: {v}" for k, v in report.checks.items())
    )
    r5, r10 = report.recall_at_5, report.recall_at_10
    typer.echo(
        f"{'unknown' if r10 is None else format(r10, '.3f')} = keyword evidence recall@10 "
        f"(recall@5 {'unknown' if r5 is None else format(r5, '.3f')}, "
        f"{report.questions} questions)"
    )
    typer.echo(f"{'node':<15}{'calls':>7}{'p50 ms':>10}{'p95 ms':>10}")
    for node, calls, p50, p95 in report.latency_rows():
        typer.echo(f"{node:<15}{calls:>7}{p50:>10.2f}{p95:>10.2f}")


@app.command()
def status(
    timeout: Annotated[float, typer.Option(help="Seconds to wait for workers' replies.")] = 1.0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per node.")] = False,
    config: ConfigOpt = None,
    broker: BrokerOpt = None,
) -> None:
    """Show each node's queue backlog and its workers.

    The backlog is read from the broker, the workers from celery inspect; needs a broker
    (--broker or DITTO_BROKER_URL).
    """
    from ditto_worker.fleet.celery_app import create_celery_app
    from ditto_worker.fleet.status import collect_status, render_table

    cfg = load_config(config, broker)
    if cfg.fleet.in_process:
        fail("status", "no broker configured (set DITTO_BROKER_URL or --broker)")
    celery_app = create_celery_app(cfg.fleet)
    try:
        rows = collect_status(celery_app, timeout_s=timeout)
    except DittoError as exc:
        fail("status", str(exc), 1)
    finally:
        celery_app.close()
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row.to_dict()))
    else:
        typer.echo(render_table(rows), nl=False)


@app.command()
def flower(
    address: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port.")] = 5555,
    config: ConfigOpt = None,
    broker: BrokerOpt = None,
) -> None:
    """Run Flower (fleet monitoring) behind basic auth.

    Needs a broker (--broker or DITTO_BROKER_URL) and FLOWER_BASIC_AUTH (user:password):
    its pages, API and /metrics ask for it; /healthcheck stays open.
    """
    from ditto_worker.fleet.monitor import run_flower

    cfg = load_config(config, broker)
    try:
        code = run_flower(cfg, address=address, port=port)
    except ConfigError as exc:
        fail("flower", str(exc))
    raise typer.Exit(code or 0)


@app.command()
def migrate(config: ConfigOpt = None, store: StoreOpt = None) -> None:
    """Create or upgrade the store's schema and print its version.

    Versioned and idempotent.

    Exit 0 when done (or the store has no migrations), 1 when the store fails (safe
    message on stderr), 2 for a config error.
    """
    from ditto_worker.runtime.registry import build_store

    cfg = load_config(config, None)
    name = store or cfg.memory_worker.store
    try:
        plugin = build_store(cfg, name)
    except ConfigError as exc:
        fail("migrate", str(exc))
    try:
        run = getattr(plugin, "migrate", None)
        if run is None:
            typer.echo(f"migrate: store {name} has no explicit migrations (nothing to do)")
            return
        report = run()
    except DittoError as exc:
        fail("migrate", f"failed: {exc}", 1)
    finally:
        if callable(getattr(plugin, "close", None)):
            plugin.close()
    applied = ", ".join(map(str, report.applied)) or "none"
    typer.echo(
        f"migrate: store {name}, schema {report.schema} at version {report.version} "
        f"(applied now: {applied})"
    )


app.add_typer(eval_app, name="eval")
app.command("example")(example)
# short help of their own: Click cuts a long first sentence (with "...") in the list
app.command("export", short_help="Write a store's memories as JSON Lines.")(export)
app.command("import", short_help="Write an export file's memories into a store.")(import_)
app.command("reindex", short_help="Re-embed every memory with a new embedding model.")(reindex)
app.command("prune", short_help="Delete a store's expired operation and execution ids.")(prune)
app.command("mcp", short_help="Serve the MEMORY nodes as MCP tools for one scope.")(mcp)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    workers: Annotated[
        int, typer.Option(min=1, help="Server processes (more than 1 needs a broker).")
    ] = 1,
    config: ConfigOpt = None,
    broker: BrokerOpt = None,
) -> None:
    """Serve every node over HTTP: POST /v1/nodes/{node} (docs/http.md).

    The trusted scope comes from the bearer token only (gateway.tokens / gateway.jwt in
    ditto.yaml). With no broker it runs the nodes in this process; with one it enqueues
    them on the fleet. Needs the gateway extra: pip install 'ditto-worker[gateway]'.
    """
    cfg = load_config(config, broker)
    path = (
        config
        if config is not None
        else (Path("ditto.yaml") if Path("ditto.yaml").is_file() else None)
    )
    try:
        from ditto_worker.gateway.serve import serve as run
    except ImportError as exc:
        fail("serve", f"needs the gateway extra ({exc.name} is missing): "
                      "pip install 'ditto-worker[gateway]'")  # fmt: skip
    try:
        run(cfg, path, host=host, port=port, workers=workers)
    except ConfigError as exc:
        fail("serve", f"config error: {exc}")


def main() -> None:
    """Console entry point: warnings and errors on stderr in the format of
    ``DITTO_LOG_FORMAT`` (a worker switches to ``fleet.logFormat`` and its log level)."""
    from ditto_worker.cli.logs import configure_logging

    json_lines = os.environ.get("DITTO_LOG_FORMAT", "").strip().lower() == "json"
    configure_logging(logging.WARNING, "json" if json_lines else "text")
    app()
