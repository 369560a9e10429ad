"""A worker checks its resources before it announces ready (issue 14 item 3).

``ditto-worker worker`` runs :func:`check_resources` before Celery starts: the ``open``
hook of every worker definition serving the selected nodes builds and checks what the
definition needs (a store from ``ditto.yaml``, a model, a Redis connection) — so the fleet
names no node kind. When a hook fails, the worker exits non-zero with one clear line
instead of announcing ``ready`` and failing every call (a bad plugin section,
``--store nosuch``, an unreachable database, a retrieval target's missing store).

Where the check runs: the threads and solo pools run calls in the worker's own process, so
the hooks run there and what they built serves the calls. A prefork worker's calls run in
pool processes forked later; its hooks run in a short-lived forked child (so the main
process keeps no connection or model across the fork) and run again in every pool
process (``worker_process_init``).

A store that must already exist and does not (``StoreMissingError``, e.g. a retrieval
target whose SQLite file the memory workers have not written yet) is waited for up to
``fleet.startWaitS``, so a fleet started all at once (honcho, compose) comes up in any
order. The broker must answer within the same time (:func:`check_broker`); Celery alone
would retry for about 45 minutes and then exit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

from ditto_worker.errors import DittoError, NodeError

__all__ = ["check_broker", "check_resources", "describe_failure", "open_served"]


def check_broker(app: Any, wait_s: float) -> str | None:
    """``None`` when the broker answers within ``wait_s`` seconds, else the line to print
    (Celery itself would retry for about 45 minutes before giving up, logging each try)."""
    connection = app.connection_for_write()
    try:
        connection.ensure_connection(
            max_retries=None, interval_start=0.5, interval_step=0.5, interval_max=2.0,
            timeout=max(wait_s, 1.0),
        )  # fmt: skip
    except Exception as exc:
        return (
            f"the broker does not answer after {wait_s:g} s ({type(exc).__name__}); check "
            "fleet.brokerUrl / DITTO_BROKER_URL and that it runs"
        )
    finally:
        connection.release()
    return None


def describe_failure(kind: str, exc: BaseException) -> str:
    """One line naming the worker kind and what failed, without raw driver text (it may
    carry a URL or credentials): the safe message of a ditto error, else the exception's
    class."""
    if isinstance(exc, NodeError):
        return f"{kind}: {exc.code}: {exc.safe_message}"
    if isinstance(exc, DittoError):
        return f"{kind}: {exc}"
    return f"{kind}: could not open its resources ({type(exc).__name__}; see the log)"


def open_served(runtime: Any, nodes: Iterable[str], wait_s: float = 0.0) -> str | None:
    """Run the ``open`` hook of each definition serving ``nodes`` in this process.

    Args:
        runtime: the worker's :class:`~ditto_worker.fleet.tasks.FleetRuntime`.
        nodes: the node ids this worker serves.
        wait_s: how long to retry a hook that raised ``StoreMissingError``, seconds.

    Returns:
        ``None`` when every hook succeeded, else :func:`describe_failure`'s line.
    """
    from ditto_worker.runtime.registry import StoreMissingError

    wanted = set(nodes)
    definitions = {id(d): d for n, (d, _) in runtime.table.items() if n in wanted}
    deadline = time.monotonic() + wait_s
    runtime.opening_here()  # their close hooks run at this process's shutdown
    for definition in definitions.values():
        if definition.open is None:
            continue
        while True:
            try:
                definition.open()
                break
            except StoreMissingError as exc:
                if time.monotonic() >= deadline:
                    return describe_failure(definition.kind, exc)
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            except Exception as exc:
                return describe_failure(definition.kind, exc)
    return None


def check_resources(
    runtime: Any, nodes: Iterable[str], pool: str, wait_s: float = 0.0
) -> str | None:
    """Open the resources of ``nodes`` before the worker starts (see the module docstring).

    Args:
        runtime: the worker's ``FleetRuntime``.
        nodes: the node ids the worker serves.
        pool: ``prefork`` (checked in a forked child) | ``threads`` | ``solo`` (here).
        wait_s: ``fleet.startWaitS``.

    Returns:
        ``None`` when the worker may start, else the line to print before exiting.
    """
    nodes = list(nodes)
    if pool != "prefork":
        failure = open_served(runtime, nodes, wait_s)
        if failure is None:
            runtime.opened_pid = os.getpid()  # the pool's own hooks need not open them again
        return failure
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the check process: open, report, exit without cleanup
        os.close(read_end)
        code = 1
        try:
            failure = open_served(runtime, nodes, wait_s)
            if failure:
                os.write(write_end, failure.encode("utf-8", "replace")[:4000])
            else:
                code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        report = reader.read().decode("utf-8", "replace")
    _, status = os.waitpid(pid, 0)
    if report:
        return report
    if status != 0:
        return f"the resource check process ended with status {os.waitstatus_to_exitcode(status)}"
    return None
