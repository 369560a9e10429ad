"""``ditto-worker mcp``: the MEMORY nodes as an MCP server for one operator-given scope.

The operator who starts it is the trusted host (as with ``invoke --scope``): every tool
call acts for ``--scope``. Calls run on ``create_ditto``'s runtime: embedded (the
configured store in this process) or, with a broker set (``DITTO_BROKER_URL``,
``--broker``), on the fleet. Needs the ``mcp`` extra.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from ditto_worker.cli.options import BrokerOpt, ConfigOpt, fail, load_config, scope_or_exit
from ditto_worker.errors import ConfigError

__all__ = ["STDIO_HINT", "Transport", "mcp"]

#: Printed on stderr when stdin is a terminal: a stdio MCP server run by hand is silent
#: and waits for JSON-RPC, which reads as a hang. stdout stays the protocol's alone.
STDIO_HINT = (
    "mcp: serving MCP over stdio: an MCP host launches this command and speaks JSON-RPC "
    "on its stdin/stdout (docs/integrations-mcp.md); --transport http serves "
    "http://127.0.0.1:8765/mcp instead. Ctrl-D (end of input) or Ctrl-C stops it."
)


class Transport(StrEnum):
    """Where the MCP server talks: the host's stdin/stdout, or streamable HTTP."""

    stdio = "stdio"
    http = "http"


def mcp(
    scope: Annotated[
        str,
        typer.Option(
            "--scope",
            metavar="tenant=ID,user=ID",
            help="The trusted scope every tool call acts for: tenant and user, optionally "
            "space=task:ID; the operator gives it as the trusted host would.",
        ),
    ],
    transport: Annotated[
        Transport, typer.Option(help="stdio (an MCP host launches it) or http (loopback).")
    ] = Transport.stdio,
    host: Annotated[str, typer.Option(help="http: loopback address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="http: TCP port.")] = 8765,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="http: another Host header to accept (name:port or name:*), repeatable; "
            "loopback names are always accepted (DNS-rebinding protection).",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(help="Seconds each call may take (default: fleet.callTimeoutS, 30)."),
    ] = None,
    artifacts: Annotated[
        Path,
        typer.Option(
            help="Where the task tools publish their artifacts (one folder per "
            "scope), when a model is configured."
        ),
    ] = Path(".ditto/artifacts"),
    task_timeout: Annotated[
        float,
        typer.Option(
            min=0.001,
            help="Seconds a whole task tool call may take (its every stage and model call); "
            "then it ends 'timeout' and the task can be resumed with the same taskId.",
        ),
    ] = 300.0,
    config: ConfigOpt = None,
    broker: BrokerOpt = None,
) -> None:
    """Serve the MEMORY nodes as MCP tools (memory_get ... memory_delete) for one scope.

    stdio by default (what an MCP host such as Claude Desktop launches); --transport http
    serves http://HOST:PORT/mcp on a loopback address, without authentication. The
    authenticated server is /mcp of 'ditto-worker serve'. With a model configured
    (DITTO_WORKER_INFER_BASE_URL, workers.infer.baseUrl) the search and write tasks are
    tools too (memory_task_search, memory_task_write). Needs the mcp extra:
    pip install 'ditto-worker[mcp]'.
    """
    cfg = load_config(config, broker)
    trusted = scope_or_exit("mcp", scope)
    try:
        import anyio

        from ditto_worker.integrations.mcp import create_mcp_server, runtime_call
        from ditto_worker.integrations.mcp.serve import check_loopback, serve_http, serve_stdio
        from ditto_worker.integrations.mcp.server import runtime_specs
    except ImportError as exc:
        fail("mcp", f"needs the mcp extra ({exc.name} is missing): pip install 'ditto-worker[mcp]'")
    if transport is Transport.http:
        try:
            check_loopback(host)
        except ConfigError as exc:
            fail("mcp", str(exc))
    from ditto_worker.runtime import create_ditto

    if trusted is None:  # typer requires --scope; kept for a direct call
        fail("mcp", "--scope tenant=ID,user=ID is required")
    from ditto_worker.memory_tasks.task_tools import task_tools, task_tools_offered

    runtime = create_ditto(None, cfg)
    try:
        extras = []
        if task_tools_offered(runtime):
            extras = task_tools(
                runtime, lambda: (trusted, None), artifacts.resolve(), timeout_s=task_timeout
            )
        server = create_mcp_server(
            runtime_specs(runtime), runtime_call(runtime, trusted, timeout_s=timeout), extras
        )
        if transport is Transport.http:
            serve_http(server, host, port, allowed_hosts=allowed_host or ())
        else:
            _exit_on_interrupt(runtime)  # before the hint, which tells how to stop it
            if sys.stdin.isatty():  # a person ran it in a terminal, not a host over a pipe
                typer.echo(STDIO_HINT, err=True)
            anyio.run(serve_stdio, server)
    finally:
        runtime.close()


INTERRUPT_CLOSE_S = 10.0
"""How long Ctrl-C lets the calls in flight finish before the stdio server exits."""


def _exit_on_interrupt(runtime: Any) -> None:
    """Make SIGINT (Ctrl-C) end the stdio server: close ``runtime`` (calls in flight get
    :data:`INTERRUPT_CLOSE_S` to finish, the store is released), then exit 130; a backstop
    exits 130 five seconds after that even if closing hangs.

    The MCP SDK reads stdin in a worker thread that nothing can interrupt, and asyncio's
    shutdown waits for that thread, so a ``KeyboardInterrupt`` alone left the process
    running until stdin closed. The closing runs on a thread of its own: the handler runs
    on the main thread between two bytecodes, where waiting for anything the main thread
    holds would never end. A second Ctrl-C kills at once (the default handler).
    """

    def close_and_exit() -> None:
        try:
            runtime.close(timeout_s=INTERRUPT_CLOSE_S)
        finally:
            _exit(130)

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        backstop = threading.Timer(INTERRUPT_CLOSE_S + 5.0, _exit, (130,))
        backstop.daemon = True
        backstop.start()
        threading.Thread(target=close_and_exit, name="ditto-mcp-interrupt", daemon=True).start()

    signal.signal(signal.SIGINT, stop)


def _exit(code: int) -> None:
    """Flush stdout and stderr, then end the process at once (no interpreter shutdown:
    it would wait for the SDK's stdin reader thread)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
